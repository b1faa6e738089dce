"""The report's tables, each a pure function of data frames (:mod:`pcf.reports.collect`):
settings and usage, the main table, the K table, the weight tables, order instability, slot
bias, and the pairwise tables (JudgeBench's official score, decision rules, position bias)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from pcf.analysis.results import paired_stats
from pcf.analysis.triage import (
    answers_of,
    curve_frame,
    doubt_curve,
    item_scores,
    random_baseline,
    summarize,
)
from pcf.analysis.weight_playground import WEIGHT_NAMES
from pcf.connectors.recordings import FIRST, SECOND, SWAP_RULES, recorded_outcome
from pcf.flags import FLAGS
from pcf.judges import judge_label
from pcf.pairwise import bucket_order, bucket_scores
from pcf.prices import UNPRICED, cost_text
from pcf.weights import PRESETS

METHODS = {
    "direct": "direct",
    "pcf": "PCF",
    "repeated": "repeated canonical",
    "apoc": "APOCJudge",
}
RULE_LABELS = {"order1": "order 1 (direct)", "order2": "order 2 (swapped)"}  # else: "agree only"...
AGREEMENT_BANDS = (
    ("all calls agree (1.0)", 1.0, math.inf),
    ("0.8 to <1", 0.8, 1.0),
    ("0.6 to <0.8", 0.6, 0.8),
    ("below 0.6", -math.inf, 0.6),
)
RUN_FIELDS = {
    "name": "run",
    "protocol": "protocol",
    "judge": "judge",
    "k": "K",
    "schedule": "schedule",
    "executions": "executions",
    "status": "status",
    "calls": "calls",
    "cache_hits": "cache hits",
    "failures": "failures",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "cost_usd": "cost",
}
"""The runs table's columns: the listing's fields, ``judge`` (:func:`~pcf.judges.judge_label`)
added."""


def adaptive_runs(runs: pd.DataFrame, protocols: Sequence[str] = ("pcf", "repeated")) -> list[str]:
    """The names of the runs of ``protocols`` that stopped their items adaptively."""
    return list(runs.loc[runs["stopping"].notna() & runs["protocol"].isin(protocols), "run"])


def any_simulated(runs: pd.DataFrame, names: Sequence[str] | None = None) -> bool:
    """Whether any of the named runs (all when None) used the simulated judge."""
    chosen = runs if names is None else runs[runs["run"].isin(list(names))]
    return bool(chosen["simulated"].any())


def settings_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs' settings: dataset, model, method, K, executions, schedule, seed..."""
    columns = "run dataset model method K executions schedule stopping seed temperature status"
    return runs[[*columns.split(), "items", "labelled"]].assign(
        stopping=runs["stopping"].map(
            lambda label: f"adaptive: {label}" if isinstance(label, str) else "full run"
        )
    )


def usage_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs' attempts (requests sent, retries included), failures, tokens and cost
    ("unpriced" when the model has no price), and calls and cost per item (the direct judge
    makes one call per item)."""
    items = runs["items"].where(runs["items"] > 0)
    cost = runs["cost_usd"].astype(object).where(runs["priced"], UNPRICED)
    per_item = (runs["cost_usd"] / items).astype(object).where(runs["priced"], UNPRICED)
    counted = ["run", "attempts", "cache_hits", "failures", "input_tokens", "output_tokens"]
    table = runs[counted].rename(columns=lambda column: column.replace("_", " "))
    table["cost (USD)"] = cost
    table["calls per item"] = runs["stored_calls"] / items
    table["cost per item (USD)"] = per_item
    return table


MICRO_AVERAGE = "micro average"


def main_table(
    runs: pd.DataFrame, decisions: pd.DataFrame, *, protocol: str = "pcf", seed: int = 0
) -> pd.DataFrame:
    """Each ``protocol`` run against its direct baseline (the canonical call) on labelled items:
    accuracies, paired changes, McNemar p and a seeded 95% bootstrap CI (a run without gold has
    N 0); over several models, a last ``micro average`` row pools their labelled items."""
    method = f"{METHODS.get(protocol, protocol)} %"
    figures = ["direct %", method, "Δ points", "improved", "regressed", "same", "McNemar p"]
    columns = ["model", "run", "N", *figures, "CI low", "CI high"]
    chosen = runs[runs["protocol"] == protocol].itertuples()
    parts = [(run.model, run.run, decisions[decisions["run"] == run.run]) for run in chosen]
    if len({model for model, _, _ in parts}) > 1:
        pooled = pd.concat([table for *_, table in parts], ignore_index=True)
        parts.append((MICRO_AVERAGE, f"{len(parts)} runs", pooled))
    rows = []
    for model, run, table in parts:
        known = table[table["gold"].notna()]
        if known.empty:
            rows.append((model, run, 0, *[math.nan] * (len(columns) - 3)))
            continue
        s = paired_stats(known, known["gold"], seed=seed)
        shares = (100 * s["direct_accuracy"], 100 * s["method_accuracy"])
        counts = (s[k] for k in ("delta_points", "improved", "regressed", "same", "mcnemar_p"))
        interval = s["ci_points"] or (math.nan, math.nan)  # None: undefined, no usable pair
        rows.append((model, run, s["n"], *shares, *counts, *interval))
    return pd.DataFrame(rows, columns=columns)


def paired_changes(*tables: pd.DataFrame) -> pd.DataFrame:
    """Improved and regressed items per run, from one or more :func:`main_table` frames."""
    rows = [
        {"run": row["run"], "outcome": outcome, "items": int(row[outcome])}
        for table in tables
        for _, row in table[(table["N"] > 0) & (table["model"] != MICRO_AVERAGE)].iterrows()
        for outcome in ("improved", "regressed")
    ]
    return pd.DataFrame(rows, columns=["run", "outcome", "items"])


def k_table(runs: pd.DataFrame, k_prefixes: pd.DataFrame) -> pd.DataFrame:
    """Repeated canonical and PCF at each K, matched: the first K calls of execution 0 alone
    against each run's own canonical call (direct)."""
    figures = ["direct %", "accuracy %", "Δ vs direct (points)", "improved", "regressed"]
    columns = ["model", "method", "run", "K", "N", *figures]
    if k_prefixes.empty:
        return pd.DataFrame(columns=columns)
    merged = k_prefixes.merge(runs[["run", "model", "protocol"]], on="run")
    merged["order"] = merged["protocol"].map({"repeated": 0, "pcf": 1})
    merged = merged.sort_values(["model", "order", "run", "K"], kind="stable")
    merged["direct %"] = 100 * merged["direct_accuracy"]
    merged["accuracy %"] = 100 * merged["accuracy"]
    merged["Δ vs direct (points)"] = 100 * (merged["accuracy"] - merged["direct_accuracy"])
    named = merged.rename(columns={"protocol": "method", "n": "N"})
    return named[columns].reset_index(drop=True)


