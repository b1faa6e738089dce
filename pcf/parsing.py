"""Parsing a judge's answer (METHOD.md, "Parsing a judgment"): keys back to candidate ids.

A parse either succeeds, possibly after repairs that are recorded by name, or fails with one
short, stable reason. Both names are stored and counted, so never rename them.

Repairs: ``code_fence`` (JSON inside a ``` fence), ``prose`` (a JSON object inside other text),
``key_case`` (a key differing only by case or whitespace, e.g. ``a`` or ``response q7``),
``number_string`` (a number written as a string, e.g. ``"7"``), ``ranking_derived`` (no ranking:
ordered by factuality, ties by slot), ``risk_default`` (no hallucination risk: 0.5).

Failures: ``empty_response``, ``too_large`` (over :data:`MAX_ANSWER_CHARS`), ``refusal``,
``no_json``, ``invalid_json``, ``missing_candidates``,
``bad_candidate`` (an entry that is not an object with a string key), ``unknown_key:X``,
``duplicate_key:X``, ``missing_key:X``, ``bad_factuality:X`` (missing or not a number),
``factuality_out_of_range:X``, ``bad_risk:X``, ``risk_out_of_range:X``, ``bad_ranking``,
``bad_confidence``, ``confidence_out_of_range``; pairwise adds ``missing_verdict``. ``X`` is the
judge's key as the prompt showed it (or as the judge wrote it, for an unknown key).

Hostile answers are bounded: too long fails before it is read, the search inside prose is linear
(:func:`_json_object`), and a number of any length is read (out of range, not a crash).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pcf.prompts import TIE, normalize_key

DEFAULT_RISK = 0.5
MAX_FACTUALITY = 10.0
SHOWN_KEY_CHARS = 40
MAX_ANSWER_CHARS = 1_000_000
"""Longer answers fail as ``too_large`` (a judgment of a few candidates takes a few thousand)."""
SCAN_BUDGET = 8
"""The decodes tried inside prose may cost at most this many times the answer's length..."""
DECODE_COST = 64
"""...where one decode costs this plus the characters it read (a failure at offset ``p``: ``p``)."""

_FENCED_BLOCK = re.compile(r"```[\w+-]*[^\S\n]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_REFUSAL = re.compile(
    r"^\W*+(i['’]?m sorry|i am sorry|sorry\b|i can(?:no|['’])t|i am unable|i['’]?m unable|"
    r"i won['’]?t|i will not|as an ai)",
    re.IGNORECASE,
)


def _json_int(digits: str) -> int | float:
    """A JSON integer; a float (infinite) past Python's limit on int conversion (4,300 digits)."""
    try:
        return int(digits)
    except ValueError:
        return float(digits)


_DECODER = json.JSONDecoder(parse_int=_json_int)
# Where a JSON object can start: a brace, JSON whitespace, then a string or the closing brace.
_OBJECT_START = re.compile(r'\{(?=[ \t\n\r]*["}])')


class _ParseError(Exception):
    """A parse that cannot go on; its message is the stored error string."""


@dataclass(frozen=True)
class Parsed:
    """A parsed listwise answer in candidate ids: usable (``ok``) or its ``error``, the repairs
    applied in order, scores in [0, 10] and risks in [0, 1], the ranking best first."""

    ok: bool
    error: str | None = None
    repaired: tuple[str, ...] = ()
    factuality: dict[str, float] = field(default_factory=dict)
    hallucination_risk: dict[str, float] = field(default_factory=dict)
    ranking: tuple[str, ...] = ()
    confidence: float | None = None


@dataclass(frozen=True)
class PairParsed:
    """A parsed pairwise answer: the better candidate's id, ``tie``, or ``None`` when failed."""

    ok: bool
    error: str | None = None
    repaired: tuple[str, ...] = ()
    verdict: str | None = None
    confidence: float | None = None


_Repairs = dict[str, None]
"""The repairs of one parse: each name once (a key), in the order first applied."""


