"""A SIMULATED judge: offline, seeded and deterministic, with a configurable position bias.

It never reads the candidate texts, so its results say nothing about the method's accuracy on
real judges: use it for demos, tests and plumbing only, labelled simulated wherever it shows."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pcf.choices import SIMULATED_MODEL, STRONG_BIAS_MODEL
from pcf.items import Item
from pcf.judges.base import CallContext, JudgeReply, JudgeRequest
from pcf.orderings import seeded_rng
from pcf.prompts import TIE

DEFAULT_SLOT_BIAS: tuple[float, ...] = (0.8, 0.3, 0.0, -0.2)
"""Primacy: the first slots get a bonus; slots past the tuple keep its last value."""

STRONG_SLOT_BIAS: tuple[float, ...] = (4.0, 1.5, 0.0, -1.0)
"""A strong primacy: slot 1 outweighs most latent leads (the demo's position-bias run)."""

MODEL_SLOT_BIAS: dict[str, tuple[float, ...]] = {STRONG_BIAS_MODEL: STRONG_SLOT_BIAS}
"""Simulated model names that carry their own slot bias; every other name gets the default."""

GOLD_FACTUALITY = 7.5
ITEM_KINDS: tuple[tuple[str, float, tuple[float, float]], ...] = (
    ("clear", 0.65, (3.5, 6.0)),
    ("contested", 0.25, (-1.0, 2.0)),
    ("misled", 0.1, (-3.0, -1.0)),
)
"""(kind, share of items, range of the gold answer's latent lead over the best wrong answer).
Clear items are stable and right; contested ones are near ties that noise and slot bias flip;
on misled ones the judge believes a wrong answer whatever the order."""
WRONG_SPREAD = 2.5
"""Other wrong answers sit up to this far below the best wrong one."""
TIE_BAND = 0.2
"""A pairwise noisy difference smaller than this is a ``tie``."""

LISTWISE = "listwise"
PAIRWISE = "pairwise"

MALFORMED_SHAPES = ("code_fence", "key_case", "truncated", "missing_key", "prose")
"""Failure shapes, chosen per call: the first two are repairable, the others are not."""


class SimulatedJudge:
    """A simulated LLM judge answering real-looking JSON: candidate ``c`` in slot ``s`` scores
    ``latent(c) + slot_bias[s] + N(0, noise)``; every draw is seeded by what identifies it, so the
    same call always gets the same answer."""

    backend = "simulated"

    def __init__(
        self,
        model: str = SIMULATED_MODEL,
        *,
        seed: int = 0,
        noise: float = 1.0,
        slot_bias: Sequence[float] | None = None,
        malformed_rate: float = 0.0,
        latency_s: float = 0.0,
    ) -> None:
        """``slot_bias``: a bonus per slot, later slots keeping the last (None: the model's, see
        :data:`MODEL_SLOT_BIAS`); ``malformed_rate``: the share of calls answered malformed."""
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        if not 0.0 <= malformed_rate <= 1.0:
            raise ValueError(f"malformed_rate must be in [0, 1], got {malformed_rate}")
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        self.model = model
        self.seed = seed
        self.noise = noise
        if slot_bias is None:
            slot_bias = MODEL_SLOT_BIAS.get(model, DEFAULT_SLOT_BIAS)
        self.slot_bias = tuple(float(b) for b in slot_bias)
        self.malformed_rate = malformed_rate
        self.latency_s = latency_s

    def describe(self) -> dict[str, Any]:
        """The settings, for storing with a run."""
        return {
            "backend": self.backend,
            "simulated": True,
            "model": self.model,
            "seed": self.seed,
            "noise": self.noise,
            "slot_bias": list(self.slot_bias),
            "malformed_rate": self.malformed_rate,
            "latency_s": self.latency_s,
        }

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request from its :class:`~pcf.judges.base.CallContext`."""
        context = request.context
        if context is None:
            raise ValueError(
                "SimulatedJudge needs request.context (a CallContext with the item, order and "
                "keys): it answers from them, not from the prompt text"
            )
        start = time.perf_counter()
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        answer = self._answer(context)
        shape = self._malformed_shape(context)
        text = _render(answer, shape)
        return JudgeReply(
            text=text,
            input_tokens=len(request.system + request.user) // 4,
            output_tokens=len(text) // 4,
            latency_s=time.perf_counter() - start,
            raw={**self.describe(), "malformed": shape},
        )

    def latent_factuality(self, item: Item) -> dict[str, float]:
        """The simulated judge's underlying belief about each candidate, before bias and noise."""
        draws = {
            cid: seeded_rng("latent", self.seed, item.item_id, cid).random()
            for cid in item.candidate_ids
            if cid != item.gold
        }
        if item.gold is None:
            return {cid: 10.0 * draw for cid, draw in draws.items()}
        best_wrong = GOLD_FACTUALITY - self._gold_margin(item.item_id)
        top_draw = max(draws.values())
        latent = {cid: best_wrong - WRONG_SPREAD * (top_draw - d) for cid, d in draws.items()}
        return latent | {item.gold: GOLD_FACTUALITY}

    def _gold_margin(self, item_id: str) -> float:
        """The gold answer's latent lead, drawn from the item's kind (see :data:`ITEM_KINDS`)."""
        rng = seeded_rng("margin", self.seed, item_id)
        pick = rng.random()
        for _, share, (low, high) in ITEM_KINDS:
            if pick < share:
                return float(rng.uniform(low, high))
            pick -= share
        return float(rng.uniform(*ITEM_KINDS[-1][2]))

    def _bias(self, slot: int) -> float:
        return self.slot_bias[min(slot, len(self.slot_bias) - 1)] if self.slot_bias else 0.0

    def _call_rng(self, purpose: str, context: CallContext) -> np.random.Generator:
        return seeded_rng(
            purpose,
            self.seed,
            self.model,
            context.item.item_id,
            tuple(context.order),
            tuple(context.keys),
            context.repeat_index,
        )

    def _answer(self, context: CallContext) -> dict[str, Any]:
        """The well-formed JSON answer of one call."""
        item, order, keys = context.item, tuple(context.order), tuple(context.keys)
        unknown = [cid for cid in order if cid not in item.candidate_ids]
        if unknown or len(set(order)) != len(order) or len(keys) != len(order):
            raise ValueError(
                f"order {list(order)} with keys {list(keys)} does not fit item {item.item_id} "
                f"(candidates {list(item.candidate_ids)})"
            )
        latent = self.latent_factuality(item)
        rng = self._call_rng("call", context)
        noisy = [
            latent[cid] + self._bias(slot) + rng.normal(0.0, self.noise)
            for slot, cid in enumerate(order)
        ]
        if context.protocol == LISTWISE:
            if len(order) != len(item.candidates):
                raise ValueError(f"a listwise call shows every candidate of {item.item_id}")
            return _listwise_answer(keys, noisy, rng)
        if context.protocol == PAIRWISE:
            if len(order) != 2:
                raise ValueError(f"a pairwise call shows 2 candidates, got {len(order)}")
            return _pairwise_answer(keys, noisy)
        raise ValueError(f"unknown protocol {context.protocol!r}; use {LISTWISE} or {PAIRWISE}")

    def _malformed_shape(self, context: CallContext) -> str | None:
        """The failure shape of this call, or None for a well-formed answer."""
        rng = self._call_rng("malformed", context)
        if rng.random() >= self.malformed_rate:
            return None
        return MALFORMED_SHAPES[int(rng.integers(len(MALFORMED_SHAPES)))]


def _confidence(gap: float) -> float:
    """Confidence from the noisy lead of the top pick: 0.5 at a dead heat, near 0.95 when clear."""
    return round(0.5 + 0.45 * math.tanh(max(gap, 0.0) / 2.0), 2)


def _rationale(score: float) -> str:
    if score >= 7.0:
        verdict = "consistent with well-established facts"
    elif score >= 4.5:
        verdict = "partly accurate, with some unsupported details"
    else:
        verdict = "contains claims that look wrong or invented"
    return f"Simulated judgment: {verdict}."


def _listwise_answer(
    keys: tuple[str, ...], noisy: list[float], rng: np.random.Generator
) -> dict[str, Any]:
    candidates = []
    for key, score in zip(keys, noisy, strict=True):
        factuality = float(np.clip(score, 0.0, 10.0))
        risk = float(np.clip(0.95 - 0.09 * factuality + rng.normal(0.0, 0.05), 0.0, 1.0))
        candidates.append(
            {
                "key": key,
                "factuality": round(factuality, 1),
                "hallucination_risk": round(risk, 2),
                "rationale": _rationale(factuality),
            }
        )
    best_first = sorted(range(len(keys)), key=lambda slot: -noisy[slot])
    gap = noisy[best_first[0]] - noisy[best_first[1]]
    return {
        "candidates": candidates,
        "ranking": [keys[slot] for slot in best_first],
        "confidence": _confidence(gap),
    }


def _pairwise_answer(keys: tuple[str, ...], noisy: list[float]) -> dict[str, Any]:
    difference = noisy[0] - noisy[1]
    if abs(difference) < TIE_BAND:
        verdict, rationale = TIE, "Simulated judgment: the two answers are equally accurate."
    else:
        verdict = keys[0] if difference > 0 else keys[1]
        rationale = f"Simulated judgment: {verdict} is more consistent with established facts."
    return {"verdict": verdict, "confidence": _confidence(abs(difference)), "rationale": rationale}


def _recased(key: str) -> str:
    return key.lower() if key.lower() != key else key.upper()


def _render(answer: dict[str, Any], shape: str | None) -> str:
    """The answer's text, well-formed JSON or in one malformed shape."""
    listwise = "candidates" in answer
    if shape == "key_case":
        if listwise:
            answer = {
                **answer,
                "candidates": [{**c, "key": _recased(c["key"])} for c in answer["candidates"]],
                "ranking": [_recased(k) for k in answer["ranking"]],
            }
        else:
            answer = {**answer, "verdict": _recased(answer["verdict"])}
    elif shape == "missing_key":
        if listwise:
            answer = {**answer, "ranking": answer["ranking"][:-1]}
        else:
            answer = {k: v for k, v in answer.items() if k != "verdict"}
    elif shape == "prose":
        return _prose(answer)
    text = json.dumps(answer, ensure_ascii=False)
    if shape == "code_fence":
        return (
            "Here is my assessment of the candidates.\n\n```json\n"
            + json.dumps(answer, ensure_ascii=False, indent=2)
            + "\n```\n\nLet me know if you need more detail."
        )
    if shape == "truncated":
        return text[: len(text) // 2]
    return text


def _prose(answer: dict[str, Any]) -> str:
    """A plain-text answer with no JSON at all."""
    if "ranking" in answer:
        best, *rest = answer["ranking"]
        return (
            f"After weighing the candidates, {best} looks the most factually accurate, "
            f"followed by {', '.join(rest)}. The others contain unsupported details."
        )
    if answer["verdict"] == TIE:
        return "Both answers look equally accurate to me; I cannot separate them."
    return f"On balance, {answer['verdict']} is the more factually accurate answer."
