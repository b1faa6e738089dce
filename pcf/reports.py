"""Reports of studies and runs: tables as pure functions of data frames, their charts, and the
``report.md`` / ``report.html`` writer.

:func:`collect_report` reads the runs once into a :class:`ReportData` of data frames; every table
below is a pure function of those frames, so the app's Report page and the files show the same
numbers. :func:`build_report` arranges tables and charts into a :class:`Report`;
:func:`write_report` renders it as Markdown, as self-contained HTML (charts inlined as SVG) and
the charts as PNG files (rendered with ``vl-convert``; a chart that cannot be rendered is named
in the report and the tables are written regardless).
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
from sqlmodel import Session

from pcf.charts import metric_histogram, slot_share_bars
from pcf.consensus import DEFAULT_WEIGHTS
from pcf.pairwise import TIE, bucket_scores, official_outcome
from pcf.recordings import FIRST, SECOND, SWAP_RULES, RecordedPair
from pcf.results import SIMULATED_LABEL, is_simulated, run_decisions
from pcf.review import accuracy_against, analyse_run, gold_answers
from pcf.settings import price_table
from pcf.store.models import Run
from pcf.store.queries import list_datasets, load_items, run_judgments
from pcf.weights import evaluate_weights, pack_run, weight_table

K_VALUES = (3, 5, 7)
METHODS = {
    "direct": "direct",
    "pcf": "PCF",
    "repeated": "repeated canonical",
    "apoc": "APOCJudge",
}
RULE_LABELS = {
    "order1": "order 1 (direct)",
    "order2": "order 2 (swapped)",
    "agree_only": "agree only",
    "agree_or_decisive": "agree or decisive",
}
AGREEMENT_BANDS = (
    ("all calls agree (1.0)", 1.0, math.inf),
    ("0.8 to <1", 0.8, 1.0),
    ("0.6 to <0.8", 0.6, 0.8),
    ("below 0.6", -math.inf, 0.6),
)
PAIR_COLUMNS = ("pair_id", "bucket", "label", "d1", "d2", "apoc", "reason")
MISSING = "–"
COUNT_COLUMNS = frozenset(
    {"N", "K", "n", "slot", "items", "pairs", "correct", "incorrect", "tie", "improved"}
    | {"regressed", "same", "labelled", "top picks", "ok calls", "primacy", "recency"}
)
"""Columns of counts: printed without decimals even when a missing value made them floats."""
_OTHER = {FIRST: SECOND, SECOND: FIRST}


# ---------------------------------------------------------------- data


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, read from the database once, as data frames.

    Attributes:
        runs: one row per run: names, settings, counts, calls, tokens, cost, ``simulated``.
        decisions: :func:`pcf.review.decision_table` rows of every run, plus ``run``.
        k_prefixes: per labelled PCF or repeated run and K: ``run``, ``K``, ``n``,
            ``accuracy``, ``direct_accuracy`` (shares), ``improved``, ``regressed``.
        weights: :func:`pcf.weights.weight_table` of the labelled PCF and repeated runs.
        slots: per listwise run, candidate count ``n`` and slot: ``run``, ``n``, ``slot``,
            ``top_share``, ``top_count``, ``gold_recall``.
        slot_tests: per listwise run and ``n``: ``run``, ``n``, ``calls``, ``chi2``, ``p_value``.
        pairs: per APOCJudge pair: ``run`` and :data:`PAIR_COLUMNS` (see :func:`pair_frame`).
    """

    runs: pd.DataFrame
    decisions: pd.DataFrame
    k_prefixes: pd.DataFrame
    weights: pd.DataFrame
    slots: pd.DataFrame
    slot_tests: pd.DataFrame
    pairs: pd.DataFrame


def k_values(stored_k: int) -> list[int]:
    """The K prefixes reported for a run that stored ``stored_k`` calls per execution."""
    return sorted({k for k in K_VALUES if k < stored_k} | {stored_k})


