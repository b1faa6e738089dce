"""Tests for pcf/judges/replay.py: round trips through judgments.jsonl and the replay errors."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pcf.items import Item
from pcf.judges.base import CallContext, JudgeError, JudgeRequest
from pcf.judges.replay import ReplayJudge
from pcf.judges.simulated import SimulatedJudge
from pcf.judgments import Judgment, write_judgments
from pcf.orderings import schedule
from pcf.parsing import parse_listwise
from pcf.prompts import neutral_keys, render_listwise
from tests.factories import judgment, make_item

Judge = SimulatedJudge | ReplayJudge


def judge_call(
    judge: Judge,
    item: Item,
    order: Sequence[str],
    repeat_index: int,
    *,
    execution: int = 0,
    call_index: int = 0,
    keys: Sequence[str] | None = None,
) -> Judgment:
    """One call through the normal path: render, judge, parse."""
    rendered = render_listwise(item, order, keys)
    context = CallContext(item, tuple(order), rendered.keys, "listwise", repeat_index)
    reply = asyncio.run(judge.complete(rendered.request(context=context)))
    parsed = parse_listwise(reply.text, rendered.key_to_id, order)
    return Judgment(
        item.item_id,
        execution,
        call_index,
        tuple(order),
        parsed.ok,
        parsed.error,
        dict(parsed.factuality),
        dict(parsed.hallucination_risk),
        parsed.ranking,
        parsed.confidence,
        parsed.repaired,
    )


def run(judge: Judge, items: list[Item], kind: str, k: int, executions: int) -> list[Judgment]:
    """Every call of a small run; ``repeat_index`` counts earlier calls of the same ordering."""
    out = []
    for item in items:
        seen: Counter[tuple[str, ...]] = Counter()
        orders = schedule(kind, item.candidate_ids, k, dataset_seed=0, item_id=item.item_id)
        for execution in range(executions):
            for call_index, order in enumerate(orders):
                out.append(
                    judge_call(
                        judge,
                        item,
                        order,
                        seen[order],
                        execution=execution,
                        call_index=call_index,
                    )
                )
                seen[order] += 1
    return out


@pytest.mark.parametrize(("kind", "k", "executions"), [("balanced", 7, 1), ("repeated", 3, 2)])
def test_replay_round_trip_gives_the_same_judgments(
    tmp_path: Path, kind: str, k: int, executions: int
) -> None:
    items = [make_item(f"i{index}", gold="c1") for index in range(12)]
    recorded = run(SimulatedJudge(seed=4, malformed_rate=0.1), items, kind, k, executions)
    path = tmp_path / "judgments.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_judgments(recorded, out)
    judge = ReplayJudge(path)
    replayed = []
    for original in recorded:
        item = next(i for i in items if i.item_id == original.item_id)
        repeat = sum(
            r.order == original.order
            for r in recorded
            if r.item_id == original.item_id
            and (r.execution, r.call_index) < (original.execution, original.call_index)
        )
        if not original.ok:
            with pytest.raises(JudgeError) as failure:
                judge_call(judge, item, original.order, repeat)
            assert failure.value.reason == f"replayed_failure: {original.error}"
            continue
        replayed.append(
            judge_call(
                judge,
                item,
                original.order,
                repeat,
                execution=original.execution,
                call_index=original.call_index,
            )
        )
    kept = [j for j in recorded if j.ok]
    assert len(kept) < len(recorded)
    assert any(j.repaired for j in kept)
    assert replayed == [replace(j, repaired=()) for j in kept]


def test_repeats_of_one_ordering_replay_their_own_calls() -> None:
    item = make_item()
    order = ("c2", "c0", "c3", "c1")
    recorded = [
        judgment("i1", index, order, {"c0": index, "c1": 1, "c2": 2, "c3": 3}, execution=0)
        for index in range(3)
    ]
    judge = ReplayJudge(recorded)
    scores = [judge_call(judge, item, order, repeat).factuality["c0"] for repeat in range(3)]
    assert scores == [0, 1, 2]


def test_executions_replay_in_order_after_each_other() -> None:
    item = make_item()
    order = ("c0", "c1", "c2", "c3")
    second = judgment("i1", 0, order, {"c0": 9, "c1": 1, "c2": 2, "c3": 3}, execution=1)
    first = judgment("i1", 0, order, {"c0": 4, "c1": 1, "c2": 2, "c3": 3}, execution=0)
    judge = ReplayJudge([second, first])
    assert judge_call(judge, item, order, 0).factuality["c0"] == 4
    assert judge_call(judge, item, order, 1).factuality["c0"] == 9


def test_replay_uses_the_request_keys() -> None:
    item = make_item()
    order = ("c3", "c1", "c0", "c2")
    recorded = judgment("i1", 0, order, {"c0": 8, "c1": 3, "c2": 5.5, "c3": 1})
    keys = neutral_keys(4, "replay")
    replayed = judge_call(ReplayJudge([recorded]), item, order, 0, keys=keys)
    assert replayed.factuality == recorded.factuality
    assert replayed.ranking == ("c0", "c2", "c1", "c3")


def test_missing_confidence_stays_missing() -> None:
    item = make_item()
    order = ("c0", "c1", "c2", "c3")
    recorded = Judgment(
        "i1",
        0,
        0,
        order,
        True,
        factuality={"c0": 5, "c1": 6, "c2": 7, "c3": 8},
        hallucination_risk=dict.fromkeys(order, 0.2),
        ranking=("c3", "c2", "c1", "c0"),
    )
    assert judge_call(ReplayJudge([recorded]), item, order, 0).confidence is None


@pytest.mark.parametrize(
    ("order", "repeat"),
    [(("c1", "c0", "c2", "c3"), 0), (("c0", "c1", "c2", "c3"), 1)],
)
def test_call_without_recording_is_not_recorded(order: tuple[str, ...], repeat: int) -> None:
    recorded = judgment("i1", 0, ("c0", "c1", "c2", "c3"), {"c0": 1, "c1": 2, "c2": 3, "c3": 4})
    with pytest.raises(JudgeError) as failure:
        judge_call(ReplayJudge([recorded]), make_item(), order, repeat)
    assert failure.value.reason == "not_recorded"
    assert failure.value.retryable is False
    assert "'i1'" in str(failure.value)
    assert str(list(order)) in str(failure.value)


def test_unknown_item_is_not_recorded() -> None:
    recorded = judgment("i1", 0, ("c0", "c1"), {"c0": 1, "c1": 2})
    with pytest.raises(JudgeError, match=r"not_recorded: .*'other'"):
        judge_call(ReplayJudge([recorded]), make_item("other", n=2), ("c0", "c1"), 0)


def test_recorded_failure_is_replayed_as_a_failure() -> None:
    recorded = judgment("i1", 0, ("c0", "c1"), {}, ok=False)
    with pytest.raises(JudgeError) as failure:
        judge_call(ReplayJudge([recorded]), make_item(n=2), ("c0", "c1"), 0)
    assert failure.value.reason == "replayed_failure: no_json"
    assert failure.value.retryable is False


def test_request_without_context_or_not_listwise_is_refused() -> None:
    judge = ReplayJudge([])
    with pytest.raises(ValueError, match=r"needs request\.context"):
        asyncio.run(judge.complete(JudgeRequest(system="s", user="u")))
    item = make_item(n=2)
    pairwise = CallContext(item, ("c0", "c1"), ("A", "B"), "pairwise")
    with pytest.raises(ValueError, match="listwise calls only"):
        asyncio.run(judge.complete(JudgeRequest("s", "u", context=pairwise)))
