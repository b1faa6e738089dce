"""The weight playground and the seed's weight table, recomputed from stored judgments.

A run's judgments are packed into arrays once (:func:`pack_run`); every choice of weights or K
after that is a few array operations (:func:`evaluate_weights`), never a judge call. Accuracy is
measured on the items with a gold id. "Direct" is the same rule on the canonical call alone
(METHOD.md), so improved and regressed compare each weighting with its own direct baseline.

The K table and the weight table are matched single-run diagnostics (METHOD.md): they use the
calls of execution 0 alone (K calls per item), never the executions pooled. An adaptive run is
evaluated only under the weights it stopped on, over every call it made: its items stopped once
their winner under those weights was settled, so another weighting or a prefix of its calls
could show winners its full run would not.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlmodel import Session

from pcf.analysis.results import (
    is_adaptive,
    is_simulated,
    item_chunks,
    run_weights,
    value_or_none,
)
from pcf.analysis.stored import decode, kept, kept_archive, part_names, read_parts
from pcf.consensus import ARRAYS, JudgmentArrays, pack
from pcf.decisions import decide
from pcf.evaluation import accuracy, paired_outcomes
from pcf.items import Item
from pcf.store import ITEM_CHUNK, Run, run_judgments
from pcf.weights import DEFAULT_WEIGHTS, PRESETS, Weights, weights_label

CHANGED_COLUMNS = ("item_id", "gold", "direct", "winner", "outcome")
WEIGHT_NAMES = ("ws", "wB", "wv", "wu")
DIAGNOSTIC_EXECUTION = 0
"""The execution the K and weight tables use (METHOD.md: matched single-run diagnostics)."""


@dataclass(frozen=True)
class PackedRun:
    """A run's judgments as arrays (:func:`pcf.consensus.pack` groups), ready for any weights
    and K up to ``k`` (calls per execution stored); ``stop_on``: for an adaptive run, the only
    weights it is evaluated with."""

    name: str
    groups: Iterable[JudgmentArrays]
    item_order: tuple[str, ...]
    gold: dict[str, str | None]
    k: int
    simulated: bool
    stop_on: Weights | None = None


def pack_run(run: Run, *, session: Session, chunk: int = ITEM_CHUNK) -> PackedRun:
    """Pack a listwise run's judgments, a chunk of items at a time (a group per chunk and
    candidate count)."""
    groups: list[JudgmentArrays] = []
    order: list[str] = []
    gold: dict[str, str | None] = {}
    for items, packed in packed_chunks(run, session=session, chunk=chunk):
        groups += packed
        order += [i.item_id for i in items]
        gold |= {i.item_id: i.gold for i in items}
    return packed_of(run, groups, order, gold)


def packed_chunks(
    run: Run, *, session: Session, chunk: int = ITEM_CHUNK
) -> Iterator[tuple[list[Item], list[JudgmentArrays]]]:
    """A listwise run's items ``chunk`` at a time, each chunk with its judgments packed."""
    if run.protocol == "apoc":
        raise ValueError(f"run {run.name!r} is an APOCJudge run: pairwise verdicts have no weights")
    for start, stop, items in item_chunks(run, session=session, size=chunk):
        judgments = run_judgments(run.id, session=session, start=start, stop=stop)
        yield items, pack(judgments, {i.item_id: i.candidate_ids for i in items})


def packed_of(
    run: Run,
    groups: Iterable[JudgmentArrays],
    item_order: Sequence[str],
    gold: dict[str, str | None],
) -> PackedRun:
    """The :class:`PackedRun` of ``run`` from its packed groups and its items."""
    return PackedRun(
        name=run.name,
        groups=groups,
        item_order=tuple(item_order),
        gold=gold,
        k=max((g.ok.shape[2] for g in groups), default=0),
        simulated=is_simulated(run),
        stop_on=run_weights(run) if is_adaptive(run) else None,
    )


def packed_parts(run: Run, *, session: Session) -> Iterator[tuple[str, Any]]:
    """:func:`pack_run` as the parts :func:`stored_packed_run` stores, a chunk at a time: each
    group's arrays as it is packed, then the items' order and gold ids."""
    # Each chunk's ids as Arrow strings, not Python ones: strings kept from chunk to chunk
    # would pin the heap pages that each chunk's judgments used (packing 60,000 items raised
    # the resident memory by 19 MB, not 30).
    order: list[pa.Array] = []
    golds: list[pa.Array] = []
    g = 0
    for items, groups in packed_chunks(run, session=session):
        for group in groups:
            yield f"{g}.item_ids", np.array(group.item_ids, dtype=str)
            yield f"{g}.candidate_ids", np.array(group.candidate_ids, dtype=str)
            yield f"{g}.executions", np.array(group.executions, dtype=int)
            yield from ((f"{g}.{name}", getattr(group, name)) for name in ARRAYS)
            g += 1
        order.append(pa.array([i.item_id for i in items], pa.string()))
        golds.append(pa.array([i.gold for i in items], pa.string()))
    yield (
        "items",
        pa.table(
            {
                "item_id": pa.chunked_array(order, pa.string()),
                "gold": pa.chunked_array(golds, pa.string()),
            }
        ),
    )


