"""Tests for pcf/judges/simulated.py: determinism, well-formed answers, bias, malformed rate."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence

import pytest

from pcf.items import Item
from pcf.judges.base import CallContext, JudgeReply, JudgeRequest
from pcf.judges.simulated import (
    DEFAULT_SLOT_BIAS,
    MALFORMED_SHAPES,
    STRONG_SLOT_BIAS,
    SimulatedJudge,
)
from pcf.orderings import canonical_order, schedule
from pcf.parsing import parse_listwise, parse_pairwise
from pcf.prompts import TIE, neutral_keys, render_listwise, render_pairwise
from tests.factories import make_item


def ask(
    judge: SimulatedJudge,
    item: Item,
    order: Sequence[str],
    *,
    keys: Sequence[str] | None = None,
    repeat_index: int = 0,
    pairwise: bool = False,
) -> tuple[JudgeReply, dict[str, str]]:
    """The judge's reply to one rendered call, and the prompt's key -> candidate id map."""
    rendered = (render_pairwise if pairwise else render_listwise)(item, order, keys)
    context = CallContext(
        item,
        tuple(order),
        rendered.keys,
        "pairwise" if pairwise else "listwise",
        repeat_index,
    )
    reply = asyncio.run(judge.complete(rendered.request(context=context)))
    return reply, rendered.key_to_id


def canonical(item: Item) -> tuple[str, ...]:
    return canonical_order(item.candidate_ids, 0, item.item_id)


def gold_items(count: int, n: int = 4) -> list[Item]:
    return [make_item(f"g{i}", n=n, gold=f"c{i % n}") for i in range(count)]


def test_same_call_gives_the_same_text() -> None:
    item = make_item()
    first, _ = ask(SimulatedJudge(seed=3), item, ("c2", "c0", "c3", "c1"))
    again, _ = ask(SimulatedJudge(seed=3), item, ("c2", "c0", "c3", "c1"))
    assert first.text == again.text


def test_other_order_repeat_seed_or_model_gives_a_new_draw() -> None:
    item = make_item()
    order = ("c2", "c0", "c3", "c1")
    base, _ = ask(SimulatedJudge(), item, order)
    variants = [
        ask(SimulatedJudge(), item, ("c0", "c3", "c1", "c2"))[0],
        ask(SimulatedJudge(), item, order, repeat_index=1)[0],
        ask(SimulatedJudge(seed=1), item, order)[0],
        ask(SimulatedJudge("sim-other"), item, order)[0],
    ]
    assert all(v.text != base.text for v in variants)


@pytest.mark.parametrize("n", [2, 3, 4, 6])
@pytest.mark.parametrize("neutral", [False, True])
def test_listwise_answer_is_json_with_every_key_once(n: int, neutral: bool) -> None:
    judge = SimulatedJudge(seed=7)
    for index in range(60):
        item = make_item(f"i{index}", n=n, gold="c0" if index % 2 else None)
        order = canonical(item)
        keys = neutral_keys(n, "test", index) if neutral else None
        reply, key_to_id = ask(judge, item, order, keys=keys)
        answer = json.loads(reply.text)
        assert set(answer) == {"candidates", "ranking", "confidence"}
        shown = list(key_to_id)
        assert [c["key"] for c in answer["candidates"]] == shown
        assert sorted(answer["ranking"]) == sorted(shown)
        for entry in answer["candidates"]:
            assert 0 <= entry["factuality"] <= 10
            assert entry["factuality"] == round(entry["factuality"], 1)
            assert 0 <= entry["hallucination_risk"] <= 1
            assert entry["rationale"].startswith("Simulated")
        assert 0 <= answer["confidence"] <= 1
        scores = {c["key"]: c["factuality"] for c in answer["candidates"]}
        ranked = [scores[k] for k in answer["ranking"]]
        assert ranked == sorted(ranked, reverse=True)
        parsed = parse_listwise(reply.text, key_to_id, order)
        assert parsed.ok
        assert parsed.repaired == ()


def test_risk_falls_as_factuality_rises() -> None:
    judge = SimulatedJudge()
    pairs = []
    for index in range(100):
        item = make_item(f"r{index}", gold=None)
        answer = json.loads(ask(judge, item, canonical(item))[0].text)
        pairs += [(c["factuality"], c["hallucination_risk"]) for c in answer["candidates"]]
    low = [risk for score, risk in pairs if score < 4]
    high = [risk for score, risk in pairs if score > 6]
    assert sum(high) / len(high) < sum(low) / len(low) - 0.2


def slot_one_share(judge: SimulatedJudge, items: int = 300) -> float:
    """Share of top picks in slot 1 when every candidate visits every slot once."""
    tops = []
    for index in range(items):
        item = make_item(f"b{index}", gold=None)
        base = canonical(item)
        for shift in range(4):
            order = base[shift:] + base[:shift]
            reply, key_to_id = ask(judge, item, order)
            top = key_to_id[json.loads(reply.text)["ranking"][0]]
            tops.append(order.index(top) == 0)
    return sum(tops) / len(tops)


def test_primacy_bias_raises_slot_one_top_picks() -> None:
    unbiased = slot_one_share(SimulatedJudge(slot_bias=()))
    default = slot_one_share(SimulatedJudge())
    strong = slot_one_share(SimulatedJudge(slot_bias=(1.5, 0.5, 0.0, -0.5)))
    assert abs(unbiased - 0.25) < 0.03
    assert default > unbiased + 0.04
    assert strong > 0.35


def test_the_strong_primacy_model_carries_its_own_slot_bias() -> None:
    assert SimulatedJudge("sim-strong-primacy").slot_bias == STRONG_SLOT_BIAS
    assert SimulatedJudge("sim-primacy").slot_bias == DEFAULT_SLOT_BIAS
    assert SimulatedJudge("sim-strong-primacy", slot_bias=()).slot_bias == ()
    assert SimulatedJudge("sim-strong-primacy").describe()["slot_bias"] == list(STRONG_SLOT_BIAS)
    strong = slot_one_share(SimulatedJudge("sim-strong-primacy"))
    assert strong > slot_one_share(SimulatedJudge()) + 0.1


def test_slots_past_the_bias_tuple_keep_its_last_value() -> None:
    judge = SimulatedJudge(noise=0.0, slot_bias=(0.0, -1.0))
    item = make_item(gold=None)
    latent = judge.latent_factuality(item)
    order = ("c0", "c1", "c2", "c3")
    answer = json.loads(ask(judge, item, order)[0].text)
    shown = [c["factuality"] for c in answer["candidates"]]
    expected = [latent[cid] + bias for cid, bias in zip(order, (0, -1, -1, -1), strict=True)]
    assert shown == [round(min(max(s, 0.0), 10.0), 1) for s in expected]


def test_gold_wins_more_often_than_chance_but_not_always() -> None:
    judge = SimulatedJudge()
    items = gold_items(300)
    right = 0
    for item in items:
        reply, key_to_id = ask(judge, item, canonical(item))
        right += key_to_id[json.loads(reply.text)["ranking"][0]] == item.gold
    assert 0.6 < right / len(items) < 0.92


def test_defaults_give_a_realistic_mix_of_accuracy_and_instability() -> None:
    """Direct accuracy about 70-85%, some top pick changing with the order on 20-40% of items."""
    judge = SimulatedJudge()
    items = gold_items(300)
    direct_right = unstable = 0
    for item in items:
        tops = []
        for order in schedule(
            "balanced", item.candidate_ids, 7, dataset_seed=0, item_id=item.item_id
        ):
            reply, key_to_id = ask(judge, item, order)
            tops.append(key_to_id[json.loads(reply.text)["ranking"][0]])
        direct_right += tops[0] == item.gold
        unstable += len(set(tops)) > 1
    assert 0.70 <= direct_right / len(items) <= 0.85
    assert 0.20 <= unstable / len(items) <= 0.40


def test_latent_factuality_puts_gold_first_on_most_items() -> None:
    judge = SimulatedJudge()
    leads = []
    for item in gold_items(400):
        latent = judge.latent_factuality(item)
        best_wrong = max(v for cid, v in latent.items() if cid != item.gold)
        leads.append(latent[item.gold] - best_wrong)
    assert 0.7 < sum(lead > 0 for lead in leads) / len(leads) < 0.92
    assert sum(abs(lead) < 1 for lead in leads) > 0.05 * len(leads)


EXPECTED_LISTWISE = {
    "code_fence": ("ok", "code_fence"),
    "key_case": ("ok", "key_case"),
    "truncated": ("invalid_json", None),
    "missing_key": ("bad_ranking", None),
    "prose": ("no_json", None),
}


def test_malformed_rate_and_shapes_over_2000_calls() -> None:
    judge = SimulatedJudge(malformed_rate=0.2)
    shapes: Counter[str | None] = Counter()
    for index in range(500):
        item = make_item(f"m{index}", gold="c1")
        for order in schedule(
            "balanced", item.candidate_ids, 4, dataset_seed=0, item_id=f"m{index}"
        ):
            reply, key_to_id = ask(judge, item, order)
            shape = reply.raw["malformed"]
            shapes[shape] += 1
            parsed = parse_listwise(reply.text, key_to_id, order)
            if shape is None:
                assert parsed.ok
                assert parsed.repaired == ()
                continue
            outcome, repair = EXPECTED_LISTWISE[shape]
            if outcome == "ok":
                assert parsed.ok
                assert repair in parsed.repaired
            else:
                assert not parsed.ok
                assert parsed.error == outcome
    total = sum(shapes.values())
    assert total == 2000
    assert abs(1 - shapes[None] / total - 0.2) < 0.03
    assert set(shapes) == {None, *MALFORMED_SHAPES}
    assert min(shapes[s] for s in MALFORMED_SHAPES) > 40


def test_repairable_malformed_answers_keep_the_scores() -> None:
    checked = 0
    for index in range(40):
        item = make_item(f"s{index}")
        order = canonical(item)
        broken, key_to_id = ask(SimulatedJudge(malformed_rate=1.0), item, order)
        if broken.raw["malformed"] not in {"code_fence", "key_case"}:
            continue
        clean, _ = ask(SimulatedJudge(), item, order)
        repaired = parse_listwise(broken.text, key_to_id, order)
        expected = parse_listwise(clean.text, key_to_id, order)
        assert (repaired.factuality, repaired.ranking) == (expected.factuality, expected.ranking)
        checked += 1
    assert checked > 5


@pytest.mark.parametrize("neutral", [False, True])
def test_pairwise_verdicts_and_malformed_shapes(neutral: bool) -> None:
    judge = SimulatedJudge(malformed_rate=0.3)
    verdicts: Counter[str] = Counter()
    for index in range(600):
        item = make_item(f"p{index}", n=2, gold="c0")
        order = ("c0", "c1") if index % 2 else ("c1", "c0")
        keys = neutral_keys(2, "pair", index) if neutral else None
        reply, key_to_id = ask(judge, item, order, keys=keys, pairwise=True)
        parsed = parse_pairwise(reply.text, key_to_id)
        shape = reply.raw["malformed"]
        if shape is None:
            answer = json.loads(reply.text)
            assert set(answer) == {"verdict", "confidence", "rationale"}
            assert answer["verdict"] in [*key_to_id, TIE]
            assert 0 <= answer["confidence"] <= 1
        if shape in {None, "code_fence", "key_case"}:
            assert parsed.ok
            verdicts[parsed.verdict] += 1
        else:
            expected = {"truncated": "invalid_json", "missing_key": "missing_verdict"}
            assert parsed.error == expected.get(shape, "no_json")
    assert verdicts[TIE] > 0
    assert verdicts["c0"] > verdicts["c1"] > 0


def test_pairwise_keys_change_the_draw() -> None:
    """APOC's keyed confirmation shows the same order with new keys: a new, independent call."""
    judge = SimulatedJudge()
    differs = 0
    for index in range(50):
        item = make_item(f"k{index}", n=2, gold=None)
        plain, _ = ask(judge, item, ("c0", "c1"), pairwise=True)
        keyed, _ = ask(judge, item, ("c0", "c1"), keys=neutral_keys(2, index), pairwise=True)
        differs += json.loads(plain.text)["confidence"] != json.loads(keyed.text)["confidence"]
    assert differs > 40


