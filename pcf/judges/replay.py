"""A judge that answers from recorded judgments (METHOD.md ``judgments.jsonl``), offline:
a replay through the normal pipeline reproduces a run's decisions without a provider."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest
from pcf.judgments import Judgment, read_judgments, recording_provenance

REPLAY_RATIONALE = "Replayed from a recorded judgment."


class ReplayJudge:
    """Answers each call with the recorded judgment of the same item and ordering (the
    ``context.repeat_index``-th, in ``(execution, call_index)`` order) as a listwise JSON answer in
    the request's keys. ``recorded``: what made the recording (a replay of simulated judgments is
    simulated too)."""

    backend = "replay"

    def __init__(
        self, path_or_judgments: str | Path | Iterable[Judgment], *, model: str = "replay"
    ) -> None:
        """Load the recording: a ``judgments.jsonl`` file, or the judgments themselves."""
        source = path_or_judgments
        judgments = read_judgments(source) if isinstance(source, str | Path) else list(source)

        self.model = model
        self.recorded = recording_provenance(judgments)
        self._calls: dict[tuple[str, tuple[str, ...]], list[Judgment]] = defaultdict(list)
        for judgment in sorted(judgments, key=lambda j: (j.execution, j.call_index)):
            self._calls[(judgment.item_id, tuple(judgment.order))].append(judgment)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Replay the recorded answer of this call (JudgeError ``not_recorded`` when there is
        none, ``replayed_failure: <error>`` when it failed)."""
        context = request.context
        if context is None:
            raise ValueError(
                "ReplayJudge needs request.context (a CallContext with the item and order) "
                "to find the recorded call"
            )
        if context.protocol != "listwise":
            raise ValueError(f"ReplayJudge replays listwise calls only, got {context.protocol!r}")
        order, keys = tuple(context.order), tuple(context.keys)
        if len(keys) != len(order):
            raise ValueError(f"{len(keys)} keys given for an order of {len(order)} candidates")
        item_id = context.item.item_id
        recorded = self._calls.get((item_id, order), [])
        call = f"item {item_id!r}, order {list(order)}, repeat {context.repeat_index}"
        if context.repeat_index >= len(recorded):
            raise JudgeError(
                "not_recorded",
                f"no recorded call for {call} ({len(recorded)} recorded with this order)",
                retryable=False,
            )
        judgment = recorded[context.repeat_index]
        if not judgment.ok:
            raise JudgeError(
                f"replayed_failure: {judgment.error}",
                f"the recorded call for {call} failed",
                retryable=False,
            )
        text = json.dumps(_listwise_answer(judgment, dict(zip(order, keys, strict=True))))
        return JudgeReply(
            text=text,
            raw={
                "replayed": True,
                "execution": judgment.execution,
                "call_index": judgment.call_index,
            },
        )


def _listwise_answer(judgment: Judgment, key_of: dict[str, str]) -> dict[str, Any]:
    """The recorded judgment as the listwise JSON answer, in the request's keys."""
    answer: dict[str, Any] = {
        "candidates": [
            {
                "key": key_of[cid],
                "factuality": judgment.factuality[cid],
                "hallucination_risk": judgment.hallucination_risk[cid],
                "rationale": REPLAY_RATIONALE,
            }
            for cid in judgment.order
        ],
        "ranking": [key_of[cid] for cid in judgment.ranking],
    }
    if judgment.confidence is not None:
        answer["confidence"] = judgment.confidence
    return answer
