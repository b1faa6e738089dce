"""What if a stored run had stopped adaptively: a stopping policy replayed on the run's own
calls, without calling a judge.

This is how a user measures the saving on their own judge before trusting it: the calls per
item the policy would have made, the share of its winners equal to the full run's (on the items
a ``confident`` run does not judge in full to calibrate on: the items its promise is about), and
both accuracies against gold and against human labels (on every item).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from sqlmodel import Session

from pcf.analysis.results import is_adaptive, is_simulated
from pcf.items import Item
from pcf.judgments import Judgment
from pcf.labelling.human_gold import dataset_gold
from pcf.stopping import (
    Calibration,
    ItemCalls,
    Stop,
    StoppingPolicy,
    calibration_sample,
    choose_threshold,
    current_winner,
    replay_all,
    threshold_changes,
)
from pcf.store import Run, load_items, run_judgments
from pcf.weights import Weights, weights_label

CURVE_RISKS = (0.2, 0.1, 0.05, 0.02, 0.01)
"""The ``confident`` risks of :func:`budget_curve`, from cheap to careful."""
SAME_WINNER = "same winner as the full run"
ACCURACY = "accuracy against gold"


def replay_runs(
    judgments: Sequence[Judgment],
    items: Sequence[Item],
    policies: Sequence[StoppingPolicy],
    *,
    seed: int = 0,
) -> list[tuple[dict[str, tuple[Stop, Stop]], Calibration | None]]:
    """Per policy and judged item: where the policy stops it, and the full run (every stored
    call); with a ``confident`` policy's calibration as a run of seed ``seed`` makes it (its
    sample judged in full, the others stopped at its threshold). The policies share their work
    (:func:`pcf.stopping.replay_all`)."""
    by_item: dict[str, list[Judgment]] = defaultdict(list)
    for judgment in judgments:
        by_item[judgment.item_id].append(judgment)
    judged = [
        (i.item_id, i.candidate_ids, by_item[i.item_id]) for i in items if i.item_id in by_item
    ]
    keys = [key for key, *_ in judged]
    samples = [
        calibration_sample(keys, p.risk, seed) if p.name == "confident" else set() for p in policies
    ]
    # Calibrated where some items are left to stop (else every item is judged in full).
    calibrated = [0 < len(sample) < len(judged) for sample in samples]
    changes = _threshold_changes(
        judged,
        [(p.weights, s) for p, s, c in zip(policies, samples, calibrated, strict=True) if c],
    )
    calibrations, applied = [], []
    for policy, sample, is_calibrated in zip(policies, samples, calibrated, strict=True):
        calibration = None
        if is_calibrated:
            rows = np.array([changes[policy.weights, key] for key in sorted(sample)])
            calibration = choose_threshold(policy.risk, rows, len(judged))
        calibrations.append(calibration)
        certain = StoppingPolicy("certain", weights=policy.weights)  # cheap; unused when full
        applied.append(
            calibration.policy(policy.weights) if calibration else certain if sample else policy
        )
    out: list[dict[str, tuple[Stop, Stop]]] = [{} for _ in policies]
    for key, ids, calls in judged:
        everything = ItemCalls.of(key, ids, calls)
        stops = replay_all(applied, key, ids, calls)
        winners = {w: current_winner(everything, w) for w in {p.weights for p in policies}}
        for policy, stop, sample, stops_of in zip(policies, stops, samples, out, strict=True):
            full = Stop(len(calls), "planned_calls_made", winners[policy.weights])
            stops_of[key] = (replace(full, reason="calibration") if key in sample else stop, full)
    return list(zip(out, calibrations, strict=True))


def _threshold_changes(
    judged: Sequence[tuple[str, tuple[str, ...], Sequence[Judgment]]],
    samples: Sequence[tuple[Weights, set[str]]],
) -> dict[tuple[Weights, str], np.ndarray]:
    """:func:`pcf.stopping.threshold_changes` of each calibration item, by weights and key: an
    item in several samples (a larger risk's sample is within a smaller one's) replayed once."""
    wanted: dict[Weights, set[str]] = defaultdict(set)
    for weights, sample in samples:
        wanted[weights] |= sample
    out = {}
    for weights, keys in wanted.items():
        chosen = [row for row in judged if row[0] in keys]
        for (key, *_), row in zip(chosen, threshold_changes(weights, chosen), strict=True):
            out[weights, key] = row
    return out


def _accuracy(
    stops: Mapping[str, tuple[Stop, Stop]], answers: Mapping[str, str | None], ids: Mapping
) -> dict[str, Any] | None:
    """Accuracy of the policy's and the full run's winners on the items with an answer."""
    known = [key for key in stops if answers.get(key) is not None]
    if not known:
        return None

    def correct(stop: Stop, key: str) -> bool:
        return stop.winner >= 0 and ids[key][stop.winner] == answers[key]

    return {
        "n": len(known),
        "adaptive": sum(correct(stops[k][0], k) for k in known) / len(known),
        "full": sum(correct(stops[k][1], k) for k in known) / len(known),
    }


def whatif(run: Run, policy: StoppingPolicy, *, session: Session) -> dict[str, Any]:
    """The policy replayed on a stored run: calls per item, agreement with the full run, and
    accuracy against gold and human labels (None where there are none).

    Raises:
        ValueError: an APOCJudge or adaptive run.
    """
    return whatif_all(run, [policy], session=session)[0]


def whatif_all(
    run: Run, policies: Sequence[StoppingPolicy], *, session: Session
) -> list[dict[str, Any]]:
    """:func:`whatif` of each policy (its errors), the run read once, the replays sharing work."""
    if run.protocol == "apoc":
        raise ValueError(f"run {run.name!r} is an APOCJudge run: adaptive stopping is listwise")
    if is_adaptive(run):
        raise ValueError(
            f"run {run.name!r} is adaptive: its items stopped early, so it holds no full run "
            "to replay; replay a full run of the same settings"
        )
    items = load_items(run.dataset_id, session=session)
    judgments = run_judgments(run.id, session=session)
    replays = replay_runs(judgments, items, policies, seed=run.seed)
    humans = dataset_gold(run.dataset_id, session=session).gold
    return [
        _summary(run, policy, stops, items, humans) | _calibrated(calibration)
        for policy, (stops, calibration) in zip(policies, replays, strict=True)
    ]


def _calibrated(calibration: Calibration | None) -> dict[str, Any]:
    """A calibrated replay's calibration."""
    return {} if calibration is None else {"calibration": calibration.as_dict()}


