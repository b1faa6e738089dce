"""Trust or escalate (after Jung et al., 2024): which items a run's judge may decide alone, with
a guarantee, beside the direct call's stated confidence (docs/triage.md). The thresholds tested
are the signal at every m-th surest calibration item, m the fewest items a test can pass on, so
one early error does not end the testing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sqlmodel import Session

from pcf.analysis.results import gold_answers, is_simulated, stored_analysis
from pcf.analysis.triage import calibrated_priority, judge_wrong
from pcf.guarantees import fixed_sequence, random_sample, smallest_sample, upper_bound
from pcf.labelling.human_gold import dataset_gold
from pcf.labelling.plan import calibration_items
from pcf.store import Run, run_judgments

SIGNALS = ("top_agreement", "margin", "calibrated")
LABELS = ("gold", "humans")
"""Calibration answers: a random :data:`GOLD_SHARE` of the items with a dataset gold field (the
others held out, to check), or the human gold of the labelling plan's random calibration share
(:func:`pcf.labelling.plan.calibration_items`; other human gold is not a random sample)."""
GOLD_SHARE = 0.5


def threshold(
    signal: np.ndarray, wrong: np.ndarray, alpha: float, delta: float
) -> tuple[float | None, int, int]:
    """The lowest threshold on ``signal`` (higher = surer) that passes on these calibration
    items, with the items at or above it and the errors among them; ``(None, 0, 0)`` if none."""
    fewest = smallest_sample(alpha, delta)
    levels = np.unique(np.sort(signal)[::-1][fewest - 1 :: fewest])[::-1]
    tests = [(int(wrong[signal >= t].sum()), int((signal >= t).sum())) for t in levels]
    passed = fixed_sequence(tests, alpha, delta)
    return (float(levels[passed - 1]), *tests[passed - 1][::-1]) if passed else (None, 0, 0)


def _split(
    signal: np.ndarray, wrong: np.ndarray, calibration: np.ndarray, alpha: float, delta: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """The items one signal lets the judge decide (none of the calibration items), and its
    figures: the threshold, the calibration items at or above it, their errors and bound."""
    level, items, errors = threshold(signal[calibration], wrong[calibration], alpha, delta)
    decided = ~calibration & (signal >= (np.inf if level is None else level))
    return decided, {
        "threshold": level,
        "calibration_items_above": items,
        "calibration_errors_above": errors,
        "error_bound": upper_bound(errors, items, delta) if items else None,
        "decided_share": float(decided.sum() / max(1, (~calibration).sum())),
    }


def escalate(
    run: Run,
    *,
    session: Session,
    alpha: float,
    delta: float,
    signal: str = "top_agreement",
    labels: str = "gold",
    seed: int | None = None,
) -> dict[str, Any]:
    """The run's items split into those the judge decides and those escalated to humans, for
    ``signal`` and for the direct call's confidence (the baseline); with ``gold`` labels, the
    agreement on the decided items held out of the calibration (drawn by ``seed``, by default
    the run's).

    Raises:
        ValueError: an unknown signal or labels, no calibration share, or too few items.
    """
    if signal not in SIGNALS or labels not in LABELS:
        raise ValueError(f"choose a signal of {', '.join(SIGNALS)}, labels of {', '.join(LABELS)}")
    table = stored_analysis(run, session=session).table
    keys = list(table["item_id"])
    if labels == "gold":
        truth = gold_answers(table)
        seed = run.seed if seed is None else seed
        sample = random_sample(list(truth), math.floor(GOLD_SHARE * len(truth)), seed)
        source = "gold answers"
    else:
        reserved = calibration_items(run.dataset_id, session=session)
        if not reserved:
            raise ValueError(
                "the labelling plan reserves no random calibration share, and human gold "
                "labelled most doubtful first is not a random sample: set one with "
                "`pcf labelling set DATASET --calibration-share 0.2`"
            )
        truth = {k: g for k, g in dataset_gold(run.dataset_id, session=session).gold.items() if g}
        sample = set(truth) & reserved & set(keys)
        source = f"human gold of the {len(reserved)} in the random calibration share"
    if len(sample) < smallest_sample(alpha, delta):
        raise ValueError(
            f"{len(sample)} calibration items with {source}: alpha={alpha:g} and "
            f"delta={delta:g} need at least {smallest_sample(alpha, delta)}"
        )
    calibration = table["item_id"].isin(list(sample)).to_numpy()
    answers = [truth.get(key) for key in keys]

    def wrong(column: str) -> np.ndarray:
        return np.array(judge_wrong(table[column], answers))

    if signal == "calibrated":
        p_wrong = calibrated_priority(table, {key: truth[key] for key in sample})
        values = 1 - p_wrong.to_numpy()
    else:
        values = np.nan_to_num(table[signal].to_numpy(dtype=float), nan=-np.inf)
    decided, figures = _split(values, wrong("winner"), calibration, alpha, delta)
    stated = {  # the direct call's confidence, -inf without one
        j.item_id: j.confidence
        for j in run_judgments(run.id, session=session)
        if (j.execution, j.call_index) == (0, 0) and j.ok and j.confidence is not None
    }
    confidence = np.array([stated.get(key, -np.inf) for key in keys], dtype=float)
    direct = _split(confidence, wrong("direct_winner"), calibration, alpha, delta)[1]
    checked = decided & table["item_id"].isin(list(truth)).to_numpy()
    return {
        "run": run.name,
        "signal": signal,
        "alpha": alpha,
        "delta": delta,
        "calibration": {"labels": labels, "items": len(sample), "seed": seed},
        **figures,
        "guarantee": (
            f"agreement with {labels} on the decided items >= {1 - alpha:g} with probability "
            f">= {1 - delta:g}, if the calibration items are a random sample"
            if figures["threshold"] is not None
            else "no threshold passed: every item goes to humans"
        ),
        "held_out_agreement": 1 - wrong("winner")[checked].mean() if checked.any() else None,
        "baseline": {"signal": "the direct call's stated confidence", **direct},
        "decided": [key for key, d in zip(keys, decided, strict=True) if d],
        "escalated": [
            key for key, d, c in zip(keys, decided, calibration, strict=True) if not d | c
        ],
    } | ({"simulated": True} if is_simulated(run) else {})


def escalation_in_words(run: Run, *, session: Session) -> str:
    """The run's split at alpha 0.1 and delta 0.1 on the human gold of the plan's random
    calibration share, in a sentence (the Overview page's), or why there is none yet."""
    try:
        found = escalate(run, session=session, alpha=0.1, delta=0.1, labels="humans")
    except ValueError as exc:
        return f"Not yet: {exc}."
    return (
        f"{'Simulated judge: ' if found.get('simulated') else ''}"
        f"the judge may decide {found['decided_share']:.0%} of the items outside the "
        f"calibration alone and {len(found['escalated'])} go to humans "
        f"({found['calibration']['items']} random human gold items, alpha 0.1, delta 0.1): "
        f"{found['guarantee']}."
    )
