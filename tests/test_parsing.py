"""Tests for pcf/parsing.py: repairs, failure reasons, and mapping keys back to candidate ids."""

from __future__ import annotations

import json
import math
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.items import Candidate, Item
from pcf.orderings import schedule
from pcf.parsing import (
    DEFAULT_RISK,
    MAX_ANSWER_CHARS,
    PairParsed,
    Parsed,
    parse_listwise,
    parse_pairwise,
)
from pcf.prompts import TIE, neutral_keys, render_listwise, render_pairwise

ORDER = ("c-red", "c-green", "c-blue")
KEY_TO_ID = {"A": "c-red", "B": "c-green", "C": "c-blue"}
PAIR = {"A": "c-red", "B": "c-green"}
FENCED_CANDIDATE = re.compile(r'<candidate key="([^"]*)">\n(.*?)\n</candidate>', re.DOTALL)
ERROR_FORM = re.compile(r"[a-z_]+(:.{0,40})?")


def entry(key, factuality=5.0, risk=0.2, rationale="because"):
    return {
        "key": key,
        "factuality": factuality,
        "hallucination_risk": risk,
        "rationale": rationale,
    }


def answer(entries=None, ranking=("B", "A", "C"), confidence=0.8, **extra) -> dict:
    out = {
        "candidates": [entry("A", 6), entry("B", 9, 0.1), entry("C", 2, 0.7)]
        if entries is None
        else entries,
        "ranking": list(ranking),
        "confidence": confidence,
    }
    out.update(extra)
    return out


def listwise(obj) -> Parsed:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return parse_listwise(text, KEY_TO_ID, ORDER)


# ---------------------------------------------------------------- clean answers


def test_clean_answer_maps_keys_back_to_ids():
    parsed = listwise(answer())
    assert parsed == Parsed(
        ok=True,
        error=None,
        repaired=(),
        factuality={"c-red": 6.0, "c-green": 9.0, "c-blue": 2.0},
        hallucination_risk={"c-red": 0.2, "c-green": 0.1, "c-blue": 0.7},
        ranking=("c-green", "c-red", "c-blue"),
        confidence=0.8,
    )


def test_bounds_are_inclusive_and_integers_are_fine():
    parsed = listwise(answer([entry("A", 0, 0), entry("B", 10, 1), entry("C", 7, 0.5)]))
    assert parsed.ok
    assert parsed.factuality == {"c-red": 0.0, "c-green": 10.0, "c-blue": 7.0}
    assert all(isinstance(v, float) for v in parsed.factuality.values())


@pytest.mark.parametrize("confidence", [None, "absent"])
def test_missing_confidence_is_none_not_a_failure(confidence):
    obj = answer(confidence=confidence)
    if confidence == "absent":
        del obj["confidence"]
    parsed = listwise(obj)
    assert parsed.ok
    assert parsed.confidence is None
    assert parsed.repaired == ()


def test_extra_fields_and_missing_rationale_are_ignored():
    entries = [entry("A", 6), entry("B", 9), {"key": "C", "factuality": 1, "hallucination_risk": 1}]
    parsed = listwise(answer(entries, notes="thinking aloud"))
    assert parsed.ok
    assert parsed.repaired == ()


# ---------------------------------------------------------------- repairs


@pytest.mark.parametrize(
    "text",
    [
        "```json\n{body}\n```",
        "Here is my judgment:\n```JSON\n{body}\n```\nThanks.",
        "```\n{body}\n```",
        "```json\n{body}",
    ],
)
def test_code_fence_repair(text):
    parsed = listwise(text.replace("{body}", json.dumps(answer(), indent=2)))
    assert parsed.ok
    assert parsed.repaired == ("code_fence",)
    assert parsed.ranking == ("c-green", "c-red", "c-blue")


def test_prose_repair_handles_braces_inside_strings():
    tricky = entry("A", 6, rationale='It writes "{" and "}" and \\"quotes\\" {like this}.')
    body = json.dumps(answer([tricky, entry("B", 9), entry("C", 2)]))
    text = f"Let me think about {{the}} sets {{1, 2}}.\nMy answer: {body}\nHope this helps {{:}}"
    parsed = listwise(text)
    assert parsed.ok
    assert parsed.repaired == ("prose",)
    assert parsed.factuality["c-red"] == 6.0


