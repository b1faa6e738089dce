"""The report as a document: titled sections of paragraphs, tables and figures, built from the
collected data (:func:`build_report`) or from recorded pairwise judges (:func:`replay_report`);
:mod:`pcf.reports.render` writes it as Markdown, HTML and PNG charts."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pcf.analysis.results import ADAPTIVE_NOTE
from pcf.analysis.triage import RANDOM_DRAWS
from pcf.reports.charts import capture_chart, metric_histogram, paired_change_chart, slot_share_bars
from pcf.reports.collect import ReportData
from pcf.reports.tables import (
    METHODS,
    MICRO_AVERAGE,
    abstention_table,
    adaptive_runs,
    agreement_distribution,
    any_simulated,
    has_apoc,
    instability_table,
    k_table,
    labelled_pairs,
    main_table,
    official_table,
    override_table,
    paired_changes,
    pairwise_accuracy_table,
    pairwise_table,
    position_table,
    settings_table,
    slot_table,
    slot_test_table,
    triage_table,
    usage_table,
)


@dataclass(frozen=True)
class Table:
    """A titled table; ``simulated`` marks numbers of the simulated judge. ``key`` names it in
    ``report.json`` (tables of one key listed together), whose records get ``run`` if set."""

    title: str
    frame: pd.DataFrame
    note: str = ""
    simulated: bool = False
    key: str = ""
    run: str | None = None


@dataclass(frozen=True)
class Figure:
    """A titled Altair chart; ``name`` is its file stem."""

    title: str
    chart: Any
    name: str
    note: str = ""
    simulated: bool = False


Block = str | Table | Figure
_Names = Callable[[str], str]


@dataclass(frozen=True)
class Section:
    """A titled part of the report: paragraphs, tables and figures in order."""

    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Report:
    """A report ready to render as Markdown, HTML or an app page."""

    title: str
    sections: tuple[Section, ...]
    simulated: bool = False

    def blocks(self, kind: type) -> list[Any]:
        """Every block of ``kind`` (:class:`Table` or :class:`Figure`), in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, kind)]