def collect_report(runs: Sequence[Run], *, session: Session) -> ReportData:
    """Read and decide the runs' stored judgments; no judge is called.

    Decisions use the proposed weights (as :func:`pcf.results.run_decisions`); the K table uses
    prefixes of each run's stored schedule; the weight table uses every stored call.
    """
    datasets = {d.id: d.name for d in list_datasets(session=session)}
    prices = price_table()
    run_rows, decisions, k_rows, slots, tests, pairs, packed = [], [], [], [], [], [], []
    for run in runs:
        analysis = analyse_run(run, session=session)
        table = analysis.table.assign(run=run.name)
        labelled = int(table["gold"].notna().sum())
        decisions.append(table)
        run_rows.append(_run_row(run, len(table), labelled, datasets, prices))
        if run.protocol == "apoc":
            pairs.append(_apoc_pairs(run, session=session).assign(run=run.name))
            continue
        slots.append(analysis.slot_bias.assign(run=run.name))
        tests.append(analysis.slot_tests.assign(run=run.name))
        if run.protocol in ("pcf", "repeated") and labelled:
            runs_packed = pack_run(run, session=session)
            packed.append(runs_packed)
            for k in k_values(runs_packed.k):
                outcome = evaluate_weights(runs_packed, DEFAULT_WEIGHTS, k=k)
                k_rows.append(
                    {
                        "run": run.name,
                        "K": k,
                        "n": outcome.n,
                        "accuracy": outcome.accuracy,
                        "direct_accuracy": outcome.direct_accuracy,
                        "improved": outcome.improved,
                        "regressed": outcome.regressed,
                    }
                )
    return ReportData(
        runs=pd.DataFrame(run_rows),
        decisions=_concat(decisions),
        k_prefixes=pd.DataFrame(
            k_rows,
            columns=["run", "K", "n", "accuracy", "direct_accuracy", "improved", "regressed"],
        ),
        weights=weight_table(packed) if packed else pd.DataFrame(),
        slots=_concat(slots),
        slot_tests=_concat(tests),
        pairs=_concat(pairs),
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames one under the other; an empty result keeps the first frame's columns."""
    kept = [f for f in frames if not f.empty]
    if kept:
        return pd.concat(kept, ignore_index=True)
    return frames[0] if frames else pd.DataFrame()


def _run_row(
    run: Run,
    items: int,
    labelled: int,
    datasets: Mapping[int, str],
    prices: Mapping[str, Any],
) -> dict[str, Any]:
    tokens = run.input_tokens + run.output_tokens
    return {
        "run": run.name,
        "dataset": datasets.get(run.dataset_id),
        "model": f"{run.backend}/{run.model}",
        "protocol": run.protocol,
        "method": METHODS.get(run.protocol, run.protocol),
        "K": run.k,
        "executions": run.executions,
        "schedule": run.schedule,
        "seed": run.seed,
        "temperature": run.settings.get("identity", {}).get("temperature"),
        "status": run.status,
        "items": items,
        "labelled": labelled,
        "calls_made": run.calls_made,
        "cache_hits": run.cache_hits,
        "failures": run.failures,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_usd": run.cost_usd,
        "priced": is_simulated(run) or run.model in prices or tokens == 0,
        "simulated": is_simulated(run),
    }


def _apoc_pairs(run: Run, *, session: Session) -> pd.DataFrame:
    """An APOCJudge run's pairs in :func:`pair_frame` form; ``first`` = shown first by call 1."""
    items = load_items(run.dataset_id, session=session)
    first = {
        j.item_id: j.order[0]
        for j in run_judgments(run.id, session=session)
        if j.execution == 0 and j.call_index == 0
    }
    by_id = {item.item_id: item for item in items}
    rows = []
    for record in run_decisions(run, session=session, items=items):
        item = by_id[record["item_id"]]
        a = first[item.item_id]

        def frame(decision: str | None, a: str = a) -> str | None:
            if decision is None or decision == TIE:
                return decision
            return FIRST if decision == a else SECOND

        metrics = record["metrics"]
        rows.append(
            {
                "pair_id": item.item_id,
                "bucket": item.bucket or "all",
                "label": None if item.gold is None else frame(item.gold),
                "d1": frame(metrics["direct_verdict"]),
                "d2": frame(metrics["swapped_verdict"]),
                "apoc": frame(metrics["verdict"]),
                "reason": metrics["reason"],
            }
        )
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS), dtype=object)


def pair_frame(pairs: Sequence[RecordedPair]) -> pd.DataFrame:
    """Recorded pairs (``pcf replay``) as the frame the pairwise tables take.

    Decisions and labels are in the pair's original frame: ``first``, ``second``, ``tie`` or
    None. Recordings have no APOCJudge verdict, so ``apoc`` and ``reason`` are None.
    """
    rows = [(p.pair_id, p.bucket, p.label, p.d1, p.d2, None, None) for p in pairs]
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS), dtype=object)


# ---------------------------------------------------------------- tables (pure)


def _simulated(runs: pd.DataFrame, names: Sequence[str] | None = None) -> bool:
    """Whether any of the named runs (all when None) used the simulated judge."""
    if runs.empty:
        return False
    chosen = runs if names is None else runs[runs["run"].isin(list(names))]
    return bool(chosen["simulated"].any())


def settings_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs' settings: dataset, model, method, K, executions, schedule, seed..."""
    return pd.DataFrame(
        {
            "run": runs["run"],
            "dataset": runs["dataset"],
            "model": runs["model"],
            "method": runs["method"],
            "K": runs["K"],
            "executions": runs["executions"],
            "schedule": runs["schedule"],
            "seed": runs["seed"],
            "temperature": runs["temperature"],
            "status": runs["status"],
            "items": runs["items"],
            "labelled": runs["labelled"],
        }
    )


def usage_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs' calls, failures, tokens and cost ("unpriced" when the model has no price)."""
    cost = [
        c if priced else "unpriced"
        for c, priced in zip(runs["cost_usd"], runs["priced"], strict=True)
    ]
    return pd.DataFrame(
        {
            "run": runs["run"],
            "calls made": runs["calls_made"],
            "cache hits": runs["cache_hits"],
            "failures": runs["failures"],
            "input tokens": runs["input_tokens"],
            "output tokens": runs["output_tokens"],
            "cost (USD)": pd.Series(cost, dtype=object),
        }
    )