def test_prose_prefers_the_object_with_candidates():
    text = 'Note {"draft": true} then ' + json.dumps(answer())
    parsed = listwise(text)
    assert parsed.ok
    assert parsed.repaired == ("prose",)


@pytest.mark.parametrize(
    ("keys", "ranking"),
    [(("a", "b", "c"), ("b", "a", "c")), ((" A ", "b", "C"), ("B", " a", "c"))],
)
def test_key_case_repair(keys, ranking):
    entries = [entry(keys[0], 6), entry(keys[1], 9), entry(keys[2], 2)]
    parsed = listwise(answer(entries, ranking=ranking))
    assert parsed.ok
    assert parsed.repaired == ("key_case",)
    assert parsed.ranking == ("c-green", "c-red", "c-blue")
    assert parsed.factuality == {"c-red": 6.0, "c-green": 9.0, "c-blue": 2.0}


def test_key_case_repair_for_neutral_keys():
    key_to_id = {"Response Q7": "c-red", "Response K2": "c-green"}
    obj = {
        "candidates": [entry("response q7", 3), entry("RESPONSE  K2", 8)],
        "ranking": ["Response K2", "response Q7"],
        "confidence": 0.6,
    }
    parsed = parse_listwise(json.dumps(obj), key_to_id, ("c-red", "c-green"))
    assert parsed.ok
    assert parsed.repaired == ("key_case",)
    assert parsed.ranking == ("c-green", "c-red")


def test_key_case_prefers_an_exact_key():
    key_to_id = {"a": "c-red", "A": "c-green"}
    obj = {"candidates": [entry("a", 3), entry("A", 8)], "ranking": ["A", "a"]}
    parsed = parse_listwise(json.dumps(obj), key_to_id, ("c-red", "c-green"))
    assert parsed.ok
    assert parsed.repaired == ()
    assert parsed.factuality == {"c-red": 3.0, "c-green": 8.0}


def test_ranking_derived_from_factuality_with_ties_broken_by_slot():
    order = ("c-blue", "c-red", "c-green")  # slots: A=c-blue, B=c-red, C=c-green
    key_to_id = dict(zip("ABC", order, strict=True))
    obj = answer([entry("C", 8), entry("B", 5), entry("A", 8)])
    del obj["ranking"]
    parsed = parse_listwise(json.dumps(obj), key_to_id, order)
    assert parsed.ok
    assert parsed.repaired == ("ranking_derived",)
    assert parsed.ranking == ("c-blue", "c-green", "c-red")


def test_derived_ranking_breaks_ties_by_slot_not_by_key_name():
    order = ("c-red", "c-green")
    key_to_id = {"Response C2": "c-green", "Response Z9": "c-red"}
    obj = {"candidates": [entry("Response C2", 7), entry("Response Z9", 7)]}
    parsed = parse_listwise(json.dumps(obj), key_to_id, order)
    assert parsed.ranking == ("c-red", "c-green")


def test_null_ranking_is_derived_too():
    parsed = listwise(answer(ranking=()) | {"ranking": None})
    assert parsed.ok
    assert parsed.repaired == ("ranking_derived",)
    assert parsed.ranking == ("c-green", "c-red", "c-blue")


@pytest.mark.parametrize("missing", ["absent", None])
def test_risk_default_repair(missing):
    no_risk = {"key": "B", "factuality": 9, "rationale": "x"}
    if missing is None:
        no_risk["hallucination_risk"] = None
    parsed = listwise(answer([entry("A", 6), no_risk, entry("C", 2)]))
    assert parsed.ok
    assert parsed.repaired == ("risk_default",)
    assert parsed.hallucination_risk["c-green"] == DEFAULT_RISK == 0.5


def test_number_string_repair():
    entries = [entry("A", "6"), entry("B", " 9.5 ", "0.1"), entry("C", 2)]
    parsed = listwise(answer(entries, confidence="0.75"))
    assert parsed.ok
    assert parsed.repaired == ("number_string",)
    assert parsed.factuality["c-green"] == 9.5
    assert parsed.hallucination_risk["c-green"] == 0.1
    assert parsed.confidence == 0.75