def _namer() -> _Names:
    """Unique figure file stems, from what the figures show."""
    used: set[str] = set()

    def name(text: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "chart"
        stems = itertools.chain([base], (f"{base}-{n}" for n in itertools.count(2)))
        stem = next(s for s in stems if s not in used)
        used.add(stem)
        return stem

    return name


def report_title(names: Sequence[str]) -> str:
    """The title of a report on the runs or studies ``names``, as the CLI and the app give it."""
    return f"PCF report: {', '.join(names)}"


def build_report(data: ReportData, *, title: str, seed: int = 0) -> Report:
    """The report of the runs in ``data`` (:func:`collect_report`): settings, main table, paired
    changes, K and weight tables, order instability, triage, slot bias and the pairwise sections;
    ``seed`` seeds the paired bootstrap."""
    runs, names = data.runs, _namer()
    sections = [
        Section(
            "Runs",
            (
                Table(
                    "Settings",
                    settings_table(runs),
                    _adaptive(
                        runs,
                        "Adaptive runs ({runs}), decided with the weights in their stopping "
                        f"column: {ADAPTIVE_NOTE}.",
                    ),
                    any_simulated(runs),
                    "settings",
                ),
                Table(
                    "Calls, failures, tokens and cost",
                    usage_table(runs),
                    "Calls made: requests sent to the judge (retries included). Cache hits: "
                    "answers copied from an identical earlier call, at no cost. Failures: calls "
                    "left without a usable judgment. Cost in USD from the price table. Per "
                    "item: the run's stored calls and cost over its items; the direct judge "
                    "makes one call per item.",
                    any_simulated(runs),
                    "usage",
                ),
            ),
        ),
        _direct_section(data, seed, names),
    ]
    optional = (
        _pairwise_section(data),
        _k_section(data),
        _weights_section(data),
        _instability_section(data, names),
        _triage_section(data, seed, names),
        _slot_section(data, names),
    )
    sections += [section for section in optional if section is not None]
    if not data.pairs.empty:
        for run_name, pairs in data.pairs.groupby("run", sort=False):
            simulated = any_simulated(runs, [run_name])
            blocks = pairwise_blocks(pairs, simulated=simulated, run=str(run_name))
            sections.append(Section(f"Pairwise: {run_name}", blocks))
    return Report(title, tuple(sections), any_simulated(runs))


def _adaptive(runs: pd.DataFrame, text: str) -> str:
    """``text`` naming the adaptive runs among ``runs`` at ``{runs}`` ("" when there are none)."""
    adaptive = adaptive_runs(runs)
    return text.replace("{runs}", ", ".join(adaptive)) if adaptive else ""


def _left_out(runs: pd.DataFrame) -> str:
    """The K and weight tables' note on the adaptive runs they leave out."""
    return _adaptive(
        runs,
        " Left out: the adaptive runs {runs}, whose items stopped after different numbers of "
        "calls once their winner under one set of weights was settled; their first K calls, or "
        "other weights, are not a K-call run or that weighting's run.",
    )


def _direct_section(data: ReportData, seed: int, names: _Names) -> Section:
    runs = data.runs
    blocks: list[Block] = [
        "Direct = the same rule on each run's canonical call alone (call 0 of execution 0). "
        "Improved: direct wrong, method right; regressed: the reverse. McNemar p is the exact "
        f"test on those two counts; the 95% interval is a paired bootstrap of items (seed {seed})."
    ]
    tables = []
    for protocol, label, key in (
        ("pcf", "Main table: PCF against direct", "main"),
        ("apoc", "APOCJudge against direct", "apoc_main"),
    ):
        table = main_table(runs, data.decisions, protocol=protocol, seed=seed)
        if table.empty:
            continue
        tables.append(table)
        notes = [
            "Accuracy (%) on labelled items, every execution averaged; a tie or no verdict "
            "counts as wrong."
        ]
        if (table["model"] == MICRO_AVERAGE).any():
            notes.append("Micro average: the labelled items of every run above pooled.")
        decided = dict(zip(runs["run"], runs["items"], strict=True))
        without = list(table.loc[(table["N"] == 0) & (table["model"] != MICRO_AVERAGE), "run"])
        if unlabelled := [r for r in without if decided[r]]:
            notes.append(f"No gold labels for {', '.join(unlabelled)}: no accuracy to show.")
        if undecided := [r for r in without if not decided[r]]:
            notes.append(f"No decided item yet in {', '.join(undecided)}.")
        if adaptive := [r for r in adaptive_runs(runs, (protocol,)) if r in set(table["run"])]:
            notes.append(
                f"Adaptive: {', '.join(adaptive)} (see Settings), decided with the weights "
                "it stopped on over the calls it made."
            )
        note = " ".join(notes)
        simulated = any_simulated(runs, list(table["run"]))
        blocks.append(Table(label, table, note, simulated, key))
    if not tables:
        blocks.append("No PCF or APOCJudge run in this report: nothing to compare with direct.")
        return Section("Against the direct baseline", tuple(blocks))
    changes = paired_changes(*tables)
    if changes.empty:
        blocks.append("No run has gold labels, so there are no paired changes to chart.")
    else:
        blocks.append(
            Figure(
                "Paired changes against direct",
                paired_change_chart(changes),
                names("paired changes"),
                "Items per run that the method got right and direct wrong (improved), and the "
                "reverse (regressed).",
                any_simulated(runs, list(changes["run"])),
            )
        )
    return Section("Against the direct baseline", tuple(blocks))


def _pairwise_section(data: ReportData) -> Section | None:
    """Table 4's form: direct and APOCJudge per bucket, the macro averages and delta."""
    if data.pairs.empty:
        return None
    table = pairwise_table(data.runs, data.pairs)
    if table.empty:
        return Section("Pairwise against direct", ("No pair has a gold label.",))
    shown = Table(
        "Pairwise: direct and APOCJudge per bucket (Table 4)",
        table,
        "Accuracy (%) on labelled pairs; N counts unique pairs. Direct: call 1, the pair in "
        "canonical order. The macro average is the mean over buckets; its Δ is the macro delta, "
        "in points. A tie or no verdict counts as wrong.",
        any_simulated(data.runs, list(table["run"].unique())),
        "pairwise",
    )
    return Section("Pairwise against direct", (shown,))


def _k_section(data: ReportData) -> Section | None:
    runs = data.runs
    if not runs["protocol"].isin(["pcf", "repeated"]).any():
        return None
    table = k_table(runs, data.k_prefixes)
    if table.empty:
        if adaptive_runs(runs):
            return Section("K ablation", (f"No K table.{_left_out(runs)}",))
        return Section("K ablation", ("No gold labels: the K table needs them.",))
    shown = Table(
        "K table: repeated canonical and PCF at K prefixes (execution 0)",
        table,
        "A matched single-run diagnostic: each K uses the first K calls of execution 0 alone, "
        "never the executions pooled, so PCF and repeated canonical (method repeated) spend the "
        "same K calls; no new calls. Δ is the change over direct (the run's canonical call), in "
        "points." + _left_out(runs),
        any_simulated(runs, list(table["run"].unique())),
        "k",
    )
    return Section("K ablation", (shown,))


def _weights_section(data: ReportData) -> Section | None:
    if data.k_prefixes.empty:
        if adaptive_runs(data.runs):
            return Section("Weight presets", (f"No weight table.{_left_out(data.runs)}",))
        return None
    shown = Table(
        "Weight table: the six presets of METHOD.md on the same judgments (execution 0)",
        data.weights,
        "Accuracy (%) with the calls of execution 0 of each run (the matched runs of the K table "
        "at their stored K); direct % and Δ vs direct: the same preset on the canonical call, Δ "
        "in points." + _left_out(data.runs),
        any_simulated(data.runs, list(data.k_prefixes["run"].unique())),
        "weights",
    )
    return Section("Weight presets", (shown,))


def _instability_section(data: ReportData, names: _Names) -> Section | None:
    table = instability_table(data.runs, data.decisions)
    if table.empty:
        return None
    simulated = any_simulated(data.runs, list(table["run"]))
    blocks: list[Block] = [
        Table(
            "Order instability: items per flag",
            table,
            "Top agreement: share of an item's calls naming its most frequent top pick; "
            "Kendall's W: agreement of the rankings (1 = identical). Repeated canonical shows "
            "the judge's instability without any change of order.",
            simulated,
            "instability",
        ),
        Table(
            "Distribution of top agreement (items)",
            agreement_distribution(data.runs, data.decisions),
            "",
            simulated,
            "agreement",
        ),
    ]
    for run_name in table.loc[table["method"] == METHODS["pcf"], "run"]:
        rows = data.decisions[data.decisions["run"] == run_name]
        blocks.append(
            Figure(
                f"Distribution of order instability: {run_name}",
                metric_histogram(
                    rows, "top_agreement", "top agreement (1 = every ordering agrees)"
                ).properties(width=480, height=220),
                names(f"instability {run_name}"),
                "Items per bin of top agreement.",
                any_simulated(data.runs, [run_name]),
            )
        )
    return Section("Order instability", tuple(blocks))


def _triage_section(data: ReportData, seed: int, names: _Names) -> Section | None:
    table, frames = triage_table(data.runs, data.decisions, seed=seed)
    if table.empty:
        return None
    blocks: list[Block] = [
        Table(
            "Review triage: errors found per share of items reviewed",
            table,
            "Items reviewed most doubtful first (the review priority) against a random order "
            f"(the mean of {RANDOM_DRAWS} seeded orders, seed {seed}); an error is a winner other "
            "than gold, an abstention included. Capture AUC: the area under the curve of errors "
            "found against items reviewed (0.5 at random). `pcf triage` gives more orders.",
            any_simulated(data.runs, list(table["run"].unique())),
            "triage",
        )
    ]
    for run_name, frame in frames.items():
        blocks.append(
            Figure(
                f"Errors found per share reviewed: {run_name}",
                capture_chart(frame),
                names(f"triage {run_name}"),
                "The grey band holds 90% of random orders.",
                any_simulated(data.runs, [run_name]),
            )
        )
    return Section("Review triage", tuple(blocks))


def _slot_section(data: ReportData, names: _Names) -> Section | None:
    if data.slots.empty:
        return None
    blocks: list[Block] = [
        Table(
            "Slot bias: top picks per slot",
            slot_table(data.slots),
            "Share of ok calls whose top pick was shown in each slot; gold picked: when the "
            "gold answer sat in that slot, the share of calls that ranked it first.",
            any_simulated(data.runs, list(data.slots["run"].unique())),
            "slots",
        ),
        Table(
            "Chi-square test against uniform slots",
            slot_test_table(data.slot_tests),
            "A small p means the judge's top picks favour some slots.",
            any_simulated(data.runs, list(data.slot_tests["run"].unique())),
            "slot_tests",
        ),
    ]
    pcf_runs = set(data.runs.loc[data.runs["protocol"] == "pcf", "run"])
    for (run_name, n), slots in data.slots.groupby(["run", "n"], sort=False):
        if run_name not in pcf_runs:
            continue
        blocks.append(
            Figure(
                f"Slot bias: {run_name} ({n} candidates)",
                slot_share_bars(slots).properties(width=360, height=220),
                names(f"slot bias {run_name} n{n}"),
                "Share of top picks per slot; the dashed line is the uniform share 1/n.",
                any_simulated(data.runs, [run_name]),
            )
        )
    return Section("Slot bias", tuple(blocks))


def pairwise_blocks(
    pairs: pd.DataFrame, *, simulated: bool, run: str | None = None
) -> tuple[Block, ...]:
    """The pairwise section of one APOCJudge run or replayed recording (:func:`pair_frame`
    rows); ``run`` is added to the tables' records in ``report.json``."""
    labelled = labelled_pairs(pairs)
    blocks: list[Block] = []
    table = functools.partial(Table, simulated=simulated, run=run)  # every table of the section
    if labelled.empty:
        blocks.append("No pair has a gold label: scores and accuracy cannot be computed.")
    else:
        if len(labelled) < len(pairs):
            blocks.append(
                f"{len(pairs) - len(labelled)} unlabelled pair(s) are left out of scores."
            )
        blocks += [
            table(
                "Official score (JudgeBench's rule)",
                official_table(pairs),
                "Both orders' decisions add +1 when they name the correct member and -1 when "
                "they name the other; a positive sum is correct, zero a tie. Score = correct / "
                "pairs; the macro average is the mean over buckets.",
                key="official",
            ),
            table(
                "Accuracy per bucket, decision rules side by side",
                pairwise_accuracy_table(pairs),
                "Order 1: the pair as given (direct); order 2: swapped. Agree only: the shared "
                "decision when both orders agree. Agree or decisive: also the one order that "
                "picked a member when the other said tie or nothing (its accuracy equals the "
                "official score). A tie or no decision counts as wrong.",
                key="pairwise_rules",
            ),
        ]
    blocks += [
        table(
            "Swap consistency and position bias",
            position_table(pairs),
            "Consistent: both orders gave the same decision. Primacy: the member shown first "
            "won in both orders; recency: the member shown second won in both.",
            key="position",
        ),
        table(
            "Abstentions per decision rule (pairs)",
            abstention_table(pairs),
            "Pairs a rule decided as a tie or not at all; accuracy counts them as wrong.",
            key="abstentions",
        ),
    ]
    if has_apoc(pairs):
        blocks.append(
            table(
                "Overrides and keyed confirmation",
                override_table(pairs),
                "The swapped call proposes an override when it disagrees with the direct call; "
                "a third call with neutral keys accepts it only if it agrees with the proposal.",
                key="overrides",
            )
        )
    return tuple(blocks)


def replay_report(pairs: pd.DataFrame, *, title: str, source: Mapping[str, Any]) -> Report:
    """The pairwise report of recorded decisions (``pcf replay ... --report``); ``source`` says
    what was replayed (file, judge, strategy...)."""
    described = pd.DataFrame(
        [{**source, "pairs": len(pairs), "buckets": pairs["bucket"].nunique()}]
    )
    return Report(
        title,
        (
            Section(
                "Recording",
                (
                    "Recorded decisions of a real judge in both orders, replayed: no judge is "
                    "called.",
                    Table("What was replayed", described, key="recording"),
                ),
            ),
            Section("Pairwise", pairwise_blocks(pairs, simulated=False)),
        ),
    )


def judgebench_source(path: Path) -> dict[str, str]:
    """What a JudgeBench outputs file holds, from its name
    (``dataset=judgebench,response_model=...,judge_name=...,judge_model=....jsonl``)."""
    parts = dict(part.split("=", 1) for part in path.stem.split(",") if "=" in part)
    return parts or {"file": path.name}


def default_report_runs(current: str | None, names: Sequence[str]) -> list[str]:
    """The runs a report starts with: the study of ``current`` (runs named ``STUDY/...``) when
    it belongs to one, else every run in ``names``."""
    if current and "/" in current:
        study = current.split("/", 1)[0]
        same = [n for n in names if n.startswith(f"{study}/")]
        if same:
            return same
    return list(names)
