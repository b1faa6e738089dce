"""From judgments to decisions: consensus winner, direct winner, instability and flags."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from pcf.consensus import Consensus, JudgmentArrays, apply_rule, listing_error, pack
from pcf.errors import DataError
from pcf.instability import Instability, instability
from pcf.items import Item, item_listing
from pcf.judgments import INVALID_JUDGMENT, Judgment, JudgmentLines
from pcf.weights import DEFAULT_WEIGHTS, Weights

FILE_CHUNK = 1000
"""Items decided at a time by :func:`aggregate_file`."""
METRICS = ("top_agreement", "top_entropy", "kendall_w", "margin", "slot_following")
COMPONENTS = {"S": "mean_score", "B": "borda", "V": "vote", "U": "certainty"}


@dataclass(frozen=True)
class Decisions:
    """Decisions for the items of one :class:`JudgmentArrays` group; ``ranking``: candidate
    columns best first (:func:`~pcf.consensus.consensus_ranking` or Kemeny's), and
    ``kemeny_search``: ``exact`` or ``local`` for ``kemeny``."""

    arrays: JudgmentArrays
    consensus: Consensus
    direct: Consensus
    instability: Instability
    ranking: np.ndarray
    kemeny_search: str | None = None

    def records(self) -> list[dict[str, Any]]:
        """One ``decisions.jsonl`` object per item."""
        a, c, d, ins = self.arrays, self.consensus, self.direct, self.instability
        winners = c.winner_ids(a)
        direct_winners = d.winner_ids(a)
        metrics = {name: _nums(getattr(ins, name)) for name in (*METRICS, "priority")}
        scores = _nums(c.score)
        components = {part: _nums(getattr(c, name)) for part, name in COMPONENTS.items()}
        n_ok, n_calls = ins.n_ok.tolist(), ins.n_calls.tolist()
        out = []
        for row, (item_id, ids) in enumerate(zip(a.item_ids, a.candidate_ids, strict=True)):
            has_ok = bool(n_ok[row])
            out.append(
                {
                    "item_id": item_id,
                    "winner": winners[row],
                    "ranking": [ids[col] for col in self.ranking[row] if col >= 0],
                    "consensus": dict(zip(ids, scores[row], strict=True)) if has_ok else {},
                    "flags": ins.flag_names(row),
                    "metrics": {
                        **{name: metrics[name][row] for name in METRICS},
                        "direct_winner": direct_winners[row],
                        "priority": metrics["priority"][row],
                        "n_ok": int(n_ok[row]),
                        "n_calls": int(n_calls[row]),
                        "components": {
                            part: dict(zip(ids, values[row], strict=True))
                            for part, values in components.items()
                        }
                        if has_ok
                        else {},
                    }
                    | ({"kemeny_search": self.kemeny_search} if self.kemeny_search else {}),
                }
            )
        return out


def _num(value: float) -> float | None:
    """A metric for JSON: rounded to 6 decimals, None for NaN, never ``-0.0``."""
    value = float(value)
    return None if math.isnan(value) else round(value, 6) + 0.0


def _nums(values: np.ndarray) -> list[Any]:
    """:func:`_num` of every value of ``values``, as nested lists of its shape: each distinct
    value is rounded once (a run's scores and metrics take few values)."""
    distinct, where = np.unique(np.asarray(values, dtype=float), return_inverse=True)
    rounded = np.array([_num(v) for v in distinct.tolist()], dtype=object)
    return rounded[where.reshape(np.shape(values))].tolist()


def decide(
    arrays: JudgmentArrays,
    *,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
) -> Decisions:
    """Decide every item of a group under ``rule`` (:data:`pcf.choices.RULES`; ``weights`` for
    Eq. 5 and Kemeny's consensus scores) on each execution's first ``k`` calls and each item's
    first ``executions``; direct is the same rule on the canonical call alone."""
    used = arrays.prefix(k, executions)
    result, ranking, search = apply_rule(used, rule, weights)
    baseline, _, _ = apply_rule(arrays.execution(0).prefix(k=1), rule, weights)
    return Decisions(
        used, result, baseline, instability(used, result, baseline.winner), ranking, search
    )


def aggregate(
    judgments: Iterable[Judgment],
    *,
    items: Sequence[Item] | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
) -> list[dict[str, Any]]:
    """``decisions.jsonl`` records for every judged item, in the items file's order when
    ``items`` is given (its listing order also breaks exact ties), else in order of first
    appearance in ``judgments``."""
    listing = {i.item_id: i.candidate_ids for i in items} if items else None
    return _aggregate(
        list(judgments), listing, weights=weights, k=k, executions=executions, rule=rule
    )


def _aggregate(
    judgments: list[Judgment],
    listing: Mapping[str, Sequence[str]] | None,
    **options: Any,
) -> list[dict[str, Any]]:
    """:func:`aggregate` with the items given as their candidate ids (``listing``)."""
    records: dict[str, dict[str, Any]] = {}
    for group in pack(judgments, listing):
        for record in decide(group, **options).records():
            records[record["item_id"]] = record
    order = list(listing) if listing else list(dict.fromkeys(j.item_id for j in judgments))
    return [records[i] for i in order if i in records]


@contextmanager
def aggregate_file(
    path: str | Path,
    *,
    items: str | Path | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
    size: int = FILE_CHUNK,
) -> Iterator[tuple[list[str], TextIO]]:
    """:func:`aggregate` of a ``judgments.jsonl`` (with an ``items.jsonl``), ``size`` items at
    a time so that memory does not grow with the file: the same records, notes and errors as
    ``aggregate(read_judgments(path), items=load_dataset("jsonl", items), ...)``.

    The lines of an item need not be together (:class:`~pcf.judgments.JudgmentLines`). Every
    line is checked before anything comes out: the records go to a temporary file first.

    Yields:
        The errors of the lines read as failed calls (``invalid_judgment: ...``) in line order,
        and the temporary file of the records (JSON Lines), open at its start.

    Raises:
        DataError: the problems of ``path``, else those of ``items``.
        ValueError: an item whose calls show other candidates than ``items`` lists (the first
            one :func:`~pcf.consensus.pack` would meet: fewest candidates, then first in
            ``path``).
    """
    options = {"weights": weights, "k": k, "executions": executions, "rule": rule}
    judgments = JudgmentLines(path)
    listing: dict[str, tuple[str, ...]] = {}
    unreadable: DataError | None = None
    if items is not None:
        try:
            listing = item_listing(items)
        except DataError as exc:
            unreadable = exc
    number = judgments.items
    # Listed items in the items file's order (the records' order); the unlisted ones are read
    # for their problems alone (their records are left out).
    decided = [number[i] for i in listing if i in number] if listing else list(number.values())
    unlisted = [x for item_id, x in number.items() if item_id not in listing] if listing else []
    notes: list[tuple[int, str]] = []
    mismatch: tuple[tuple[int, int], ValueError] | None = None
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        for part, decide_part in ((decided, True), (unlisted, False)):
            for start in range(0, len(part), size):
                read = judgments.read(part[start : start + size])
                notes += [
                    (line, j.error)
                    for line, j in read
                    if j.error and j.error.startswith(INVALID_JUDGMENT)
                ]
                if not decide_part:
                    continue
                calls = [j for _, j in read]
                chunk = {j.item_id: listing[j.item_id] for j in calls} if listing else None
                firsts = {j.item_id: j for j in reversed(calls)}.values()  # each item's first call
                for first in firsts if chunk else ():
                    at = (len(listing[first.item_id]), number[first.item_id])
                    error = listing_error(first, listing[first.item_id])
                    if error and (mismatch is None or at < mismatch[0]):
                        mismatch = (at, error)
                if mismatch is None:
                    records = _aggregate(calls, chunk, **options)
                    out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        judgments.raise_if_any()
        if unreadable:
            raise unreadable
        if mismatch:
            raise mismatch[1]
        out.seek(0)
        yield [note for _, note in sorted(notes)], out