def test_repairs_are_listed_once_each_in_order_applied():
    entries = [entry("a", "6"), {"key": "b", "factuality": 9}, entry("c", 2)]
    obj = answer(entries)
    del obj["ranking"]
    parsed = listwise(f"```json\n{json.dumps(obj)}\n```")
    assert parsed.ok
    assert parsed.repaired == (
        "code_fence",
        "key_case",
        "number_string",
        "risk_default",
        "ranking_derived",
    )


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty_response"),
        ("  \n\t", "empty_response"),
        ("I'm sorry, but I can't help with ranking these answers.", "refusal"),
        ("I cannot judge medical claims.", "refusal"),
        ('{"refusal": "I will not do this."}', "refusal"),
        ("The best answer is B, then A, then C.", "no_json"),
        ('["B", "A", "C"]', "no_json"),
        ('{"candidates": [{"key": "A", "factuality": 6', "invalid_json"),
        ('{"candidates": [{"key": "A", "factuality": 6},],}', "invalid_json"),
        ("```json\n{'candidates': []}\n```", "invalid_json"),
        ("Scores: {A: 6, B: 9}", "invalid_json"),
    ],
)
def test_failure_before_any_field(text, reason):
    parsed = listwise(text)
    assert not parsed.ok
    assert parsed.error == reason
    assert (parsed.factuality, parsed.hallucination_risk, parsed.ranking) == ({}, {}, ())


def test_absurdly_nested_json_fails_cleanly():
    text = '{"a": ' * 3000 + "1" + "}" * 3000
    assert listwise(text).error == "invalid_json"


def test_none_text_is_an_empty_response():
    assert parse_listwise(None, KEY_TO_ID, ORDER).error == "empty_response"


# ---------------------------------------------------------------- hostile answers