def test_usage_latency_and_raw() -> None:
    judge = SimulatedJudge(latency_s=0.02, seed=5)
    item = make_item()
    reply, _ = ask(judge, item, canonical(item))
    rendered = render_listwise(item, canonical(item))
    assert reply.input_tokens == len(rendered.system + rendered.user) // 4
    assert reply.output_tokens == len(reply.text) // 4
    assert reply.latency_s >= 0.02
    assert reply.raw["simulated"] is True
    assert reply.raw["seed"] == 5
    assert reply.raw["malformed"] is None


def test_describe_reports_the_settings() -> None:
    judge = SimulatedJudge("sim-x", seed=2, noise=0.5, slot_bias=(1, 0), malformed_rate=0.1)
    assert judge.backend == "simulated"
    assert judge.describe() == {
        "backend": "simulated",
        "simulated": True,
        "model": "sim-x",
        "seed": 2,
        "noise": 0.5,
        "slot_bias": [1.0, 0.0],
        "malformed_rate": 0.1,
        "latency_s": 0.0,
    }


def test_request_without_context_is_refused() -> None:
    with pytest.raises(ValueError, match=r"needs request\.context"):
        asyncio.run(SimulatedJudge().complete(JudgeRequest(system="s", user="u")))


@pytest.mark.parametrize(
    ("order", "protocol", "message"),
    [
        (("c0", "c1", "c2", "c3"), "pointwise", "unknown protocol"),
        (("c0", "c1", "c9", "c3"), "listwise", "does not fit"),
        (("c0", "c1"), "listwise", "every candidate"),
        (("c0", "c1", "c2"), "pairwise", "2 candidates"),
    ],
)
def test_bad_context_is_refused(order: tuple[str, ...], protocol: str, message: str) -> None:
    item = make_item()
    keys = tuple("ABCD"[: len(order)])
    request = JudgeRequest("s", "u", context=CallContext(item, order, keys, protocol))
    with pytest.raises(ValueError, match=message):
        asyncio.run(SimulatedJudge().complete(request))


@pytest.mark.parametrize(
    "settings",
    [{"noise": -1.0}, {"malformed_rate": 1.5}, {"latency_s": -0.1}],
)
def test_bad_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        SimulatedJudge(**settings)
