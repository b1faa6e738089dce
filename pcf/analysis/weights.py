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

from dataclasses import dataclass

import pandas as pd
from sqlmodel import Session

from pcf.analysis.results import is_adaptive, is_simulated, run_weights
from pcf.consensus import JudgmentArrays, pack
from pcf.decisions import decide
from pcf.evaluation import accuracy, paired_outcomes
from pcf.store.models import Run
from pcf.store.queries import load_items, run_judgments
from pcf.weights import Weights, weights_label

CHANGED_COLUMNS = ("item_id", "gold", "direct", "winner", "outcome")
WEIGHT_NAMES = ("ws", "wB", "wv", "wu")
DIAGNOSTIC_EXECUTION = 0
"""The execution the K and weight tables use (METHOD.md: matched single-run diagnostics)."""


@dataclass(frozen=True)
class PackedRun:
    """A run's judgments as arrays, ready for any weights and K.

    Attributes:
        name: the run's name.
        groups: packed judgments, one group per candidate count.
        item_order: item ids in dataset order.
        gold: gold id per item (None when unlabelled).
        k: calls per execution stored (the largest K the playground offers).
        simulated: the answers came from the simulated judge.
        stop_on: for an adaptive run, the weights it stopped on (the only ones it is evaluated
            with); None for a full run.
    """

    name: str
    groups: tuple[JudgmentArrays, ...]
    item_order: tuple[str, ...]
    gold: dict[str, str | None]
    k: int
    simulated: bool
    stop_on: Weights | None = None


def pack_run(run: Run, *, session: Session) -> PackedRun:
    """Load and pack a (listwise) run's judgments, candidates in the items' listing order.

    Raises:
        ValueError: the run is an APOCJudge run (pairwise verdicts have no weights).
    """
    if run.protocol == "apoc":
        raise ValueError(f"run {run.name!r} is an APOCJudge run: pairwise verdicts have no weights")
    items = load_items(run.dataset_id, session=session)
    groups = tuple(
        pack(run_judgments(run.id, session=session), {i.item_id: i.candidate_ids for i in items})
    )
    return PackedRun(
        name=run.name,
        groups=groups,
        item_order=tuple(i.item_id for i in items),
        gold={i.item_id: i.gold for i in items},
        k=max((g.ok.shape[2] for g in groups), default=0),
        simulated=is_simulated(run),
        stop_on=run_weights(run) if is_adaptive(run) else None,
    )


@dataclass(frozen=True)
class WeightOutcome:
    """Accuracy of one weighting against its direct baseline, on the items with gold.

    Attributes:
        n: items with gold.
        accuracy: the consensus accuracy (share).
        direct_accuracy: the direct baseline's accuracy (share).
        improved: direct wrong, consensus right.
        regressed: direct right, consensus wrong.
        changed: items whose winner differs from the direct winner, columns
            :data:`CHANGED_COLUMNS` (an abstention is None); ``outcome`` is improved,
            regressed or both wrong.
    """

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
    labelled = list(known)
    if not labelled:
        raise ValueError(f"run {packed.name!r} has no judged item with a gold id")
    gold = list(known.values())
    method = [winners[i] for i in labelled]
    baseline = [direct[i] for i in labelled]
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
