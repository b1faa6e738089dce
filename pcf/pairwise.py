"""Pairwise transfer (APOCJudge) and JudgeBench's official pairwise score (METHOD.md); pure.

A pairwise *decision* is a candidate id, ``"tie"``, or ``None`` (the judge gave no verdict).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pcf.items import JUDGEBENCH_BUCKETS


@dataclass(frozen=True)
class ApocDecision:
    """The APOCJudge ``verdict`` for one pair, the ``direct`` one (call 1's), whether call 2
    proposed an override and call 3 confirmed it, and the ``reason`` (:func:`apoc_decide`)."""

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
    """Combine the calls of one pair into the APOCJudge verdict, by the first rule that applies
    (its reason in brackets): both calls agree (``agree``, ``no_verdict`` when both are None);
    call 2 has no verdict to propose (``no_proposal``); otherwise call 2 proposes an override,
    also when call 1 gave no verdict, and the guard keeps the direct verdict on a ballpark
    question (``guarded``); call 3 confirms it (``confirmed``); else the direct verdict stands,
    also when call 3 was not made (``not_confirmed``).

    Args:
        first: call 1, the pair shown as (a, b).
        second: call 2, shown as (b, a), mapped back to candidate ids.
        confirm: call 3, (a, b) with neutral keys, mapped back.
        ballpark: the question asks for a numeric estimate (:func:`is_ballpark_question`).
    """
    if first == second:
        return ApocDecision(first, first, False, False, "no_verdict" if first is None else "agree")
    if second is None:
        return ApocDecision(first, first, False, False, "no_proposal")
    if ballpark and guard:
        return ApocDecision(first, first, True, False, "guarded")
    if confirm == second:
        return ApocDecision(second, first, True, True, "confirmed")
    return ApocDecision(first, first, True, False, "not_confirmed")


def needs_confirmation(
    first: str | None, second: str | None, *, ballpark: bool, guard: bool
) -> bool:
    """Whether call 3 can change the verdict, so a runner makes it only then."""
    return apoc_decide(first, second, ballpark=ballpark, guard=guard).reason == "not_confirmed"


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

    Positive on the wording of :data:`_BALLPARK_PATTERNS`, and on "closest to" / "most nearly"
    when at least two answer options are numbers. Tuned for precision: "estimation",
    "estimator", "to the nearest tenth" and counting puzzles are not positives.
    """
    if _BALLPARK.search(prompt):
        return True
    return bool(_CLOSEST.search(prompt)) and len(_NUMERIC_OPTION.findall(prompt)) >= 2


# ---------------------------------------------------------------- JudgeBench's official score


def official_outcome(gold: str, other: str, d1: str | None, d2: str | None) -> int:
    """JudgeBench's official rule in candidate-id space: +1 correct, -1 incorrect, 0 tie, from
    call 1's and call 2's decisions ``d1`` and ``d2`` (ids, ``"tie"`` or None)."""
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
    """``score`` (correct / n * 100), ``n``, ``correct``, ``incorrect`` and ``tie``."""
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
    """Official scores (:func:`_score`) per bucket (:func:`bucket_order`), overall, and the macro
    average over the buckets present, from each pair's outcome (+1, -1, 0) and bucket."""
    if len(outcomes) != len(buckets):
        raise ValueError(f"{len(outcomes)} outcomes but {len(buckets)} buckets")
    if not outcomes:
        raise ValueError("no pairs to score")
    if bad := sorted({o for o in outcomes if o not in (-1, 0, 1)}):
        raise ValueError(f"outcomes must be -1, 0 or 1, got {bad}")
    per_bucket = {
        bucket: _score([o for o, b in zip(outcomes, buckets, strict=True) if b == bucket])
        for bucket in bucket_order(buckets)
    }
    macro = sum(s["score"] for s in per_bucket.values()) / len(per_bucket)
    return {"buckets": per_bucket, "overall": _score(outcomes), "macro": macro}