@pytest.mark.parametrize("shape", ["{", "{\n", '{"', '{"a": ', '{"": ['])
def test_brace_bombs_up_to_the_size_cap_fail_as_invalid_json(shape):
    bomb = shape * (MAX_ANSWER_CHARS // len(shape))
    assert listwise(bomb).error == "invalid_json"
    assert parse_pairwise(bomb, PAIR).error == "invalid_json"


@pytest.mark.parametrize("shape", ["{}", '{"a": 1} '])
def test_a_cap_full_of_small_objects_fails(shape):
    bomb = shape * (MAX_ANSWER_CHARS // len(shape))
    assert listwise(bomb).error in ("invalid_json", "missing_candidates")
    assert parse_pairwise(bomb, PAIR).error in ("invalid_json", "missing_verdict")


def test_an_answer_over_the_size_cap_is_too_large_even_when_valid():
    valid = json.dumps(answer())
    padded = valid + " " * (MAX_ANSWER_CHARS - len(valid))
    assert listwise(padded).ok
    assert listwise(padded + " ").error == "too_large"
    assert parse_pairwise("{" * (10 * MAX_ANSWER_CHARS), PAIR).error == "too_large"


def test_a_valid_object_after_a_few_broken_braces_is_still_found():
    text = "Scores {A: 6}, {B: 9} and {C: 2}; {" * 50 + json.dumps(answer())
    parsed = listwise(text)
    assert parsed.ok
    assert parsed.repaired == ("prose",)


def test_a_valid_object_after_a_bomb_is_not_searched_for():
    assert listwise('{"' * 100_000 + json.dumps(answer())).error == "invalid_json"


@pytest.mark.parametrize("digits", [400, 5000])
@pytest.mark.parametrize("sign", ["", "-"])
@pytest.mark.parametrize("prose", ["", "My judgment: "])
def test_numbers_with_hundreds_or_thousands_of_digits_are_out_of_range(digits, sign, prose):
    huge = sign + "9" * digits
    text = json.dumps(answer()).replace('"factuality": 9', f'"factuality": {huge}', 1)
    assert listwise(prose + text).error == "factuality_out_of_range:B"
    text = json.dumps(answer()).replace('"confidence": 0.8', f'"confidence": {huge}')
    assert listwise(prose + text).error == "confidence_out_of_range"
    pair = f'{prose}{{"verdict": "A", "confidence": {huge}}}'
    assert parse_pairwise(pair, PAIR).error == "confidence_out_of_range"


def test_a_huge_number_string_or_key_is_a_failure_not_a_crash():
    text = json.dumps(answer(entries=[entry("A", "9" * 5000), entry("B"), entry("C")]))
    assert listwise(text).error == "bad_factuality:A"
    assert parse_pairwise('{"verdict": ' + "7" * 5000 + "}", PAIR).error == "unknown_key:inf"


def _without(obj, field):
    del obj[field]
    return obj


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (_without(answer(), "candidates"), "missing_candidates"),
        (answer(entries=[]), "missing_candidates"),
        (answer() | {"candidates": {"A": 6}}, "missing_candidates"),
        (answer([entry("A", 6), "B: 9", entry("C", 2)]), "bad_candidate"),
        (answer([entry("A", 6), {"factuality": 9}, entry("C", 2)]), "bad_candidate"),
        (answer([entry("A", 6), entry(2, 9), entry("C", 2)]), "bad_candidate"),
        (answer([entry("A", 6), entry("E", 9), entry("C", 2)]), "unknown_key:E"),
        (
            answer([entry("A", 6), entry("Candidate B", 9), entry("C", 2)]),
            "unknown_key:Candidate B",
        ),
        (answer([entry("A", 6), entry("B", 9), entry("a", 2)]), "duplicate_key:A"),
        (answer([entry("A", 6), entry("B", 9)]), "missing_key:C"),
        (answer([entry("C", 6), entry("B", 9)]), "missing_key:A"),
        (answer([entry("A", None), entry("B", 9), entry("C", 2)]), "bad_factuality:A"),
        (answer([entry("A", "high"), entry("B", 9), entry("C", 2)]), "bad_factuality:A"),
        (answer([entry("A", True), entry("B", 9), entry("C", 2)]), "bad_factuality:A"),
        (answer([entry("A", 6), entry("B", 10.5), entry("C", 2)]), "factuality_out_of_range:B"),
        (answer([entry("A", 6), entry("B", 9), entry("C", -1)]), "factuality_out_of_range:C"),
        (answer([entry("A", 6), entry("B", 9), entry("C", 2, "low")]), "bad_risk:C"),
        (answer([entry("A", 6), entry("B", 9), entry("C", 2, 1.2)]), "risk_out_of_range:C"),
        (answer([entry("A", 6, -0.1), entry("B", 9), entry("C", 2)]), "risk_out_of_range:A"),
        (answer(ranking=("B", "A")), "bad_ranking"),
        (answer(ranking=("B", "A", "A")), "bad_ranking"),
        (answer(ranking=("B", "A", "C", "A")), "bad_ranking"),
        (answer(ranking=("B", "A", "D")), "bad_ranking"),
        (answer(ranking=()), "bad_ranking"),
        (answer() | {"ranking": "B > A > C"}, "bad_ranking"),
        (answer() | {"ranking": [["B", "A"], "C"]}, "bad_ranking"),
        (answer() | {"ranking": [2, 1, 3]}, "bad_ranking"),
        (answer(confidence="very"), "bad_confidence"),
        (answer(confidence=85), "confidence_out_of_range"),
        (answer(confidence=-0.01), "confidence_out_of_range"),
    ],
)
def test_failure_reasons(obj, reason):
    parsed = listwise(obj)
    assert not parsed.ok
    assert parsed.error == reason
    assert (parsed.factuality, parsed.hallucination_risk, parsed.ranking) == ({}, {}, ())
    assert parsed.confidence is None


@pytest.mark.parametrize(("literal", "reason"), [("NaN", "factuality"), ("Infinity", "factuality")])
def test_non_finite_numbers_are_out_of_range(literal, reason):
    text = json.dumps(answer()).replace('"factuality": 6', f'"factuality": {literal}', 1)
    assert listwise(text).error == f"{reason}_out_of_range:A"


def test_string_nan_is_not_a_number():
    assert listwise(answer([entry("A", "nan"), entry("B", 9), entry("C", 2)])).error == (
        "bad_factuality:A"
    )


def test_failure_keeps_the_repairs_made_before_it():
    obj = answer([entry("a", 6), entry("B", 99), entry("C", 2)])
    parsed = listwise(f"```json\n{json.dumps(obj)}\n```")
    assert parsed == Parsed(False, "factuality_out_of_range:B", ("code_fence", "key_case"))


def test_unknown_keys_are_shown_short():
    long_key = "Candidate " + "x" * 200 + "\n\nwith lines"
    error = listwise(answer([entry("A", 6), entry(long_key, 9), entry("C", 2)])).error
    assert error == "unknown_key:Candidate " + "x" * 30
    assert ERROR_FORM.fullmatch(error)