def _summary(
    run: Run,
    policy: StoppingPolicy,
    stops: Mapping[str, tuple[Stop, Stop]],
    items: Sequence[Item],
    humans: Mapping[str, str | None],
) -> dict[str, Any]:
    """One policy's :func:`whatif` figures from its replay."""
    ids = {item.item_id: item.candidate_ids for item in items}
    n = len(stops)
    # The promise is about the items outside the calibration sample (all, when every one is in).
    compared = [(a, f) for a, f in stops.values() if a.reason != "calibration"]
    compared = compared or list(stops.values())
    summary: dict[str, Any] = {
        "run": run.name,
        "policy": policy.name,
        "risk": policy.risk if policy.name == "confident" else None,
        "stop_on": weights_label(policy.weights),
        "items": n,
        "calls_per_item": sum(a.calls for a, _ in stops.values()) / n if n else None,
        "full_calls_per_item": sum(f.calls for _, f in stops.values()) / n if n else None,
        "same_winner": (
            sum(a.winner == f.winner for a, f in compared) / len(compared) if compared else None
        ),
        "compared_items": len(compared),
        "stop_reasons": dict(Counter(a.reason for a, _ in stops.values())),
        "against_gold": _accuracy(stops, {i.item_id: i.gold for i in items}, ids),
        "against_humans": _accuracy(stops, humans, ids),
    }
    return summary | ({"simulated": True} if is_simulated(run) else {})


def budget_curve(run: Run, *, session: Session) -> pd.DataFrame:
    """Accuracy and agreement with the full run (``measure``: :data:`SAME_WINNER` or
    :data:`ACCURACY`, the latter with gold only) against calls per item: the full run,
    ``certain`` and ``confident`` at each of :data:`CURVE_RISKS`, on the proposed weights."""
    policies = [
        StoppingPolicy("certain"),
        *(StoppingPolicy("confident", risk=r) for r in CURVE_RISKS),
    ]
    rows: list[tuple[str, float, str, float]] = []

    def add(label: str, calls: float, same: float, accuracy: float | None) -> None:
        rows.append((label, calls, SAME_WINNER, same))
        if accuracy is not None:
            rows.append((label, calls, ACCURACY, accuracy))

    for policy, figures in zip(policies, whatif_all(run, policies, session=session), strict=True):
        gold = figures["against_gold"]
        label = "certain" if policy.name == "certain" else f"confident R={policy.risk:g}"
        add(label, figures["calls_per_item"], figures["same_winner"], gold and gold["adaptive"])
    add("full run", figures["full_calls_per_item"], 1.0, gold and gold["full"])
    return pd.DataFrame(rows, columns=["policy", "calls_per_item", "measure", "share"])
