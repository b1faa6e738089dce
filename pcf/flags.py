"""Instability flags (METHOD.md) and the review priority that sorts items most doubtful first."""

from __future__ import annotations

import numpy as np

from pcf.consensus import TIE_TOLERANCE

FLAGS = ("order_unstable", "overrides_direct", "near_tie", "position_driven", "incomplete")
NEAR_TIE_MARGIN = 0.05
POSITION_SLOT_SHARE = 0.6
POSITION_AGREEMENT = 0.6
NO_JUDGMENT_PRIORITY = 3.0
OVERRIDE_WEIGHT = 0.5
FLAG_WEIGHT = 0.25
FLAG_HELP = {
    "order_unstable": "The judge's top pick changed with the order of the candidates.",
    "overrides_direct": "The consensus winner differs from the direct (canonical-order) winner, "
    "or the direct call gave none.",
    "near_tie": f"The consensus margin between winner and runner-up is below {NEAR_TIE_MARGIN:g}.",
    "position_driven": f"Top picks followed one slot in >= {POSITION_SLOT_SHARE:.0%} of calls "
    f"while agreeing < {POSITION_AGREEMENT:.0%}.",
    "incomplete": "Some calls failed and were left out of the consensus.",
}
PRIORITY_HELP = (
    f"Review priority = (1 - top agreement) + (1 - Kendall's W)/4 + {OVERRIDE_WEIGHT:g} if the "
    f"consensus overrides direct + {FLAG_WEIGHT:g} per near-tie, position-driven or incomplete "
    "flag."
)


def _below(values: np.ndarray, threshold: float) -> np.ndarray:
    """``values < threshold`` by more than the tie tolerance (NaN is never below)."""
    with np.errstate(invalid="ignore"):
        return values < threshold - TIE_TOLERANCE


def raise_flags(
    *,
    has_ok: np.ndarray,
    top_agreement: np.ndarray,
    overrides: np.ndarray,
    margin: np.ndarray,
    slot_following: np.ndarray,
    failed: np.ndarray,
) -> dict[str, np.ndarray]:
    """Each flag of :data:`FLAGS` per item, from the item's instability metrics
    (:class:`pcf.instability.Instability`); every threshold compares as :func:`_below` does."""
    return {
        "order_unstable": has_ok & _below(top_agreement, 1.0),
        "overrides_direct": overrides,
        "near_tie": has_ok & _below(margin, NEAR_TIE_MARGIN),
        "position_driven": has_ok
        & ~_below(slot_following, POSITION_SLOT_SHARE)
        & _below(top_agreement, POSITION_AGREEMENT),
        "incomplete": failed,
    }


def review_priority(
    top_agreement: np.ndarray,
    kendall_w: np.ndarray,
    flags: dict[str, np.ndarray],
    has_ok: np.ndarray,
) -> np.ndarray:
    """Each item's doubt (docs/choices.md), most doubtful first: 0 to 2.5, 3.0 if no call is ok."""
    score = (
        (1 - top_agreement)
        + (1 - kendall_w) / 4
        + OVERRIDE_WEIGHT * flags["overrides_direct"]
        + FLAG_WEIGHT
        * (flags["near_tie"].astype(float) + flags["position_driven"] + flags["incomplete"])
    )
    return np.where(has_ok, score, NO_JUDGMENT_PRIORITY)