def parse_listwise(text: str | None, key_to_id: Mapping[str, str], order: Sequence[str]) -> Parsed:
    """A listwise answer with its keys mapped back to candidate ids (``order``, in slot order,
    breaks factuality ties of a derived ranking): ok when every key appears exactly once in
    ``candidates`` and ``ranking`` with scores in range."""
    if set(key_to_id.values()) != set(order) or len(key_to_id) != len(order):
        raise ValueError(f"key_to_id {dict(key_to_id)} does not label the order {list(order)}")
    repairs: _Repairs = {}
    try:
        answer = _json_object(text, "candidates", repairs)
        return _listwise(answer, key_to_id, tuple(order), repairs)
    except _ParseError as failure:
        return Parsed(ok=False, error=str(failure), repaired=tuple(repairs))


def parse_pairwise(text: str | None, key_to_id: Mapping[str, str]) -> PairParsed:
    """A pairwise answer ``{"verdict", "confidence", "rationale"}``: a candidate id or ``tie``."""
    repairs: _Repairs = {}
    try:
        answer = _json_object(text, "verdict", repairs)
        raw = answer.get("verdict")
        if raw is None:
            raise _ParseError("refusal" if "refusal" in answer else "missing_verdict")
        verdicts = {**key_to_id, TIE: TIE}  # no key is "tie" (:func:`pcf.prompts.render_pairwise`)
        verdict = verdicts[_resolve_key(raw, verdicts, repairs)]
        confidence = _confidence(answer, repairs)
    except _ParseError as failure:
        return PairParsed(ok=False, error=str(failure), repaired=tuple(repairs))
    return PairParsed(True, None, tuple(repairs), verdict, confidence)


# ---------------------------------------------------------------- finding the JSON object


def _json_object(text: str | None, required: str, repairs: _Repairs) -> dict[str, Any]:
    """The answer's JSON object: the whole text, else a fenced block, else one inside prose.

    A fenced block counts when it holds ``required``. Inside prose, the first object holding
    ``required`` wins, else the first object at all; but when some brace did not start valid
    JSON and no object holds ``required``, the answer is broken JSON (e.g. cut off), not prose
    around a wrong object, and fails as ``invalid_json``.

    Linear time: a decode is tried only where an object can start (:data:`_OBJECT_START`),
    decoded objects are skipped whole, and the decodes may cost :data:`SCAN_BUDGET` times the
    answer's length in all (a failure at ``p`` reads up to ``p``); past it, the answer is broken.
    """
    if text is None or not text.strip():
        raise _ParseError("empty_response")
    if len(text) > MAX_ANSWER_CHARS:
        raise _ParseError("too_large")
    whole = _loads_object(text.strip())
    if whole is not None:
        return whole
    for block in _FENCED_BLOCK.findall(text):
        fenced = _loads_object(block.strip())
        if fenced is not None and required in fenced:
            repairs["code_fence"] = None
            return fenced
    first, broken = None, False
    budget = SCAN_BUDGET * len(text)
    position = 0
    while budget > 0 and (start := _OBJECT_START.search(text, position)) is not None:
        at = start.start()
        broken = broken or text.find("{", position, at) != -1
        try:
            found, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as failure:
            broken, position, budget = True, at + 1, budget - DECODE_COST - failure.pos
            continue
        except (ValueError, RecursionError):  # too deep, or too many digits for an int
            broken, position, budget = True, at + 1, budget - DECODE_COST - len(text)
            continue
        budget -= DECODE_COST + end - at
        if required in found:
            repairs["prose"] = None
            return found
        if first is None:
            first = found
        position = end
    broken = broken or "{" in text[position:]  # a brace left unsearched counts as broken
    if first is not None and not broken:
        repairs["prose"] = None
        return first
    if _REFUSAL.match(text):
        raise _ParseError("refusal")
    raise _ParseError("invalid_json" if "{" in text else "no_json")


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------- listwise fields