def test_mismatched_keys_and_order_are_a_programming_error():
    with pytest.raises(ValueError, match="does not label the order"):
        parse_listwise(json.dumps(answer()), KEY_TO_ID, ("c-red", "c-green"))


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(),
        st.builds(json.dumps, st.recursive(st.none() | st.text() | st.floats(), st.lists)),
        st.builds(lambda s: "{" + s, st.text()),
    )
)
def test_any_text_parses_to_a_result_never_an_exception(text):
    parsed = parse_listwise(text, KEY_TO_ID, ORDER)
    assert parsed.ok or ERROR_FORM.fullmatch(parsed.error)


# ---------------------------------------------------------------- pairwise


@pytest.mark.parametrize(
    ("text", "verdict", "repaired"),
    [
        ('{"verdict": "A", "confidence": 0.9, "rationale": "x"}', "c-red", ()),
        ('{"verdict": "B", "confidence": 0.6, "rationale": "x"}', "c-green", ()),
        ('{"verdict": "tie", "confidence": 0.5, "rationale": "x"}', TIE, ()),
        ('{"verdict": "TIE", "confidence": 0.5, "rationale": "x"}', TIE, ("key_case",)),
        ('{"verdict": " b ", "confidence": 0.6}', "c-green", ("key_case",)),
        ('```json\n{"verdict": "A", "confidence": 0.9}\n```', "c-red", ("code_fence",)),
        (
            'I pick {"verdict": "B", "confidence": "0.7"} here',
            "c-green",
            ("prose", "number_string"),
        ),
    ],
)
def test_pairwise_verdicts(text, verdict, repaired):
    parsed = parse_pairwise(text, PAIR)
    assert parsed.ok
    assert parsed.verdict == verdict
    assert parsed.repaired == repaired


def test_pairwise_without_confidence():
    assert parse_pairwise('{"verdict": "A"}', PAIR) == PairParsed(True, None, (), "c-red", None)


def test_pairwise_neutral_keys():
    keys = neutral_keys(2, 5, "pair-1")
    key_to_id = dict(zip(keys, ("c-red", "c-green"), strict=True))
    text = json.dumps({"verdict": keys[1].lower(), "confidence": 0.8, "rationale": "x"})
    parsed = parse_pairwise(text, key_to_id)
    assert (parsed.ok, parsed.verdict, parsed.repaired) == (True, "c-green", ("key_case",))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty_response"),
        ("Sorry, I can't compare these.", "refusal"),
        ('{"refusal": "no"}', "refusal"),
        ("A is better.", "no_json"),
        ('{"verdict": "A", "confidence": 0.9', "invalid_json"),
        ('{"confidence": 0.9}', "missing_verdict"),
        ('{"verdict": null}', "missing_verdict"),
        ('{"verdict": "C"}', "unknown_key:C"),
        ('{"verdict": "A or B"}', "unknown_key:A or B"),
        ('{"verdict": 1}', "unknown_key:1"),
        ('{"verdict": "A", "confidence": 1.5}', "confidence_out_of_range"),
        ('{"verdict": "A", "confidence": "sure"}', "bad_confidence"),
    ],
)
def test_pairwise_failures(text, reason):
    parsed = parse_pairwise(text, PAIR)
    assert not parsed.ok
    assert parsed.error == reason
    assert parsed.verdict is None
    assert parsed.confidence is None


def test_pairwise_round_trip_through_both_orders():
    item = Item("p", "Capital of France?", (Candidate("x", "Paris"), Candidate("y", "Lyon")))
    for order in (("x", "y"), ("y", "x")):
        rendered = render_pairwise(item, order)
        winner_key = next(k for k, cid in rendered.key_to_id.items() if cid == "x")
        text = json.dumps({"verdict": winner_key, "confidence": 1, "rationale": "r"})
        assert parse_pairwise(text, rendered.key_to_id).verdict == "x"


# ---------------------------------------------------------------- property: keys map back


ID_ALPHABET = string.ascii_letters + string.digits + "_-:."
CANDIDATE_IDS = st.lists(
    st.text(ID_ALPHABET, min_size=1, max_size=8), min_size=2, max_size=6, unique=True
)
SCORE = st.floats(0, 10, allow_nan=False)
RISK = st.floats(0, 1, allow_nan=False)
MANGLINGS = {
    "exact": lambda key: key,
    "lower": str.lower,
    "upper": str.upper,
    "padded": lambda key: f"  {key}\t",
}


