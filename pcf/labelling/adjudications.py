"""Adjudication: the annotator's queue, the blind display order, the confidence scale, how
choices read, an item's label history, and labels as CSV or JSON Lines."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from sqlmodel import Session

from pcf.items import CANNOT_TELL, NONE_CORRECT, Item
from pcf.orderings import seeded_rng
from pcf.store import Adjudication, item_positions

PATTERN_TAGS = (
    "unsupported specificity",
    "calibrated narrow correction",
    "near-tie",
    "transfer failure",
)
CHOICE_LABELS = {NONE_CORRECT: "None is correct", CANNOT_TELL: "Cannot tell"}
CONFIDENCE_SCALE = {
    0.0: "guess",
    0.25: "unsure",
    0.5: "fairly sure",
    0.75: "sure",
    1.0: "certain",
}
"""The one confidence scale of the slider, the history and the exports: a share in [0, 1]."""
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list
EXPORT_COLUMNS = tuple(Adjudication.model_fields)  # the CSV columns: every field of a label


def adjudication_queue(
    items: pd.DataFrame, done: Collection[str], skipped: Sequence[str] = ()
) -> list[str]:
    """Item keys to label, most doubtful first (``items``' ``priority``; NaN last, in item
    order), without the ``done`` ones; ``skipped`` ones last, in the order they were skipped."""
    waiting = dict.fromkeys(key for key in by_priority(items)["item_id"] if key not in done)
    later = dict.fromkeys(key for key in skipped if key in waiting)
    return [key for key in waiting if key not in later] + list(later)


def item_index(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """The dataset's items in file order: ``item_id``, ``db_id``, ``position``, NaN ``priority``."""
    rows = item_positions(dataset_id, session=session)
    frame = pd.DataFrame(rows, columns=["item_id", "db_id", "position"])
    return frame.assign(priority=math.nan)


def with_priority(index: pd.DataFrame, table: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`item_index` with each item's review priority in a run (NaN: not decided); as it
    is without a run's decision ``table``."""
    if table is None:
        return index
    priority = table.set_index("item_id")["priority"]
    return index.assign(priority=index["item_id"].map(priority))


def display_order(item: Item, annotator: str) -> tuple[str, ...]:
    """The item's candidate ids in the order shown to ``annotator`` (seeded by both)."""
    permutation = seeded_rng(annotator, item.item_id).permutation(len(item.candidates))
    return tuple(item.candidate_ids[i] for i in permutation)


def confidence_label(share: float | None) -> str:
    """``0.5 · fairly sure`` for a point of the scale, ``0.6`` between points, ``—`` for none."""
    if share is None or math.isnan(share):
        return "—"
    words = CONFIDENCE_SCALE.get(share)
    return f"{share:g} · {words}" if words else f"{share:g}"


def display_labels(shown: Sequence[str]) -> dict[str, str]:
    """``{candidate id: "Candidate 1"}`` for candidates shown in this order."""
    return {cid: f"Candidate {i + 1}" for i, cid in enumerate(shown)}


def choice_label(choice: str, labels: Mapping[str, str]) -> str:
    """How a choice reads: ``Candidate 2 (s20)``, ``None is correct`` or ``Cannot tell``."""
    if choice in CHOICE_LABELS:
        return CHOICE_LABELS[choice]
    return f"{labels[choice]} ({choice})" if choice in labels else choice


def history_frame(history: Iterable[Adjudication], labels: Mapping[str, str]) -> pd.DataFrame:
    """An item's labels, oldest first, choices named with ``labels`` (see :func:`choice_label`)."""
    rows = [
        {
            "label": adj.id,
            "when": adj.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "annotator": adj.annotator,
            "choice": choice_label(adj.choice, labels),
            "confidence": confidence_label(adj.confidence),
            "tags": ", ".join(adj.tags),
            "notes": adj.notes,
            "corrects label": adj.supersedes,
        }
        for adj in history
    ]
    columns = ["label", "when", "annotator", "choice", "confidence", "tags", "notes"]
    return pd.DataFrame(rows, columns=[*columns, "corrects label"])


def adjudications_jsonl(records: Sequence[Mapping[str, Any]]) -> str:
    """Adjudication records (:func:`pcf.store.adjudication_records`) as JSON Lines."""
    return "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in records)


def adjudications_csv(records: Sequence[Mapping[str, Any]]) -> str:
    """Adjudication records as CSV (:func:`csv_text`); tags are joined with ``;``."""
    return csv_text(({**r, "tags": ";".join(r["tags"])} for r in records), EXPORT_COLUMNS)


def csv_text(records: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Records as CSV with a header. Text a spreadsheet would run as a formula (``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return first) gets a leading ``'``; lines end in CRLF
    (RFC 4180), so a carriage return inside a cell is quoted and never splits a row."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(
        {
            c: f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v
            for c, v in r.items()
        }
        for r in records
    )
    return out.getvalue()


def by_priority(table: pd.DataFrame) -> pd.DataFrame:
    """Rows most doubtful first; equal priorities in item order, unknown priorities last."""
    return table.sort_values(
        ["priority", "position"], ascending=[False, True], na_position="last", kind="stable"
    )