def stored_packed_run(run: Run, *, session: Session) -> PackedRun:
    """:func:`pack_run`, kept in the database as arrays for the revision of the run's calls
    (computed and stored first when missing or stale; the caller commits)."""
    parts = decode(packed_archive(run, session=session))
    # One string per id (an item's id in the groups, the order and the gold; a candidate id
    # shared by many items), from dicts dropped on return rather than the interpreter's interned
    # strings: a decoded run of 60,000 items of 4 candidates holds 25 MB (33 MB interned).
    order = parts["items"]["item_id"].tolist()
    item = {key: key for key in order}
    candidate: dict[str, str] = {}
    groups = [group_of(parts, g, item, candidate) for g in range(group_count(parts))]
    golds = (value_or_none(g) for g in parts["items"]["gold"])
    gold = dict(
        zip(order, (g if g is None else candidate.setdefault(g, g) for g in golds), strict=True)
    )
    return packed_of(run, groups, order, gold)


def packed_archive(run: Run, *, session: Session) -> bytes:
    """The run's stored packed run, not decoded (computed and stored first when missing or
    stale, a chunk at a time: :func:`packed_parts`)."""
    return kept_archive(run, "packed", lambda: packed_parts(run, session=session), session=session)


def archived_packed_run(run: Run, *, session: Session) -> PackedRun:
    """:func:`stored_packed_run` whose groups are decoded from the stored archive one at a time,
    at each pass over them: for a whole-run computation (:func:`run_diagnostics` at the end of
    a run) that need not hold the run's arrays and ids at once."""
    data = packed_archive(run, session=session)
    items = decode(data, {"items"})["items"]
    order = items["item_id"].tolist()
    gold = dict(zip(order, (value_or_none(g) for g in items["gold"]), strict=True))
    return packed_of(run, ArchivedGroups(data), order, gold)