def main_table(
    runs: pd.DataFrame, decisions: pd.DataFrame, *, protocol: str = "pcf", seed: int = 0
) -> pd.DataFrame:
    """Each ``protocol`` run against its direct baseline (the canonical call) on labelled items.

    Columns: model, run, N (labelled items), direct %, ``<method> %``, Δ points, improved,
    regressed, same, McNemar p (exact), CI low / CI high (95% paired bootstrap of the
    difference, points, seeded). A run without gold labels has N 0 and no figures.
    """
    method = f"{METHODS.get(protocol, protocol)} %"
    columns = [
        "model",
        "run",
        "N",
        "direct %",
        method,
        "Δ points",
        "improved",
        "regressed",
        "same",
        "McNemar p",
        "CI low",
        "CI high",
    ]
    rows = []
    chosen = runs[runs["protocol"] == protocol] if not runs.empty else runs
    for run in chosen.itertuples():
        table = decisions[decisions["run"] == run.run]
        stats = accuracy_against(table, gold_answers(table), seed=seed)
        if stats is None:
            rows.append({"model": run.model, "run": run.run, "N": 0})
            continue
        low, high = stats["ci_points"]
        rows.append(
            {
                "model": run.model,
                "run": run.run,
                "N": stats["n"],
                "direct %": 100 * stats["direct_accuracy"],
                method: 100 * stats["method_accuracy"],
                "Δ points": stats["delta_points"],
                "improved": stats["improved"],
                "regressed": stats["regressed"],
                "same": stats["same"],
                "McNemar p": stats["mcnemar_p"],
                "CI low": low,
                "CI high": high,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def paired_changes(*tables: pd.DataFrame) -> pd.DataFrame:
    """Improved and regressed items per run, from one or more :func:`main_table` frames."""
    rows = [
        {"run": row["run"], "outcome": outcome, "items": int(row[outcome])}
        for table in tables
        for _, row in table[table["N"] > 0].iterrows()
        for outcome in ("improved", "regressed")
    ]
    return pd.DataFrame(rows, columns=["run", "outcome", "items"])


def k_table(runs: pd.DataFrame, k_prefixes: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of repeated canonical and PCF at each K prefix, and the change over direct.

    Direct is each run's own canonical call; K prefixes of the stored runs cost no call.
    """
    columns = [
        "model",
        "method",
        "run",
        "K",
        "N",
        "direct %",
        "accuracy %",
        "Δ vs direct (points)",
        "improved",
        "regressed",
    ]
    if k_prefixes.empty:
        return pd.DataFrame(columns=columns)
    merged = k_prefixes.merge(runs[["run", "model", "protocol", "method"]], on="run")
    merged["order"] = merged["protocol"].map({"repeated": 0, "pcf": 1})
    merged = merged.sort_values(["model", "order", "run", "K"], kind="stable")
    return pd.DataFrame(
        {
            "model": merged["model"],
            "method": merged["method"],
            "run": merged["run"],
            "K": merged["K"],
            "N": merged["n"],
            "direct %": 100 * merged["direct_accuracy"],
            "accuracy %": 100 * merged["accuracy"],
            "Δ vs direct (points)": 100 * (merged["accuracy"] - merged["direct_accuracy"]),
            "improved": merged["improved"],
            "regressed": merged["regressed"],
        }
    ).reset_index(drop=True)


def weights_table(weights: pd.DataFrame) -> pd.DataFrame:
    """:func:`pcf.weights.weight_table` with the preset as a column."""
    return weights.reset_index() if not weights.empty else weights


def _instability_runs(runs: pd.DataFrame, decisions: pd.DataFrame) -> Iterator[tuple[Any, Any]]:
    if runs.empty:
        return
    for run in runs[runs["protocol"].isin(["pcf", "repeated"])].itertuples():
        yield run, decisions[decisions["run"] == run.run]


def instability_table(runs: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """Per PCF or repeated run: items per flag and the mean agreement metrics."""
    rows = [
        {
            "run": run.run,
            "method": run.method,
            "items": len(table),
            "order unstable": int(table["order_unstable"].sum()),
            "overrides direct": int(table["overrides_direct"].sum()),
            "near tie": int(table["near_tie"].sum()),
            "position driven": int(table["position_driven"].sum()),
            "incomplete": int(table["incomplete"].sum()),
            "mean top agreement": table["top_agreement"].mean(),
            "mean Kendall's W": table["kendall_w"].mean(),
        }
        for run, table in _instability_runs(runs, decisions)
    ]
    return pd.DataFrame(rows)


def agreement_distribution(runs: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """Items per band of top agreement (share of calls naming the most frequent top pick)."""
    rows = []
    for run, table in _instability_runs(runs, decisions):
        agreement = table["top_agreement"]
        row: dict[str, Any] = {"run": run.run, "method": run.method}
        for name, low, high in AGREEMENT_BANDS:
            row[name] = int(((agreement >= low) & (agreement < high)).sum())
        row["no usable call"] = int(agreement.isna().sum())
        rows.append(row)
    return pd.DataFrame(rows)


def slot_table(slots: pd.DataFrame) -> pd.DataFrame:
    """Share of top picks per slot, and how often gold won when shown there, per run."""
    if slots.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "run": slots["run"],
            "n": slots["n"],
            "slot": slots["slot"],
            "top picks": slots["top_count"],
            "share of top picks %": 100 * slots["top_share"],
            "gold picked when shown here %": 100 * slots["gold_recall"],
        }
    )


def slot_test_table(slot_tests: pd.DataFrame) -> pd.DataFrame:
    """The chi-square test of top picks per slot against uniform, per run and ``n``."""
    if slot_tests.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "run": slot_tests["run"],
            "n": slot_tests["n"],
            "ok calls": slot_tests["calls"],
            "chi-square": slot_tests["chi2"],
            "p": slot_tests["p_value"],
        }
    )


def _correct(decisions: pd.Series, labels: pd.Series) -> pd.Series:
    return pd.Series(
        [d is not None and d == g for d, g in zip(decisions, labels, strict=True)],
        index=labels.index,
        dtype=bool,
    )


def _labelled(pairs: pd.DataFrame) -> pd.DataFrame:
    return pairs[pairs["label"].isin([FIRST, SECOND])]


def _has_apoc(pairs: pd.DataFrame) -> bool:
    return bool(pairs["apoc"].notna().any())


def official_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """JudgeBench's official score per bucket, over all pairs and macro-averaged over buckets.

    Args:
        pairs: :func:`pair_frame` rows (one run or recording); unlabelled pairs are left out.
    """
    labelled = _labelled(pairs)
    columns = ["bucket", "pairs", "official score %", "correct", "incorrect", "tie"]
    if labelled.empty:
        return pd.DataFrame(columns=columns)
    outcomes = [
        official_outcome(label, _OTHER[label], d1, d2)
        for label, d1, d2 in zip(labelled["label"], labelled["d1"], labelled["d2"], strict=True)
    ]
    scores = bucket_scores(outcomes, list(labelled["bucket"]))
    rows = [
        (name, s["n"], s["score"], s["correct"], s["incorrect"], s["tie"])
        for name, s in [*scores["buckets"].items(), ("all pairs", scores["overall"])]
    ]
    rows.append(("macro average", math.nan, scores["macro"], math.nan, math.nan, math.nan))
    return pd.DataFrame(rows, columns=columns)


def rule_decisions(pairs: pd.DataFrame) -> dict[str, pd.Series]:
    """Each swap-consensus rule's decision per pair, and APOCJudge's verdict when present."""
    out = {
        RULE_LABELS.get(name, name.replace("_", " ")): pd.Series(
            [rule(d1, d2) for d1, d2 in zip(pairs["d1"], pairs["d2"], strict=True)],
            index=pairs.index,
            dtype=object,
        )
        for name, rule in SWAP_RULES.items()
    }
    if _has_apoc(pairs):
        out["APOCJudge"] = pairs["apoc"]
    return out


def pairwise_accuracy_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (%) per bucket of each decision rule side by side: each order alone, the
    swap-consensus rules and APOCJudge; plus all pairs and the macro average over buckets.

    A tie or a missing decision counts as wrong.
    """
    labelled = _labelled(pairs)
    decisions = rule_decisions(labelled)
    correct = pd.DataFrame(
        {f"{name} %": 100 * _correct(d, labelled["label"]) for name, d in decisions.items()}
    )
    correct["bucket"] = labelled["bucket"]
    per_bucket = []
    for bucket in official_table(pairs)["bucket"]:  # JudgeBench's bucket order
        if bucket in ("all pairs", "macro average"):
            continue
        rows = correct[correct["bucket"] == bucket]
        per_bucket.append(
            {"bucket": bucket, "pairs": len(rows), **rows.drop(columns="bucket").mean()}
        )
    frame = pd.DataFrame(per_bucket)
    if frame.empty:
        return frame
    overall = {
        "bucket": "all pairs",
        "pairs": len(correct),
        **correct.drop(columns="bucket").mean(),
    }
    macro = {
        "bucket": "macro average",
        "pairs": math.nan,
        **frame.drop(columns=["bucket", "pairs"]).mean(),
    }
    return pd.concat([frame, pd.DataFrame([overall, macro])], ignore_index=True)


def position_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Swap consistency and position bias over all pairs.

    Consistent: both orders gave the same decision (two ties count, two missing do not);
    primacy: the member shown first won in both orders; recency: the member shown second did.
    """
    n = len(pairs)
    consistent = sum(
        d1 == d2 and d1 is not None for d1, d2 in zip(pairs["d1"], pairs["d2"], strict=True)
    )
    primacy = int(((pairs["d1"] == FIRST) & (pairs["d2"] == SECOND)).sum())
    recency = int(((pairs["d1"] == SECOND) & (pairs["d2"] == FIRST)).sum())
    return pd.DataFrame(
        [
            {
                "pairs": n,
                "consistent %": 100 * consistent / n if n else math.nan,
                "primacy": primacy,
                "recency": recency,
            }
        ]
    )


def abstention_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs each decision rule decided as a tie or not at all (counted wrong in accuracy)."""
    return pd.DataFrame(
        [{name: int((~d.isin([FIRST, SECOND])).sum()) for name, d in rule_decisions(pairs).items()}]
    )


def override_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """APOCJudge's overrides: proposed by the swapped call, accepted or rejected by keyed
    confirmation, or suppressed by the ballpark guard."""
    reasons = pairs["reason"].value_counts()
    accepted, rejected, guarded = (
        int(reasons.get(r, 0)) for r in ("confirmed", "not_confirmed", "guarded")
    )
    return pd.DataFrame(
        [
            {
                "pairs": len(pairs),
                "overrides proposed": accepted + rejected + guarded,
                "accepted (confirmed)": accepted,
                "rejected (not confirmed)": rejected,
                "suppressed (ballpark guard)": guarded,
            }
        ]
    )


# ---------------------------------------------------------------- charts (pure)


def paired_change_chart(changes: pd.DataFrame) -> alt.Chart:
    """Improved and regressed items per run against direct, from :func:`paired_changes`."""
    return (
        alt.Chart(changes)
        .mark_bar()
        .encode(
            y=alt.Y("run:N", title=None, sort=list(dict.fromkeys(changes["run"]))),
            yOffset=alt.YOffset("outcome:N", sort=["improved", "regressed"]),
            x=alt.X("items:Q", title="items", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color(
                "outcome:N",
                scale=alt.Scale(domain=["improved", "regressed"], range=["#2e7d32", "#c62828"]),
                title=None,
            ),
            tooltip=["run:N", "outcome:N", "items:Q"],
        )
        .properties(width=480)
    )


# ---------------------------------------------------------------- the report


@dataclass(frozen=True)
class Table:
    """A titled table; ``simulated`` marks numbers that came from the simulated judge."""

    title: str
    frame: pd.DataFrame
    note: str = ""
    simulated: bool = False


@dataclass(frozen=True)
class Figure:
    """A titled Altair chart; ``name`` is its file stem."""

    title: str
    chart: Any
    name: str
    note: str = ""
    simulated: bool = False


Block = str | Table | Figure


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
    intro: str = ""

    def figures(self) -> list[Figure]:
        """Every figure, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]

    def tables(self) -> list[Table]:
        """Every table, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "chart"


@dataclass
class _Names:
    """Unique figure file stems."""

    used: set[str] = field(default_factory=set)

    def __call__(self, text: str) -> str:
        base = name = _slug(text)
        count = 1
        while name in self.used:
            count += 1
            name = f"{base}-{count}"
        self.used.add(name)
        return name


def build_report(data: ReportData, *, title: str, seed: int = 0) -> Report:
    """The report of the runs in ``data``: settings, main table, paired changes, K table,
    weight table, order instability, slot bias and, for APOCJudge runs, the pairwise section.

    Args:
        data: :func:`collect_report` of the runs.
        title: the report's title.
        seed: seed of the paired bootstrap (the same seed gives the same intervals).
    """
    runs, names = data.runs, _Names()
    sections = [
        Section(
            "Runs",
            (
                Table("Settings", settings_table(runs), "", _simulated(runs)),
                Table(
                    "Calls, failures, tokens and cost",
                    usage_table(runs),
                    "Calls made: requests sent to the judge (retries included). Cache hits: "
                    "answers copied from an identical earlier call, at no cost. Failures: calls "
                    "left without a usable judgment. Cost in USD from the price table.",
                    _simulated(runs),
                ),
            ),
        ),
        _direct_section(data, seed, names),
    ]
    for section in (
        _k_section(data),
        _weights_section(data),
        _instability_section(data, names),
        _slot_section(data, names),
    ):
        if section is not None:
            sections.append(section)
    if not data.pairs.empty:
        for run_name, pairs in data.pairs.groupby("run", sort=False):
            simulated = _simulated(runs, [run_name])
            sections.append(
                Section(f"Pairwise: {run_name}", pairwise_blocks(pairs, simulated=simulated))
            )
    return Report(title, tuple(sections), _simulated(runs))


def _direct_section(data: ReportData, seed: int, names: _Names) -> Section:
    runs = data.runs
    blocks: list[Block] = [
        "Direct = the same rule on each run's canonical call alone (call 0 of execution 0). "
        "Improved: direct wrong, method right; regressed: the reverse. McNemar p is the exact "
        f"test on those two counts; the 95% interval is a paired bootstrap of items (seed {seed})."
    ]
    tables = []
    for protocol, label in (
        ("pcf", "Main table: PCF against direct"),
        ("apoc", "APOCJudge against direct"),
    ):
        table = main_table(runs, data.decisions, protocol=protocol, seed=seed)
        if table.empty:
            continue
        tables.append(table)
        notes = ["Accuracy (%) on labelled items; a tie or no verdict counts as wrong."]
        decided = dict(zip(runs["run"], runs["items"], strict=True))
        without = list(table.loc[table["N"] == 0, "run"])
        if unlabelled := [r for r in without if decided[r]]:
            notes.append(f"No gold labels for {', '.join(unlabelled)}: no accuracy to show.")
        if undecided := [r for r in without if not decided[r]]:
            notes.append(f"No decided item yet in {', '.join(undecided)}.")
        note = " ".join(notes)
        blocks.append(Table(label, table, note, _simulated(runs, list(table["run"]))))
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
                _simulated(runs, list(changes["run"])),
            )
        )
    return Section("Against the direct baseline", tuple(blocks))


def _k_section(data: ReportData) -> Section | None:
    runs = data.runs
    if runs.empty or not runs["protocol"].isin(["pcf", "repeated"]).any():
        return None
    table = k_table(runs, data.k_prefixes)
    if table.empty:
        return Section("K ablation", ("No gold labels: the K table needs them.",))
    return Section(
        "K ablation",
        (
            Table(
                "K table: repeated canonical and PCF at K prefixes",
                table,
                "Each K uses the first K calls of every execution of the stored runs: no new "
                "calls. Δ is the change over direct (the run's canonical call), in points.",
                _simulated(runs, list(table["run"].unique())),
            ),
        ),
    )


def _weights_section(data: ReportData) -> Section | None:
    if data.k_prefixes.empty:
        return None
    table = weights_table(data.weights)
    run_names = list(data.k_prefixes["run"].unique())
    return Section(
        "Weight presets",
        (
            Table(
                "Weight table: the six presets of METHOD.md on the same judgments",
                table,
                "Accuracy (%) with every stored call of each run; Δ vs direct is the change over "
                "the same preset on the canonical call, in points.",
                _simulated(data.runs, run_names),
            ),
        ),
    )


def _instability_section(data: ReportData, names: _Names) -> Section | None:
    table = instability_table(data.runs, data.decisions)
    if table.empty:
        return None
    simulated = _simulated(data.runs, list(table["run"]))
    blocks: list[Block] = [
        Table(
            "Order instability: items per flag",
            table,
            "Top agreement: share of an item's calls naming its most frequent top pick; "
            "Kendall's W: agreement of the rankings (1 = identical). Repeated canonical shows "
            "the judge's instability without any change of order.",
            simulated,
        ),
        Table(
            "Distribution of top agreement (items)",
            agreement_distribution(data.runs, data.decisions),
            "",
            simulated,
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
                _simulated(data.runs, [run_name]),
            )
        )
    return Section("Order instability", tuple(blocks))


def _slot_section(data: ReportData, names: _Names) -> Section | None:
    if data.slots.empty:
        return None
    blocks: list[Block] = [
        Table(
            "Slot bias: top picks per slot",
            slot_table(data.slots),
            "Share of ok calls whose top pick was shown in each slot; gold picked: when the "
            "gold answer sat in that slot, the share of calls that ranked it first.",
            _simulated(data.runs, list(data.slots["run"].unique())),
        ),
        Table(
            "Chi-square test against uniform slots",
            slot_test_table(data.slot_tests),
            "A small p means the judge's top picks favour some slots.",
            _simulated(data.runs, list(data.slot_tests["run"].unique())),
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
                _simulated(data.runs, [run_name]),
            )
        )
    return Section("Slot bias", tuple(blocks))


def pairwise_blocks(pairs: pd.DataFrame, *, simulated: bool) -> tuple[Block, ...]:
    """The pairwise section, for an APOCJudge run or a replayed recording alike.

    Args:
        pairs: :func:`pair_frame` rows of one run or recording.
        simulated: the decisions came from the simulated judge.
    """
    labelled = _labelled(pairs)
    blocks: list[Block] = []
    if labelled.empty:
        blocks.append("No pair has a gold label: scores and accuracy cannot be computed.")
    else:
        if len(labelled) < len(pairs):
            blocks.append(
                f"{len(pairs) - len(labelled)} unlabelled pair(s) are left out of scores."
            )
        blocks += [
            Table(
                "Official score (JudgeBench's rule)",
                official_table(pairs),
                "Both orders' decisions add +1 when they name the correct member and -1 when "
                "they name the other; a positive sum is correct, zero a tie. Score = correct / "
                "pairs; the macro average is the mean over buckets.",
                simulated,
            ),
            Table(
                "Accuracy per bucket, decision rules side by side",
                pairwise_accuracy_table(pairs),
                "Order 1: the pair as given (direct); order 2: swapped. Agree only: the shared "
                "decision when both orders agree. Agree or decisive: also the one order that "
                "picked a member when the other said tie or nothing (its accuracy equals the "
                "official score). A tie or no decision counts as wrong.",
                simulated,
            ),
        ]
    blocks.append(
        Table(
            "Swap consistency and position bias",
            position_table(pairs),
            "Consistent: both orders gave the same decision. Primacy: the member shown first "
            "won in both orders; recency: the member shown second won in both.",
            simulated,
        )
    )
    blocks.append(
        Table(
            "Abstentions per decision rule (pairs)",
            abstention_table(pairs),
            "Pairs a rule decided as a tie or not at all; accuracy counts them as wrong.",
            simulated,
        )
    )
    if _has_apoc(pairs):
        blocks.append(
            Table(
                "Overrides and keyed confirmation",
                override_table(pairs),
                "The swapped call proposes an override when it disagrees with the direct call; "
                "a third call with neutral keys accepts it only if it agrees with the proposal.",
                simulated,
            )
        )
    return tuple(blocks)


def replay_report(pairs: pd.DataFrame, *, title: str, source: Mapping[str, Any]) -> Report:
    """The pairwise report of recorded decisions (``pcf replay ... --report``).

    Args:
        pairs: :func:`pair_frame` of the recording.
        title: the report's title.
        source: what was replayed (file, judge, strategy...), shown as a table.
    """
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
                    Table("What was replayed", described),
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


# ---------------------------------------------------------------- formatting


NUMBER_FORMATS = {
    "official score %": ".2f",
    "McNemar p": ".3g",
    "p": ".3g",
    "cost (USD)": ".4f",
    **dict.fromkeys(("ws", "wB", "wv", "wu", "temperature"), ".2f"),
}
"""Columns whose numbers have their own format (else: % one decimal, Δ and CI signed)."""


def _number_format(column: str) -> str:
    """The format of a non-count number; the column name decides."""
    if column in NUMBER_FORMATS:
        return NUMBER_FORMATS[column]
    if column.endswith("%"):
        return ".1f"
    if "Δ" in column or column.startswith("CI "):
        return "+.1f"
    return ".3f"


def _cell(column: str, value: Any) -> str:
    """One cell as text: missing values as a dash, counts without decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or (column in COUNT_COLUMNS and float(value).is_integer()):
        return f"{int(value):d}"
    return format(float(value), _number_format(column))


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text, formatted as the report prints it (the page shows the same)."""
    return pd.DataFrame(
        {
            str(column): [_cell(str(column), _plain(v)) for v in frame[column]]
            for column in frame.columns
        },
        dtype=object,
    )


def _plain(value: Any) -> Any:
    """numpy scalars as Python values."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _numeric(frame: pd.DataFrame) -> set[str]:
    return {str(c) for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])}


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A pipe table of the formatted frame (``|`` in cells escaped)."""
    shown = display_frame(frame)
    numeric = _numeric(frame)
    header = "| " + " | ".join(_md_cell(c) for c in shown.columns) + " |"
    rule = "|" + "|".join("---:" if c in numeric else "---" for c in shown.columns) + "|"
    body = [
        "| " + " | ".join(_md_cell(v) for v in row) + " |" for row in shown.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def _simulated_note() -> str:
    return f"Simulated judge: {SIMULATED_LABEL.removeprefix('simulated judge: ')}."


@dataclass(frozen=True)
class RenderedCharts:
    """Charts rendered for the files: SVG text and PNG bytes by figure name, and the reason
    for every figure that could not be rendered."""

    svg: dict[str, str]
    png: dict[str, bytes]
    errors: dict[str, str]


def chart_svg(chart: Any) -> str:
    """The chart as SVG text (``vl-convert``)."""
    buffer = io.StringIO()
    chart.save(buffer, format="svg")
    return buffer.getvalue()


def chart_png(chart: Any) -> bytes:
    """The chart as PNG bytes at twice the size (``vl-convert``)."""
    buffer = io.BytesIO()
    chart.save(buffer, format="png", scale_factor=2)
    return buffer.getvalue()


def render_charts(report: Report, *, png: bool = True) -> RenderedCharts:
    """Render every figure; a failure is recorded with its reason, never raised."""
    svg: dict[str, str] = {}
    pngs: dict[str, bytes] = {}
    errors: dict[str, str] = {}
    for figure in report.figures():
        try:
            svg[figure.name] = chart_svg(figure.chart)
            if png:
                pngs[figure.name] = chart_png(figure.chart)
        except Exception as exc:  # any renderer failure: the report goes on without the chart
            svg.pop(figure.name, None)
            errors[figure.name] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            )
    return RenderedCharts(svg, pngs, errors)


def render_markdown(
    report: Report, charts: RenderedCharts, images: Mapping[str, str] | None = None
) -> str:
    """The report as Markdown with pipe tables.

    Args:
        report: the report.
        charts: its rendered charts (only their errors are used here).
        images: figure name -> relative path of its PNG file; figures without a file point to
            ``report.html``.
    """
    images = images or {}
    lines = [f"# {report.title}", ""]
    if report.intro:
        lines += [report.intro, ""]
    if report.simulated:
        lines += [f"> **{_simulated_note()}**", ""]
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, str):
                lines += [block, ""]
                continue
            lines += [f"### {block.title}", ""]
            if isinstance(block, Table):
                lines += [markdown_table(block.frame), ""]
            elif block.name in charts.errors:
                lines += [f"*The chart could not be rendered ({charts.errors[block.name]}).*", ""]
            elif block.name in images:
                lines += [f"![{block.title}]({images[block.name]})", ""]
            else:
                lines += ["*The chart is in report.html.*", ""]
            if block.note:
                lines += [block.note, ""]
            if block.simulated:
                lines += [f"*{_simulated_note()}*", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  color: #1f2933; background: #fff; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 1.7rem; margin-bottom: .4rem; }
h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #d9dee3;
  padding-bottom: .3rem; }
h3 { font-size: 1rem; margin: 1.4rem 0 .5rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .86rem; }
th, td { border: 1px solid #d9dee3; padding: 4px 8px; text-align: left; white-space: nowrap; }
th { background: #f2f4f6; white-space: normal; vertical-align: bottom; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #fafbfc; }
p.note { color: #52606d; font-size: .85rem; margin: .4rem 0; max-width: 60rem; }
p.simulated, div.banner { color: #8a4b00; background: #fff4e5; border-left: 4px solid #f0a030;
  padding: 4px 10px; font-size: .85rem; }
div.banner { font-size: .95rem; padding: 8px 12px; }
p.error { color: #a61b1b; }
img.chart { max-width: 100%; height: auto; }
"""


def html_table(frame: pd.DataFrame) -> str:
    """An HTML table of the formatted frame, every cell escaped."""
    shown = display_frame(frame)
    numeric = _numeric(frame)

    def cls(column: str) -> str:
        return ' class="num"' if column in numeric else ""

    head = "".join(f"<th{cls(c)}>{html.escape(c)}</th>" for c in shown.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{cls(c)}>{html.escape(v)}</td>" for c, v in zip(shown.columns, row, strict=True)
        )
        + "</tr>"
        for row in shown.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report, charts: RenderedCharts) -> str:
    """The report as one self-contained HTML page: no script, no external resource; charts are
    inline SVG images (data URIs)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(report.title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{esc(report.title)}</h1>",
    ]
    if report.intro:
        parts.append(f"<p>{esc(report.intro)}</p>")
    if report.simulated:
        parts.append(f'<div class="banner"><strong>{esc(_simulated_note())}</strong></div>')
    for section in report.sections:
        parts.append(f"<section><h2>{esc(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, str):
                parts.append(f"<p>{esc(block)}</p>")
                continue
            parts.append(f"<h3>{esc(block.title)}</h3>")
            if isinstance(block, Table):
                parts.append(f'<div class="scroll">{html_table(block.frame)}</div>')
            elif block.name in charts.svg:
                data = base64.b64encode(charts.svg[block.name].encode("utf-8")).decode("ascii")
                parts.append(
                    f'<figure><img class="chart" alt="{esc(block.title)}" '
                    f'src="data:image/svg+xml;base64,{data}"></figure>'
                )
            else:
                reason = charts.errors.get(block.name, "no renderer")
                parts.append(
                    f'<p class="error">The chart could not be rendered ({esc(reason)}).</p>'
                )
            if block.note:
                parts.append(f'<p class="note">{esc(block.note)}</p>')
            if block.simulated:
                parts.append(f'<p class="simulated">{esc(_simulated_note())}</p>')
        parts.append("</section>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def report_texts(report: Report) -> tuple[str, str]:
    """``(report.md, report.html)`` as text, for a download (the Markdown names no PNG file)."""
    charts = render_charts(report, png=False)
    return render_markdown(report, charts), render_html(report, charts)


def write_report(report: Report, out: Path) -> dict[str, Any]:
    """Write ``report.md``, ``report.html`` and ``charts/<name>.png`` into ``out``.

    Returns:
        The paths written (``markdown``, ``html``, ``charts``) and ``chart_errors``
        (figure name -> reason) for the charts that could not be rendered.
    """
    out.mkdir(parents=True, exist_ok=True)
    charts = render_charts(report)
    images = {}
    if charts.png:
        (out / "charts").mkdir(exist_ok=True)
    for name, data in charts.png.items():
        (out / "charts" / f"{name}.png").write_bytes(data)
        images[name] = f"charts/{name}.png"
    markdown, page = render_markdown(report, charts, images), render_html(report, charts)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "report.html").write_text(page, encoding="utf-8")
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "charts": [str(out / path) for path in images.values()],
        "chart_errors": charts.errors,
    }


def default_report_runs(current: str | None, names: Sequence[str]) -> list[str]:
    """The runs a report starts with: the study of ``current`` (runs named ``STUDY/...``) when
    it belongs to one, else every run in ``names``."""
    if current and "/" in current:
        study = current.split("/", 1)[0]
        same = [n for n in names if n.startswith(f"{study}/")]
        if same:
            return same
    return list(names)