def _instability_runs(runs: pd.DataFrame, decisions: pd.DataFrame) -> Iterator[tuple[Any, Any]]:
    for run in runs[runs["protocol"].isin(["pcf", "repeated"])].itertuples():
        yield run, decisions[decisions["run"] == run.run]


def instability_table(runs: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """Per PCF or repeated run: items per flag and the mean agreement metrics over the items
    with two ok judgments or more (one ranking agrees with itself: its top agreement and W say
    nothing), undefined (NaN) without any."""
    rows = [
        {
            "run": run.run,
            "method": run.method,
            "items": len(table),
            **{flag.replace("_", " "): int(table[flag].sum()) for flag in FLAGS},
            "items judged twice or more": len(measured := table[table["n_ok"] >= 2]),
            "mean top agreement": measured["top_agreement"].mean(),
            "mean Kendall's W": measured["kendall_w"].mean(),
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
    names = {
        "top_count": "top picks",
        "top_share": "share of top picks %",
        "gold_recall": "gold picked when shown here %",
    }
    percent = slots.assign(
        top_share=100 * slots["top_share"], gold_recall=100 * slots["gold_recall"]
    )
    return percent[["run", "n", "slot", *names]].rename(columns=names)


def slot_test_table(slot_tests: pd.DataFrame) -> pd.DataFrame:
    """The chi-square test of top picks per slot against uniform, per run and ``n``."""
    names = {"calls": "ok calls", "chi2": "chi-square", "p_value": "p"}
    return slot_tests[["run", "n", *names]].rename(columns=names)


def labelled_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    return pairs[pairs["label"].isin([FIRST, SECOND])]


def has_apoc(pairs: pd.DataFrame) -> bool:
    return bool(pairs["apoc"].notna().any())


def official_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """JudgeBench's official score of labelled pairs per bucket, overall and macro-averaged."""
    labelled = labelled_pairs(pairs)
    columns = ["bucket", "pairs", "official score %", "correct", "incorrect", "tie"]
    if labelled.empty:
        return pd.DataFrame(columns=columns)
    outcomes = [
        recorded_outcome(label, d1, d2)
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
    if has_apoc(pairs):
        out["APOCJudge"] = pairs["apoc"]
    return out


def pairwise_accuracy_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (%) per bucket of each decision rule side by side, plus all pairs and the macro
    average over buckets; a tie or a missing decision counts as wrong."""
    labelled = labelled_pairs(pairs)
    decisions = rule_decisions(labelled)
    correct = pd.DataFrame(
        {f"{name} %": 100 * (d == labelled["label"]) for name, d in decisions.items()}
    )
    buckets = labelled["bucket"]
    frame = pd.DataFrame(
        {"bucket": b, "pairs": int((buckets == b).sum()), **correct[buckets == b].mean()}
        for b in bucket_order(list(buckets))  # JudgeBench's order, as the scores
    )
    if frame.empty:
        return frame
    overall = {"bucket": "all pairs", "pairs": len(correct), **correct.mean()}
    macro = {"bucket": "macro average", "pairs": math.nan, **frame.iloc[:, 2:].mean()}
    return pd.concat([frame, pd.DataFrame([overall, macro])], ignore_index=True)


def pairwise_table(runs: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Table 4's form: per APOCJudge run, accuracy (%) per bucket of direct (call 1) and of
    APOCJudge, then their macro averages and delta; a tie or no verdict counts as wrong."""
    columns = ["model", "run", "bucket", "N", "direct %", "APOCJudge %", "Δ points"]
    rows = []
    for run_name, mine in pairs.groupby("run", sort=False):
        labelled = labelled_pairs(mine).drop_duplicates("pair_id")
        if labelled.empty:
            continue
        model = runs.loc[runs["run"] == run_name, "model"].iloc[0]
        direct = 100 * (labelled["d1"] == labelled["label"])
        apoc = 100 * (labelled["apoc"] == labelled["label"])
        per_bucket = [
            (bucket, int(chosen.sum()), direct[chosen].mean(), apoc[chosen].mean())
            for bucket in bucket_order(list(labelled["bucket"]))
            for chosen in [labelled["bucket"] == bucket]
        ]
        macro = ("macro average", len(labelled), *pd.DataFrame(per_bucket)[[2, 3]].mean())
        rows += [(model, run_name, b, n, d, a, a - d) for b, n, d, a in [*per_bucket, macro]]
    return pd.DataFrame(rows, columns=columns)


def position_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Swap consistency (two ties count, two missing decisions do not), primacy and recency."""
    n = len(pairs)
    consistent = int(((pairs["d1"] == pairs["d2"]) & pairs["d1"].notna()).sum())
    primacy = int(((pairs["d1"] == FIRST) & (pairs["d2"] == SECOND)).sum())
    recency = int(((pairs["d1"] == SECOND) & (pairs["d2"] == FIRST)).sum())
    row = {
        "pairs": n,
        "consistent %": 100 * consistent / n if n else math.nan,
        "primacy": primacy,
        "recency": recency,
    }
    return pd.DataFrame([row])


def abstention_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs each decision rule decided as a tie or not at all (counted wrong in accuracy)."""
    return pd.DataFrame(
        [{name: int((~d.isin([FIRST, SECOND])).sum()) for name, d in rule_decisions(pairs).items()}]
    )


def override_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """APOCJudge's overrides: proposed, accepted, rejected, or suppressed by the guard."""
    reasons = pairs["reason"].value_counts()
    accepted, rejected, guarded = (
        int(reasons.get(r, 0)) for r in ("confirmed", "not_confirmed", "guarded")
    )
    row = {
        "pairs": len(pairs),
        "overrides proposed": accepted + rejected + guarded,
        "accepted (confirmed)": accepted,
        "rejected (not confirmed)": rejected,
        "suppressed (ballpark guard)": guarded,
    }
    return pd.DataFrame([row])


def weight_table(records: pd.DataFrame) -> pd.DataFrame:
    """Preset records of runs side by side: a row per preset, its weights, then each run's
    ``"<run> accuracy %"`` and ``"<run> Δ vs direct"``."""
    table = pd.DataFrame(
        {name: weights.as_tuple() for name, weights in PRESETS.items()}, index=list(WEIGHT_NAMES)
    ).T.rename_axis("preset")
    for name, rows in records.groupby("run", sort=False):
        by_preset = rows.set_index("preset")
        table[f"{name} accuracy %"] = by_preset["accuracy %"]
        table[f"{name} Δ vs direct"] = by_preset["Δ vs direct (points)"]
    return table


def runs_table(listing: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per run of a listing (:func:`pcf.analysis.results.run_listing_priced`),
    :data:`RUN_FIELDS`, its cost as text (``unpriced`` for None)."""
    rows = [
        {
            **r,
            "judge": judge_label(r["backend"], r["model"], r["base_url"]),
            "cost_usd": cost_text(r["cost_usd"]),
        }
        for r in listing
    ]
    return pd.DataFrame(rows, columns=list(RUN_FIELDS)).rename(columns=RUN_FIELDS)


def triage_table(
    runs: pd.DataFrame, decisions: pd.DataFrame, *, seed: int = 0
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Per PCF run with gold: errors found most doubtful first and in a random order (mean of
    seeded draws) at 10, 20 and 30% of the items, with areas; and each run's curve frame."""
    rows, frames = [], {}
    for run, table in _instability_runs(runs, decisions):
        if run.protocol != "pcf" or table["gold"].isna().all():
            continue
        known = answers_of(table, dict(zip(table["item_id"], table["gold"], strict=True)))
        wrong = list(known["wrong"])
        curves = [doubt_curve("review priority", wrong, item_scores(known, "priority"))]
        baseline = random_baseline(wrong, seed=seed)
        figures = summarize(curves, wrong, seed=seed, baseline=baseline)
        frames[run.run] = curve_frame(curves, wrong, baseline=baseline)
        for order, shown in (
            ("review priority", figures["orders"]["review priority"]),
            ("random (mean)", figures["random"]),
        ):
            rows.append(
                {
                    "run": run.run,
                    "order": order,
                    "items": figures["items"],
                    "errors": figures["errors"],
                    **{
                        f"found at {share}": round(100 * value, 2)
                        for share, value in shown["caught_at"].items()
                    },
                    "capture AUC": shown["capture_auc"],
                }
            )
    return pd.DataFrame(rows), frames
