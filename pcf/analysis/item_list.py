"""The review list: a run's items filtered and sorted most doubtful first."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import pandas as pd
from sqlmodel import Session

from pcf.items import letter_labels
from pcf.labelling.adjudications import by_priority
from pcf.store import item_db_ids, list_datasets

ADJUDICATED_FILTERS = ("all", "adjudicated", "not adjudicated")


def filter_items(
    table: pd.DataFrame,
    *,
    flags: Collection[str] = (),
    overrides_only: bool = False,
    buckets: Collection[str] = (),
    adjudicated: str = "all",
    labelled: Collection[str] = (),
    matching: Collection[str] | None = None,
) -> pd.DataFrame:
    """The rows of a :attr:`RunAnalysis.table` that pass every filter given, most doubtful first:
    any of ``flags``, ``overrides_only``, ``buckets``, ``adjudicated`` or not (``labelled``: the
    keys someone labelled), and ``matching`` a text search (None: no search)."""
    if adjudicated not in ADJUDICATED_FILTERS:
        raise ValueError(f"adjudicated must be one of {ADJUDICATED_FILTERS}, got {adjudicated!r}")
    keep = pd.Series(True, index=table.index)
    if flags:
        keep &= table[list(flags)].any(axis=1)
    if overrides_only:
        keep &= table["overrides_direct"]
    if buckets:
        keep &= table["bucket"].isin(list(buckets))
    if adjudicated != "all":
        is_labelled = table["item_id"].isin(list(labelled))
        keep &= is_labelled if adjudicated == "adjudicated" else ~is_labelled
    if matching is not None:
        keep &= table["item_id"].isin(list(matching))
    return by_priority(table[keep])


def list_view(rows: pd.DataFrame, labelled: Mapping[str, int]) -> pd.DataFrame:
    """The item list as the Review page shows it, candidates by their letters (A, B...)."""

    def letters(column: str) -> list[str | None]:
        return [
            letter_labels(ids).get(cid) if isinstance(cid, str) else None
            for cid, ids in zip(rows[column], rows["candidate_ids"], strict=True)
        ]

    return pd.DataFrame(
        {
            "item": rows["item_id"],
            "priority": rows["priority"].round(3),
            "flags": rows["flags"],
            "PCF winner": letters("winner"),
            "direct winner": letters("direct_winner"),
            "gold": letters("gold"),
            "bucket": rows["bucket"],
            "labels": [labelled.get(key, 0) for key in rows["item_id"]],
        }
    ).reset_index(drop=True)


def neighbours(keys: Sequence[str], current: str | None) -> tuple[str | None, str | None]:
    """The items before and after ``current`` in ``keys`` (none and the first when absent)."""
    if current not in keys:
        return None, keys[0] if keys else None
    at = keys.index(current)
    return (keys[at - 1] if at > 0 else None), (keys[at + 1] if at + 1 < len(keys) else None)


def datasets_holding(item_key: str, *, session: Session) -> list[str]:
    """Names of the datasets that have an item ``item_key``, in the datasets' order."""
    return [
        dataset.name
        for dataset in list_datasets(session=session)
        if item_key in item_db_ids(dataset.id, session=session)
    ]
