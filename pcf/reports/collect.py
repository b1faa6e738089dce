"""A report's data: the runs read from the database once, into the data frames every table of
:mod:`pcf.reports.tables` is a pure function of (the app's page and the files agree)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlmodel import Session

from pcf.analysis.results import (
    is_adaptive,
    is_simulated,
    run_decisions,
    run_judge,
    stopping_label,
    stored_analysis,
    usage,
)
from pcf.analysis.weight_playground import K_COLUMNS, run_diagnostics
from pcf.connectors.recordings import FIRST, SECOND, RecordedPair
from pcf.prices import price_table, run_cost
from pcf.prompts import TIE
from pcf.reports.tables import METHODS
from pcf.store import Run, list_datasets, load_items, run_judgments

PAIR_COLUMNS = ("pair_id", "bucket", "label", "d1", "d2", "apoc", "reason")


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, as data frames: a row per run; every run's decision table;
    per labelled full PCF or repeated run, its K prefixes and preset weights (execution 0); per
    listwise run, slot bias and its tests; per APOCJudge pair, ``run`` and :data:`PAIR_COLUMNS`.
    """

    runs: pd.DataFrame
    decisions: pd.DataFrame
    k_prefixes: pd.DataFrame
    weights: pd.DataFrame
    slots: pd.DataFrame
    slot_tests: pd.DataFrame
    pairs: pd.DataFrame


def collect_report(runs: Sequence[Run], *, session: Session) -> ReportData:
    """The runs' stored decisions (with their own weights, every execution) and diagnostics,
    decided from stored judgments when missing or stale; no judge is called. The K and weight
    tables are matched diagnostics of execution 0 alone, so they leave adaptive runs out."""
    datasets = {d.id: d.name for d in list_datasets(session=session)}
    prices = price_table()
    run_rows, decisions, slots, tests, pairs, k_rows, presets = [], [], [], [], [], [], []
    for run in runs:
        analysis = stored_analysis(run, session=session)
        table = analysis.table.assign(run=run.name)
        decisions.append(table)
        run_rows.append(_run_row(run, table, datasets, prices))
        if run.protocol == "apoc":
            pairs.append(_apoc_pairs(run, session=session).assign(run=run.name))
            continue
        slots.append(analysis.slot_bias.assign(run=run.name))
        tests.append(analysis.slot_tests.assign(run=run.name))
        labelled = table["gold"].notna().any()
        if run.protocol in ("pcf", "repeated") and labelled and not is_adaptive(run):
            diagnostics = run_diagnostics(run, session=session)
            k_rows.append(diagnostics.k_prefixes)
            presets.append(diagnostics.presets)
    return ReportData(
        runs=pd.DataFrame(run_rows),
        decisions=_concat(decisions),
        k_prefixes=_concat(k_rows) if k_rows else pd.DataFrame(columns=list(K_COLUMNS)),
        weights=_concat(presets),
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
    run: Run, table: pd.DataFrame, datasets: Mapping[int, str], prices: Mapping[str, Any]
) -> dict[str, Any]:
    """The report's row of a run with its decision ``table``."""
    return {
        "run": run.name,
        "dataset": datasets.get(run.dataset_id),
        "model": run_judge(run),
        "protocol": run.protocol,
        "method": METHODS.get(run.protocol, run.protocol),
        "K": run.k,
        "executions": run.executions,
        "schedule": run.schedule,
        "stopping": stopping_label(run),
        "seed": run.seed,
        "temperature": run.settings.identity.temperature,
        "status": run.status,
        "items": len(table),
        "stored_calls": int(table["n_calls"].sum()),
        "labelled": int(table["gold"].notna().sum()),
        **usage(run),
        "cost_usd": run.cost_usd,
        "priced": run_cost(run, prices) is not None,
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
        item, m = by_id[record["item_id"]], record["metrics"]
        sides = {first[item.item_id]: FIRST, None: None, TIE: TIE}  # any other id: SECOND
        verdicts = (item.gold, m["direct_verdict"], m["swapped_verdict"], m["verdict"])
        shown = (sides.get(v, SECOND) for v in verdicts)
        rows.append((item.item_id, item.bucket or "all", *shown, m["reason"]))
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS), dtype=object)


def pair_frame(pairs: Sequence[RecordedPair]) -> pd.DataFrame:
    """Recorded pairs (``pcf replay``) as the pairwise tables' frame (no ``apoc``, ``reason``)."""
    rows = [(p.pair_id, p.bucket, p.label, p.d1, p.d2, None, None) for p in pairs]
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS), dtype=object)
