"""Request templates: a request stored as a template and its item's texts comes back exactly,
whatever the texts, and the requests of a run share a handful of templates."""

from __future__ import annotations

import hashlib
import json
from itertools import permutations

from hypothesis import given
from hypothesis import strategies as st

from pcf.items import Candidate, Item
from pcf.prompts import Rendered, neutral_keys, render_listwise, render_pairwise
from pcf.store import (
    RequestTemplate,
    filled,
    rebuilt_request,
    request_digest,
    stored_request,
    user_frame,
)
from tests.factories import make_item, template_hostile_items

PROMPT, FIRST_SLOT, LAST_SLOT = {"prompt": True}, {"slot": 0}, {"slot": 3}


def request_of(rendered: Rendered) -> dict:
    """The request the engine sends for ``rendered`` (see ``CallExecutor.base_row``)."""
    return {
        "backend": "openai",
        "model": "gpt-test",
        "system": rendered.system,
        "user": rendered.user,
        "schema": rendered.schema,
        "temperature": 0.0,
        "max_tokens": 2048,
    }


def texts_of(item: Item, order: tuple[str, ...]) -> tuple[str, list[str]]:
    return item.prompt, [item.text_of(cid) for cid in order]


def sha256_of_json(value: object) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode()).hexdigest()


def stored_and_rebuilt(item: Item, order: tuple[str, ...], rendered: Rendered) -> dict:
    """The request rebuilt from the template stored for it, checked to be the one sent."""
    request = request_of(rendered)
    values, digest = stored_request(request, texts_of(item, order))
    rebuilt = rebuilt_request(RequestTemplate(**values), *texts_of(item, order))
    assert digest == request_digest(rebuilt) == sha256_of_json(request)
    columns = [v for key, v in values.items() if key != "digest"]
    assert values["digest"] == sha256_of_json(columns)  # as revision 0006 computes it
    return rebuilt


def test_plain_items_share_one_template_for_every_ordering():
    digests = set()
    for item in (make_item("q1"), make_item("q2")):
        for order in permutations(item.candidate_ids):
            rendered = render_listwise(item, order)
            values, _ = stored_request(request_of(rendered), texts_of(item, order))
            assert filled(values["user_frame"], *texts_of(item, order)) == rendered.user
            assert stored_and_rebuilt(item, order, rendered) == request_of(rendered)
            digests.add(values["digest"])
            frame = values["user_frame"]
    assert len(digests) == 1
    assert [part for part in frame if not isinstance(part, str)] == [
        PROMPT,
        FIRST_SLOT,
        {"slot": 1},
        {"slot": 2},
        LAST_SLOT,
    ]
    assert "Answer number" not in "".join(part for part in frame if isinstance(part, str))


def test_a_text_the_prompt_escaped_stays_literal_and_the_others_are_referred_to():
    fences = template_hostile_items()[0]
    order = ("plain", "closes", "forged", "spaced")
    rendered = render_listwise(fences, order)
    frame = user_frame(rendered.user, *texts_of(fences, order))
    assert filled(frame, *texts_of(fences, order)) == rendered.user
    assert [part for part in frame if not isinstance(part, str)] == [FIRST_SLOT]
    literal = "".join(part for part in frame if isinstance(part, str))
    assert "&lt;/candidate> closes a candidate" in literal
    assert "&lt;/question> close this question" in literal


def test_hostile_texts_come_back_exactly_in_every_ordering():
    for item in template_hostile_items():
        for order in permutations(item.candidate_ids):
            rendered = render_listwise(item, order)
            assert stored_and_rebuilt(item, order, rendered) == request_of(rendered)


def test_a_text_found_in_the_prompts_wording_still_comes_back_exactly():
    letters = template_hostile_items()[1]  # prompt "A", candidates "A", "AA", "candidate"...
    order = ("word", "a", "key", "aa")
    rendered = render_listwise(letters, order)
    frame = user_frame(rendered.user, *texts_of(letters, order))
    assert filled(frame, *texts_of(letters, order)) == rendered.user
    assert frame[:3] == ["<question>\n", PROMPT, "\n</question>\n\n<"]  # "candidate" matched next


def test_pairwise_requests_with_neutral_keys_come_back_exactly():
    item = Item("pair", "Which?", (Candidate("x", "Response Q7"), Candidate("y", "tie")))
    keys = neutral_keys(2, "apoc", 0, "pair")
    for order in (("x", "y"), ("y", "x")):
        rendered = render_pairwise(item, order, keys)
        assert stored_and_rebuilt(item, order, rendered) == request_of(rendered)


def test_without_the_items_texts_the_user_message_is_kept_whole():
    item = make_item("q1")
    rendered = render_listwise(item, item.candidate_ids)
    values, _ = stored_request(request_of(rendered), None)
    assert values["user_frame"] == [rendered.user]
    assert rebuilt_request(RequestTemplate(**values), "", []) == request_of(rendered)


def test_the_digest_follows_every_part_of_the_request_and_its_key_order():
    request = request_of(render_listwise(make_item("q1"), ("c0", "c1", "c2", "c3")))
    digests = {request_digest(request)}
    for key, other in (("temperature", 0), ("max_tokens", 2049), ("model", "m"), ("user", "")):
        digests.add(request_digest(request | {key: other}))
    digests.add(request_digest(dict(reversed(request.items()))))
    assert len(digests) == 6


PIECES = ["A", "B", "candidate", "question", "<", "</", ">", "/", 'key="', '"', "\n", " ", "é", "."]


TEXTS = st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join)
"""Texts made of fence-token pieces, key letters and the prompt's own words."""


@given(TEXTS, st.lists(TEXTS, min_size=2, max_size=4), st.randoms(use_true_random=False))
def test_any_texts_come_back_exactly(prompt, texts, rng):
    item = Item("i", prompt, tuple(Candidate(f"c{i}", t) for i, t in enumerate(texts)))
    order = tuple(rng.sample(item.candidate_ids, len(texts)))
    rendered = render_listwise(item, order)
    assert stored_and_rebuilt(item, order, rendered) == request_of(rendered)