def _listwise(
    answer: dict[str, Any], key_to_id: Mapping[str, str], order: tuple[str, ...], repairs: _Repairs
) -> Parsed:
    entries = answer.get("candidates")
    if not isinstance(entries, list) or not entries:
        raise _ParseError("refusal" if "refusal" in answer else "missing_candidates")
    factuality: dict[str, float] = {}
    risk: dict[str, float] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise _ParseError("bad_candidate")
        key = _resolve_key(entry["key"], key_to_id, repairs)
        if key in factuality:
            raise _ParseError(f"duplicate_key:{key}")
        factuality[key] = _bounded(
            entry.get("factuality"), MAX_FACTUALITY, "factuality", key, repairs
        )
        if entry.get("hallucination_risk") is None:
            repairs["risk_default"] = None
            risk[key] = DEFAULT_RISK
        else:
            risk[key] = _bounded(entry["hallucination_risk"], 1.0, "risk", key, repairs)
    slot_of_key = {key: order.index(cid) for key, cid in key_to_id.items()}
    keys_in_slot_order = sorted(key_to_id, key=slot_of_key.__getitem__)
    for key in keys_in_slot_order:
        if key not in factuality:
            raise _ParseError(f"missing_key:{key}")
    ranking = _ranking(answer.get("ranking"), key_to_id, repairs)
    if ranking is None:
        repairs["ranking_derived"] = None
        ranking = sorted(keys_in_slot_order, key=lambda k: (-factuality[k], slot_of_key[k]))
    confidence = _confidence(answer, repairs)
    return Parsed(
        ok=True,
        repaired=tuple(repairs),
        factuality={key_to_id[k]: v for k, v in factuality.items()},
        hallucination_risk={key_to_id[k]: v for k, v in risk.items()},
        ranking=tuple(key_to_id[k] for k in ranking),
        confidence=confidence,
    )


def _resolve_key(raw: Any, key_to_id: Mapping[str, str], repairs: _Repairs) -> str:
    """The prompt's key that ``raw`` names exactly, or up to case and whitespace."""
    if isinstance(raw, str):
        if raw in key_to_id:
            return raw
        matches = [k for k in key_to_id if normalize_key(k) == normalize_key(raw)]
        if len(matches) == 1:
            repairs["key_case"] = None
            return matches[0]
    shown = " ".join(str(raw).split())[:SHOWN_KEY_CHARS]
    raise _ParseError(f"unknown_key:{shown}")


def _ranking(raw: Any, key_to_id: Mapping[str, str], repairs: _Repairs) -> list[str] | None:
    """The ranking in keys; ``None`` when the judge gave none."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise _ParseError("bad_ranking")
    try:
        ranking = [_resolve_key(k, key_to_id, repairs) for k in raw]
    except _ParseError:
        raise _ParseError("bad_ranking") from None
    if len(ranking) != len(key_to_id) or set(ranking) != set(key_to_id):
        raise _ParseError("bad_ranking")
    return ranking


def _number(value: Any, repairs: _Repairs) -> float | None:
    """``value`` as a float (NaN and infinities too: the range checks reject them; a finite
    numeric string as the ``number_string`` repair), or ``None`` when it is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int beyond floats; the range checks reject it
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        if math.isfinite(number):
            repairs["number_string"] = None
            return number
    return None


def _bounded(value: Any, upper: float, name: str, key: str, repairs: _Repairs) -> float:
    """``value`` in [0, ``upper``], else a failure naming ``name`` and the ``key`` if any."""
    number, at = _number(value, repairs), f":{key}" if key else ""
    if number is None:
        raise _ParseError(f"bad_{name}{at}")
    if not 0.0 <= number <= upper:
        raise _ParseError(f"{name}_out_of_range{at}")
    return number


def _confidence(answer: dict[str, Any], repairs: _Repairs) -> float | None:
    """The stated confidence in [0, 1], or ``None`` when the judge gave none."""
    raw = answer.get("confidence")
    return None if raw is None else _bounded(raw, 1.0, "confidence", "", repairs)