def orderings(ids: list[str], seed: int, item_id: str, k: int) -> list[tuple[str, ...]]:
    """Every ordering of every schedule kind for one item."""
    n = len(ids)
    orders = schedule("balanced", ids, k, dataset_seed=seed, item_id=item_id)
    orders += schedule("random", ids, min(k, math.factorial(n)), dataset_seed=seed, item_id=item_id)
    orders += schedule("repeated", ids, 2, dataset_seed=seed, item_id=item_id)
    orders += schedule("exhaustive", ids, 1, dataset_seed=seed, item_id=item_id)
    return orders


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    ids=CANDIDATE_IDS,
    seed=st.integers(0, 2**31),
    k=st.integers(1, 14),
    neutral=st.booleans(),
    mangling=st.sampled_from(sorted(MANGLINGS)),
)
def test_keys_map_back_for_every_ordering(data, ids, seed, k, neutral, mangling):
    n = len(ids)
    item_id = f"item-{seed}"
    item = Item(
        item_id, "Which is right?", tuple(Candidate(cid, f"answer of {cid}") for cid in ids)
    )
    scores = data.draw(st.lists(SCORE, min_size=n, max_size=n), label="factuality per slot")
    risks = data.draw(st.lists(RISK, min_size=n, max_size=n), label="risk per slot")
    ranked_slots = data.draw(st.permutations(range(n)), label="ranking as slots")
    listed_slots = data.draw(st.permutations(range(n)), label="order of candidate entries")
    confidence = data.draw(RISK, label="confidence")
    extra = data.draw(st.lists(st.permutations(ids), max_size=5), label="random orderings")
    keys = neutral_keys(n, seed, item_id) if neutral else None
    mangle = MANGLINGS[mangling]

    for order in [*orderings(ids, seed, item_id, k), *map(tuple, extra)]:
        rendered = render_listwise(item, order, keys)
        shown = FENCED_CANDIDATE.findall(rendered.user)
        assert [key for key, _ in shown] == list(rendered.keys)
        assert [text for _, text in shown] == [f"answer of {cid}" for cid in order]
        slot_key = rendered.keys
        reply = {
            "candidates": [
                {
                    "key": mangle(slot_key[slot]),
                    "factuality": scores[slot],
                    "hallucination_risk": risks[slot],
                    "rationale": "r",
                }
                for slot in listed_slots
            ],
            "ranking": [mangle(slot_key[slot]) for slot in ranked_slots],
            "confidence": confidence,
        }
        parsed = parse_listwise(json.dumps(reply), rendered.key_to_id, order)

        assert parsed.ok, parsed.error
        assert parsed.factuality == {order[slot]: scores[slot] for slot in range(n)}
        assert parsed.hallucination_risk == {order[slot]: risks[slot] for slot in range(n)}
        assert parsed.ranking == tuple(order[slot] for slot in ranked_slots)
        assert parsed.confidence == confidence
        changed = any(mangle(key) != key for key in slot_key)
        assert parsed.repaired == (("key_case",) if changed else ())


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ids=CANDIDATE_IDS, seed=st.integers(0, 2**31), neutral=st.booleans())
def test_derived_ranking_maps_back_for_every_ordering(data, ids, seed, neutral):
    n = len(ids)
    item_id = f"item-{seed}"
    item = Item(item_id, "Q?", tuple(Candidate(cid, cid) for cid in ids))
    scores = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="per slot")
    for order in schedule("balanced", ids, 2 * n, dataset_seed=seed, item_id=item_id):
        rendered = render_listwise(item, order, neutral_keys(n, seed) if neutral else None)
        reply = {
            "candidates": [
                {"key": key, "factuality": scores[slot], "hallucination_risk": 0.1}
                for slot, key in enumerate(rendered.keys)
            ]
        }
        parsed = parse_listwise(json.dumps(reply), rendered.key_to_id, order)
        expected = sorted(range(n), key=lambda slot: (-scores[slot], slot))
        assert parsed.ranking == tuple(order[slot] for slot in expected)
        assert parsed.repaired == ("ranking_derived",)