class ArchivedGroups:
    """A stored packed run's groups, each decoded from the archive when a pass reaches it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.count = group_count(part_names(data))

    def __iter__(self) -> Iterator[JudgmentArrays]:
        candidate: dict[str, str] = {}
        with zipfile.ZipFile(io.BytesIO(self.data)) as archive:  # once a pass, not a group
            for g in range(self.count):
                parts = read_parts(archive, {f"{g}.{name}" for name in GROUP_PARTS})
                yield group_of(parts, g, {}, candidate)


GROUP_PARTS = ("item_ids", "candidate_ids", "executions", *ARRAYS)
"""The parts of each group ``G`` of a stored packed run (``G.NAME``)."""


def group_count(names: Iterable[str]) -> int:
    """How many groups a stored packed run of these part names holds."""
    return sum(name.endswith(".item_ids") for name in names)


def group_of(
    parts: Mapping[str, Any], g: int, item: dict[str, str], candidate: dict[str, str]
) -> JudgmentArrays:
    """Group ``g`` of a stored packed run's parts, each id the one string ``item`` or
    ``candidate`` holds for it (added there when new)."""
    return JudgmentArrays(
        [item.setdefault(key, key) for key in parts[f"{g}.item_ids"].tolist()],
        [
            tuple(candidate.setdefault(c, c) for c in ids)
            for ids in parts[f"{g}.candidate_ids"].tolist()
        ],
        parts[f"{g}.executions"].tolist(),
        *(parts[f"{g}.{name}"] for name in ARRAYS),
    )


@dataclass(frozen=True)
class WeightOutcome:
    """Accuracy (shares) of one weighting and of its direct baseline on the ``n`` items with
    gold, items ``improved`` and ``regressed``, and the items whose winner differs from the
    direct winner (``changed``: :data:`CHANGED_COLUMNS`, an abstention as None)."""

    n: int
    accuracy: float
    direct_accuracy: float
    improved: int
    regressed: int
    changed: pd.DataFrame


def evaluate_weights(packed: PackedRun, weights: Weights, *, k: int | None = None) -> WeightOutcome:
    """Decide every labelled item of a packed run with ``weights`` on the first ``k`` calls of
    execution 0 (the matched single-run diagnostic; an item without execution 0 abstains); an
    adaptive run on every call it made, and only under the weights it stopped on.

    Raises:
        ValueError: no judged item has a gold id, or other weights or a K for an adaptive run.
    """
    if packed.stop_on is not None and (weights != packed.stop_on or k is not None):
        raise ValueError(
            f"run {packed.name!r} is adaptive: it settled its winners on "
            f"{weights_label(packed.stop_on)} with every call it made, so other weights or K "
            "would show winners its full run would not"
        )
    winners: dict[str, str | None] = {}
    direct: dict[str, str | None] = {}
    for group in packed.groups:
        calls = group if packed.stop_on is not None else group.execution(DIAGNOSTIC_EXECUTION)
        decided = decide(calls, weights=weights, k=k)
        winners.update(
            zip(group.item_ids, decided.consensus.winner_ids(decided.arrays), strict=True)
        )
        direct.update(zip(group.item_ids, decided.direct.winner_ids(decided.arrays), strict=True))
    known = {
        i: g for i in packed.item_order if i in winners and (g := packed.gold.get(i)) is not None
    }
    if not known:
        raise ValueError(f"run {packed.name!r} has no judged item with a gold id")
    labelled, gold = list(known), list(known.values())
    method, baseline = [winners[i] for i in known], [direct[i] for i in known]
    counts = paired_outcomes(
        [d == g for d, g in zip(baseline, gold, strict=True)],
        [w == g for w, g in zip(method, gold, strict=True)],
    )
    changed = [
        (i, g, d, w, "improved" if w == g else "regressed" if d == g else "both wrong")
        for i, g, d, w in zip(labelled, gold, baseline, method, strict=True)
        if d != w
    ]
    return WeightOutcome(
        n=len(labelled),
        accuracy=accuracy(method, gold),
        direct_accuracy=accuracy(baseline, gold),
        improved=counts["improved"],
        regressed=counts["regressed"],
        changed=pd.DataFrame(changed, columns=list(CHANGED_COLUMNS), dtype=object),
    )


K_VALUES = (3, 5, 7)
K_COLUMNS = ("run", "K", "n", "accuracy", "direct_accuracy", "improved", "regressed")
PRESET_COLUMNS = (
    *("run", "preset", *WEIGHT_NAMES, "N"),
    *("direct %", "accuracy %", "Δ vs direct (points)"),
)


def preset_records(packed: PackedRun) -> pd.DataFrame:
    """A run's rows of the seed's weight table, one per preset (:data:`PRESET_COLUMNS`), on
    execution 0's calls (:func:`evaluate_weights`, whose errors it raises)."""
    rows = []
    for name, weights in PRESETS.items():
        o = evaluate_weights(packed, weights)
        shares = (100 * o.direct_accuracy, 100 * o.accuracy, 100 * (o.accuracy - o.direct_accuracy))
        rows.append((packed.name, name, *weights.as_tuple(), o.n, *shares))
    return pd.DataFrame(rows, columns=list(PRESET_COLUMNS))


def k_records(packed: PackedRun) -> pd.DataFrame:
    """A run's rows of the K table (:data:`K_COLUMNS`): the proposed weights on execution 0's
    first K calls, for each of :data:`K_VALUES` below its stored K and that K
    (:func:`evaluate_weights`' errors)."""
    rows = []
    for k in sorted({k for k in K_VALUES if k < packed.k} | {packed.k}):
        o = evaluate_weights(packed, DEFAULT_WEIGHTS, k=k)
        rows.append((packed.name, k, o.n, o.accuracy, o.direct_accuracy, o.improved, o.regressed))
    return pd.DataFrame(rows, columns=list(K_COLUMNS))


@dataclass(frozen=True)
class Diagnostics:
    """A full listwise run's matched single-run diagnostics against gold (execution 0):
    :func:`preset_records` and :func:`k_records`."""

    presets: pd.DataFrame
    k_prefixes: pd.DataFrame


def run_diagnostics(run: Run, *, session: Session, packed: PackedRun | None = None) -> Diagnostics:
    """A full listwise run's weight and K diagnostics, kept for the revision of its calls
    (:func:`~pcf.analysis.stored.kept`; the caller commits), computed from ``packed`` when the
    caller holds the run's packed judgments already, else from :func:`archived_packed_run`.

    Raises:
        ValueError: an APOCJudge or adaptive run, or no judged item has a gold id.
    """
    if is_adaptive(run):
        raise ValueError(f"run {run.name!r} is adaptive: it settled its winners on one weighting")

    def compute() -> dict[str, Any]:
        judged = archived_packed_run(run, session=session) if packed is None else packed
        return {"presets": preset_records(judged), "k_prefixes": k_records(judged)}

    parts = kept(run, "diagnostics", compute, session=session)
    return Diagnostics(parts["presets"], parts["k_prefixes"])
