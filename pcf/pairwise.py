"""Pairwise transfer (APOCJudge) and JudgeBench's official pairwise score (METHOD.md).

A pairwise *decision* is a candidate id, ``"tie"``, or ``None`` (the judge gave no verdict).
APOCJudge judges a pair (a, b) in canonical order twice, as (a, b) and as (b, a), and settles a
disagreement with a third, keyed confirmation call; everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pcf.items import JUDGEBENCH_BUCKETS

TIE = "tie"

# Reasons an ApocDecision gives, one per branch of apoc_decide.
AGREE = "agree"
NO_VERDICT = "no_verdict"
NO_PROPOSAL = "no_proposal"
GUARDED = "guarded"
CONFIRMED = "confirmed"
NOT_CONFIRMED = "not_confirmed"


@dataclass(frozen=True)
class ApocDecision:
    """The APOCJudge verdict for one pair and how it was reached.

    Attributes:
        verdict: the final decision (candidate id, ``"tie"`` or ``None``).
        direct: the direct verdict, i.e. call 1's decision.
        override_proposed: call 2 disagreed with call 1 and had a verdict to propose.
        override_accepted: the proposal became the verdict (call 3 confirmed it).
        reason: one of ``agree``, ``no_verdict``, ``no_proposal``, ``guarded``, ``confirmed``,
            ``not_confirmed`` (see :func:`apoc_decide`).
    """

    verdict: str | None
    direct: str | None
    override_proposed: bool
    override_accepted: bool
    reason: str


def apoc_decide(
    first: str | None,
    second: str | None,
    confirm: str | None = None,
    *,
    ballpark: bool = False,
    guard: bool = True,
) -> ApocDecision:
    """Combine the calls of one pair into the APOCJudge verdict.

    Rules, in order:

    - ``first == second``: that is the verdict (``agree``; ``no_verdict`` when both are None).
    - ``second`` is None: there is nothing to propose, the direct verdict stands
      (``no_proposal``).
    - Otherwise call 2 proposes an override. This includes a missing direct verdict
      (``first`` None): call 2's verdict is then an override like any other and needs the
      same confirmation, and the guard applies to it too.
    - With the guard on, a ballpark question keeps the direct verdict (``guarded``).
    - The override is accepted only if ``confirm == second`` (``confirmed``); otherwise,
      including when call 3 was not made or gave no verdict, the direct verdict stands
      (``not_confirmed``).

    Args:
        first: call 1, the pair shown as (a, b).
        second: call 2, shown as (b, a), mapped back to candidate ids.
        confirm: call 3, (a, b) with neutral keys, mapped back; ignored unless
            :func:`needs_confirmation` says it matters.
        ballpark: the question asks for a numeric estimate (see :func:`is_ballpark_question`).
        guard: suppress overrides on ballpark questions (on by default).

    Returns:
        The verdict with the direct verdict and the override bookkeeping.
    """
    if first == second:
        reason = NO_VERDICT if first is None else AGREE
        return ApocDecision(first, first, False, False, reason)
    if second is None:
        return ApocDecision(first, first, False, False, NO_PROPOSAL)
    if ballpark and guard:
        return ApocDecision(first, first, True, False, GUARDED)
    if confirm == second:
        return ApocDecision(second, first, True, True, CONFIRMED)
    return ApocDecision(first, first, True, False, NOT_CONFIRMED)


def needs_confirmation(
    first: str | None, second: str | None, *, ballpark: bool, guard: bool
) -> bool:
    """Whether call 3 can change the verdict, so a runner makes it only then."""
    return first != second and second is not None and not (ballpark and guard)


# ---------------------------------------------------------------- ballpark heuristic

_NUMERIC_OPTION = re.compile(
    r"(?:\(\s*[A-J]\s*\)|(?:^|\s)[A-J][.)])"  # (A)  or  A.  or  A)
    r"(?:[\s}~$]|\\qquad|\\ )*"  # spacing and LaTeX padding
    r"(?:\\[dt]?frac\b|[-−+]?\d|\.\d)",  # a number or a fraction
    re.MULTILINE,
)
_BALLPARK_PATTERNS = (
    r"\bapproximately\b",
    r"\bapprox\.",
    r"\bapproximate\s+(?:value|number|size|amount|answer|age|distance|population|mass|count"
    r"|total|cost|length|height|weight|speed|time|temperature)s?\b",
    r"\b(?:estimate|estimating)\s+(?:the|how|what|a|an|your|its|their)\b",
    r"\b(?:an?|rough|best|ballpark)\s+estimate\b",
    r"\broughly\b",
    r"\borders?\s+of\s+magnitude\b",
    r"\bballpark\b",
    r"\bback[- ]of[- ](?:the[- ])?envelope\b",
    r"\bfermi\s+(?:problem|question|estimate)\b",
    r"\b(?:about|around)\s+how\s+(?:many|much|long|far|big|old|large)\b",
    r"\bhow\s+many\b[^.?!\n]{1,60}?\b(?:are\s+there|exist|live|are\s+alive)\s+"
    r"(?:in|on|across|worldwide)\b",
)
_BALLPARK = re.compile("|".join(_BALLPARK_PATTERNS), re.IGNORECASE)
_CLOSEST = re.compile(r"\b(?:closest|nearest)\s+to\b|\bmost\s+nearly\b", re.IGNORECASE)


def is_ballpark_question(prompt: str) -> bool:
    """Heuristic: does the prompt ask for a numeric estimate rather than an exact answer?

    Positive on wording such as "approximately", "estimate the ...", "roughly", "order of
    magnitude", "ballpark", "about how many", "how many ... are there in ...", and on "closest
    to" / "most nearly" when at least two answer options are numbers. Tuned for precision:
    "estimation", "estimator", "to the nearest tenth" and counting puzzles ("how many pieces
    are there after the cuts?") are not positives.
    """
    if _BALLPARK.search(prompt):
        return True
    return bool(_CLOSEST.search(prompt)) and len(_NUMERIC_OPTION.findall(prompt)) >= 2


# ---------------------------------------------------------------- JudgeBench's official score


def official_outcome(gold: str, other: str, d1: str | None, d2: str | None) -> int:
    """JudgeBench's official rule in candidate-id space, for our own pairwise runs.

    Args:
        gold: the correct candidate's id.
        other: the other candidate's id.
        d1: call 1's decision (id, ``"tie"`` or None).
        d2: call 2's decision, already mapped back to ids.

    Returns:
        +1 correct, -1 incorrect, 0 tie.
    """
    if gold == other:
        raise ValueError(f"gold and other must differ, both are {gold!r}")
    counter = sum((d == gold) - (d == other) for d in (d1, d2))
    return (counter > 0) - (counter < 0)


def bucket_order(buckets: Sequence[str]) -> list[str]:
    """JudgeBench's buckets in its reporting order, then any others alphabetically."""
    present = set(buckets)
    known = [b for b in JUDGEBENCH_BUCKETS if b in present]
    return known + sorted(present - set(known))


def _score(outcomes: Sequence[int]) -> dict[str, float | int]:
    correct = sum(o == 1 for o in outcomes)
    incorrect = sum(o == -1 for o in outcomes)
    return {
        "score": 100 * correct / len(outcomes),
        "n": len(outcomes),
        "correct": correct,
        "incorrect": incorrect,
        "tie": len(outcomes) - correct - incorrect,
    }


def bucket_scores(outcomes: Sequence[int], buckets: Sequence[str]) -> dict:
    """Official scores per bucket, overall, and the macro average over the buckets present.

    Args:
        outcomes: one official outcome (+1, -1, 0) per pair.
        buckets: each pair's bucket, aligned with ``outcomes``.

    Returns:
        ``{"buckets": {bucket: stats}, "overall": stats, "macro": float}`` where stats is
        ``{"score", "n", "correct", "incorrect", "tie"}`` and score = correct / n * 100.
        Buckets are listed in JudgeBench's order, then others alphabetically.
    """
    if len(outcomes) != len(buckets):
        raise ValueError(f"{len(outcomes)} outcomes but {len(buckets)} buckets")
    if not outcomes:
        raise ValueError("no pairs to score")
    bad = sorted({o for o in outcomes if o not in (-1, 0, 1)})
    if bad:
        raise ValueError(f"outcomes must be -1, 0 or 1, got {bad}")
    per_bucket = {
        bucket: _score([o for o, b in zip(outcomes, buckets, strict=True) if b == bucket])
        for bucket in bucket_order(buckets)
    }
    macro = sum(s["score"] for s in per_bucket.values()) / len(per_bucket)
    return {"buckets": per_bucket, "overall": _score(outcomes), "macro": macro}
