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

from pcf.analysis.results import gold_answers, is_adaptive, is_simulated, stored_analysis
from pcf.analysis.triage import calibrated_priority, judge_wrong
from pcf.guarantees import fixed_sequence, random_sample, smallest_sample, upper_bound
from pcf.labelling.human_gold import dataset_gold
from pcf.labelling.plan import human_calibration_items
from pcf.store import Run, run_judgments

SIGNALS = ("top_agreement", "margin", "calibrated")
LABELS = ("gold", "humans")
"""Calibration answers: a random :data:`GOLD_SHARE` of the items with a dataset gold field (the
others held out, to check), or the human gold of the labelling plan's random calibration share
(:func:`pcf.labelling.plan.human_calibration_items`; other human gold is not a random sample)."""
GOLD_SHARE = 0.5
SMALLEST_RISK = 1e-6
"""The smallest ``alpha`` and ``delta`` taken: smaller ones would need more calibration items
than a dataset holds (a million for alpha 1e-6 alone)."""


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
    signal: np.ndarray,
    wrong: np.ndarray,
    calibration: np.ndarray,
    decidable: np.ndarray,
    alpha: float,
    delta: float,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The items one signal lets the judge decide (of the ``decidable`` ones, none of the
    calibration items), and its figures: the threshold, the calibration items at or above it,
    their errors and bound. A calibration item that is not decidable counts at the bottom of
    the signal, an error when it has no winner."""
    ranked = np.where(decidable, signal, -np.inf)
    level, items, errors = threshold(ranked[calibration], wrong[calibration], alpha, delta)
    decided = decidable & ~calibration & (ranked >= (np.inf if level is None else level))
    return decided, {
        "threshold": level,
        "calibration_items_above": items,
        "calibration_errors_above": errors,
        "error_bound": upper_bound(errors, items, delta) if items else None,
        "decided_share": float(decided.sum() / max(1, (~calibration).sum())),
    }


FULL_STOP = "calibration"
"""The stop reason of an adaptive run's items judged in full at random (``confident``'s
calibration share): the only items of such a run escalation calibrates on and decides."""


def _covered(run: Run, keys: list[str]) -> tuple[np.ndarray, str | None]:
    """Which items the guarantee can speak for: every item of a full run; of an adaptive run,
    only those judged in full at random (its other items were stopped on fewer calls, so their
    signal is not the calibration items'), with a note that says so."""
    if not is_adaptive(run):
        return np.ones(len(keys), dtype=bool), None
    stops = run.settings.stops
    covered = np.array([key in stops and stops[key].reason == FULL_STOP for key in keys])
    return covered, (
        f"adaptive run: calibrated on, and deciding, only the {int(covered.sum())} items it "
        f"judged in full at random ({FULL_STOP} share); its {int((~covered).sum())} other "
        "items stopped on fewer calls, their signal is not comparable, and they go to humans"
    )


def guarantee_text(labels: str, alpha: float, delta: float, threshold: float | None) -> str:
    """The promise :func:`escalate` keeps, in words: per new item, never the realized rate."""
    if threshold is None:
        return "no threshold passed: every item goes to humans"
    return (
        f"with probability >= {1 - delta:g} over the random calibration draw, a new item "
        f"exchangeable with the calibration items whose signal is at or above the threshold "
        f"agrees with {labels} with probability >= {1 - alpha:g}; this bounds the risk of a new "
        f"item, not the share of this run's decided items that agree"
    )


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
    ``signal`` and for the direct call's confidence (the baseline), with the agreement realized
    on the decided items that have an answer outside the calibration. ``gold``: a random half
    of the items with a dataset gold field, drawn by ``seed`` (by default the run's) for this
    purpose alone; ``humans``: the labelling plan's random calibration share, which must be
    labelled in full. An item without a winner is always escalated.

    Raises:
        ValueError: an unknown signal or labels, alpha or delta out of range, no calibration
            share or a share not labelled in full, or too few items.
    """
    if signal not in SIGNALS or labels not in LABELS:
        raise ValueError(f"choose a signal of {', '.join(SIGNALS)}, labels of {', '.join(LABELS)}")
    if not (SMALLEST_RISK <= alpha < 1 and SMALLEST_RISK <= delta < 1):
        raise ValueError(f"alpha and delta must be {SMALLEST_RISK:g} or more, and below 1")
    table = stored_analysis(run, session=session).table
    keys = list(table["item_id"])
    covered, note = _covered(run, keys)
    usable = {key for key, c in zip(keys, covered, strict=True) if c}
    if labels == "gold":
        truth = gold_answers(table)
        seed = run.seed if seed is None else seed
        pool = sorted(set(truth) & usable)
        sample = random_sample(pool, math.floor(GOLD_SHARE * len(pool)), "escalate", seed)
        source = "gold answers"
    else:
        reserved = human_calibration_items(run.dataset_id, session=session)
        if not reserved:
            raise ValueError(
                "the labelling plan reserves no random calibration share, and human gold "
                "labelled most doubtful first is not a random sample: set one with "
                "`pcf labelling set DATASET --calibration-share 0.2`"
            )
        truth = {k: g for k, g in dataset_gold(run.dataset_id, session=session).gold.items() if g}
        if missing := sorted(reserved & set(keys) - set(truth)):
            raise ValueError(
                f"{len(missing)} of the {len(reserved & set(keys))} items of the random "
                f"calibration share have no human gold yet (unlabelled, waiting for the plan's "
                f"labels or disputed): calibrating on the rest would not be a random sample; "
                f"label or resolve them first (e.g. {missing[0]!r})"
            )
        sample = reserved & usable
        source = f"human gold of the {len(reserved)} in the random calibration share"
    if len(sample) < smallest_sample(alpha, delta):
        raise ValueError(
            f"{len(sample)} calibration items with {source}: alpha={alpha:g} and "
            f"delta={delta:g} need at least {smallest_sample(alpha, delta)}"
            + (f" ({note})" if note else "")
        )
    calibration = table["item_id"].isin(list(sample)).to_numpy()
    answers = [truth.get(key) for key in keys]
    decidable = covered & table["winner"].notna().to_numpy()  # no winner: always escalated

    def wrong(column: str) -> np.ndarray:
        return np.array(judge_wrong(table[column], answers))

    if signal == "calibrated":
        p_wrong = calibrated_priority(table, {key: truth[key] for key in sample})
        values = 1 - p_wrong.to_numpy()
    else:
        values = np.nan_to_num(table[signal].to_numpy(dtype=float), nan=-np.inf)
    decided, figures = _split(values, wrong("winner"), calibration, decidable, alpha, delta)
    stated = {  # the direct call's confidence, -inf without one
        j.item_id: j.confidence
        for j in run_judgments(run.id, session=session)
        if (j.execution, j.call_index) == (0, 0) and j.ok and j.confidence is not None
    }
    confidence = np.array([stated.get(key, -np.inf) for key in keys], dtype=float)
    has_direct = covered & table["direct_winner"].notna().to_numpy()
    direct = _split(confidence, wrong("direct_winner"), calibration, has_direct, alpha, delta)[1]
    checked = decided & table["item_id"].isin(list(truth)).to_numpy()
    return {
        "run": run.name,
        "signal": signal,
        "alpha": alpha,
        "delta": delta,
        "calibration": {"labels": labels, "items": len(sample), "seed": seed, "draw": "escalate"}
        | ({"note": note} if note else {}),
        **figures,
        "guarantee": guarantee_text(labels, alpha, delta, figures["threshold"]),
        "held_out_agreement": {
            "items": int(checked.sum()),
            "agreement": float(1 - wrong("winner")[checked].mean()) if checked.any() else None,
            "note": "realized on the decided items with an answer outside the calibration; "
            "not bounded by the guarantee",
        },
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
    held = found["held_out_agreement"]
    realized = (
        f" Realized on the {held['items']} decided items with human gold outside the "
        f"calibration: {held['agreement']:.0%} agree (not bounded)."
        if held["agreement"] is not None
        else ""
    )
    return (
        f"{'Simulated judge: ' if found.get('simulated') else ''}"
        f"the judge may decide {found['decided_share']:.0%} of the items outside the "
        f"calibration alone and {len(found['escalated'])} go to humans "
        f"({found['calibration']['items']} random human gold items, alpha 0.1, delta 0.1): "
        f"{found['guarantee']}.{realized}"
        + (f" Note: {found['calibration']['note']}." if "note" in found["calibration"] else "")
    )
