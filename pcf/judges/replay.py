"""A judge that answers from recorded judgments (METHOD.md ``judgments.jsonl``), offline.

Replaying a run through the normal pipeline (prompt, judge, parser, consensus) reproduces its
decisions without calling a provider, e.g. to check a stored run or to try other settings on it.
"""

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
    """Answers each call with the recorded judgment of the same item and ordering.

    Calls are matched on ``(item_id, order, occurrence)``: the request's
    ``context.repeat_index`` picks the n-th recorded call of that item with that exact
    ordering, counting in ``(execution, call_index)`` order (so a ``repeated`` schedule, or a
    second execution, replays its own calls). The recorded scores are rendered back into the
    listwise JSON answer with the request's keys, so the normal parser reads them.

    Attributes:
        backend: always ``"replay"``.
        model: a name for the replayed judge.
        recorded: what made the recording (:func:`~pcf.judgments.recording_provenance`): a
            replay of the simulated judge's judgments is simulated too.
    """

    backend = "replay"

    def __init__(
        self, path_or_judgments: str | Path | Iterable[Judgment], *, model: str = "replay"
    ) -> None:
        """Load the recording.

        Args:
            path_or_judgments: a ``judgments.jsonl`` file, or the judgments themselves.
            model: the name reported for this judge.

        Raises:
            DataError: the file has problems (see :func:`~pcf.judgments.read_judgments`).
        """
        if isinstance(path_or_judgments, str | Path):
            judgments = read_judgments(path_or_judgments)
        else:
            judgments = list(path_or_judgments)
        self.model = model
        self.recorded = recording_provenance(judgments)
        self._calls: dict[tuple[str, tuple[str, ...]], list[Judgment]] = defaultdict(list)
        for judgment in sorted(judgments, key=lambda j: (j.execution, j.call_index)):
            self._calls[(judgment.item_id, tuple(judgment.order))].append(judgment)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Replay the recorded answer of this call.

        Raises:
            ValueError: the request has no context, is not listwise, or its keys do not match
                its order.
            JudgeError: ``not_recorded`` when the recording has no such call, or
                ``replayed_failure: <error>`` when the recorded call failed; neither is
                retryable.
        """
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
