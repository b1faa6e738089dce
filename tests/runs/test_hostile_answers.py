"""Hostile answers through the real OpenAI and Anthropic SDKs against the local wire server.

Each planned call gets one hostile behaviour: brace bombs over and under the size cap, numbers
of 400 and 5,000 digits, absurd and negative token counts, NUL bytes, the API key echoed back,
nesting no decoder follows. The run must finish with every call recorded (ok, or failed with
its reason), costs >= 0, totals that add up, and neither the key nor a NUL byte anywhere in the
database (every column of every table is read back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import Session, SQLModel, col

from pcf.judges.anthropic_judge import AnthropicJudge
from pcf.judges.base import MAX_CALL_TOKENS
from pcf.judges.openai_judge import OpenAIJudge
from pcf.parsing import MAX_ANSWER_CHARS
from pcf.runs.call_plan import plan
from pcf.runs.rows import NUL_REPAIR
from pcf.runs.spec import RunSpec
from pcf.store import Call, import_items, item_db_ids
from tests.factories import make_item
from tests.judge_providers import run_at_server
from tests.wire_server import JsonLiteral, Scripted, WireRequest, WireServer, message_key

SECRET = "sk-proj-HostileTestKey0123456789abcdef"
OTHER_ACCOUNTS_KEY = "sk-ant-api03-" + "LeakedElsewhere9" * 3
PRICES = {"m": (2.5, 10.0)}
CANDIDATE_KEY = re.compile(r'<candidate key="([^"]+)">')
SPEC = RunSpec("ds", protocol="pcf", k=4, concurrency=4, max_attempts=2, backoff_s=0.01)


def answer(user_text: str, *, first_factuality: str = "9", rationale: str = "ok") -> str:
    """A valid listwise answer (as JSON text) for the keys the prompt shows."""
    keys = CANDIDATE_KEY.findall(user_text)
    entries = [
        f'{{"key": {json.dumps(key)}, "factuality": {first_factuality if slot == 0 else 5}, '
        f'"hallucination_risk": 0.2, "rationale": {json.dumps(rationale)}}}'
        for slot, key in enumerate(keys)
    ]
    return f'{{"candidates": [{", ".join(entries)}], "confidence": 0.7}}'


def ok_with_tokens(count: int | JsonLiteral) -> Callable[[str], Scripted]:
    return lambda text: Scripted.answer(answer(text), input_tokens=count, output_tokens=count)


# Per planned call: what the server answers, then ok and the error's reason (None when ok).
HOSTILE: list[tuple[str, Callable[[str], Scripted], bool, str | None]] = [
    ("brace bomb over the cap", lambda _: Scripted.answer("{" * 2 * MAX_ANSWER_CHARS), False,
     "too_large"),
    ("brace-newline bomb", lambda _: Scripted.answer("{\n" * 400_000), False, "invalid_json"),
    ("400-digit factuality", lambda t: Scripted.answer(answer(t, first_factuality="9" * 400)),
     False, "factuality_out_of_range"),
    ("5000-digit factuality", lambda t: Scripted.answer(answer(t, first_factuality="9" * 5000)),
     False, "factuality_out_of_range"),
    ("10^20 tokens", ok_with_tokens(10**20), True, None),
    ("2^62 tokens", ok_with_tokens(2**62), True, None),
    ("negative tokens", ok_with_tokens(-(10**9)), True, None),
    ("NaN tokens", ok_with_tokens(JsonLiteral("NaN")), True, None),
    ("NUL bytes", lambda t: Scripted.answer(answer(t, rationale="a\x00b") + "\x00"), True, None),
    ("key echoed", lambda t: Scripted.answer(answer(t, rationale=f"key {SECRET}")), True, None),
    ("key echoed in prose", lambda _: Scripted.answer(f"My key is {SECRET}. {{broken"), False,
     "invalid_json"),
    ("another account's key", lambda t: Scripted.answer(answer(t, rationale=OTHER_ACCOUNTS_KEY)),
     True, None),
    ("deeply nested answer", lambda _: Scripted.answer('{"a": ' * 150_000), False,
     "invalid_json"),
    ("deeply nested body", lambda t: Scripted.answer(
        answer(t), input_tokens=JsonLiteral("[" * 200_000 + "]" * 200_000)), False,
     "bad_response"),
    ("5000-digit usage", lambda t: Scripted.answer(
        answer(t), input_tokens=JsonLiteral("7" * 5000)), False, "bad_response"),
    ("key echoed in an error", lambda _: Scripted.error(400, f"Bad key {SECRET}\x00"), False,
     "client_error"),
]  # fmt: skip


def strings(value: Any) -> Iterator[str]:
    """Every string inside a stored value (JSON columns hold dicts and lists)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from strings(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from strings(inner)


def everything_stored(session: Session) -> list[str]:
    """Every string in every column of every table."""
    found: list[str] = []
    for table in SQLModel.metadata.sorted_tables:
        for row in session.execute(select(table)).all():
            found.extend(strings(tuple(row)))
    return found


def new_judge(backend: str, server: WireServer) -> OpenAIJudge | AnthropicJudge:
    """The backend's judge, its key from the environment as ``pcf judge`` takes it."""
    if backend == "openai":
        return OpenAIJudge("m", base_url=server.openai_base_url, timeout=30)
    return AnthropicJudge("m", base_url=server.base_url, timeout=30)


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_run_of_hostile_answers_finishes_and_records_every_call(
    backend: str, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    items = [make_item(f"q{i}") for i in range(4)]
    dataset = import_items(items, session=session, name="ds", fmt="jsonl")
    db_ids = item_db_ids(dataset.id, session=session)
    planned = plan(items, db_ids, SPEC)
    keys = [message_key(p.render().user) for p in planned]
    assert len(set(keys)) == len(planned) == len(HOSTILE)
    behaviour = dict(zip(keys, HOSTILE, strict=True))

    def respond(request: WireRequest) -> Scripted:
        return behaviour[request.key][1](request.last_user_text)

    served = run_at_server(
        backend,
        respond,
        new_judge,
        name="hostile",
        items=items,
        spec=SPEC,
        session=session,
        dataset_id=dataset.id,
        prices=PRICES,
    )
    run, report = served.run, served.report
    rows = session.exec(select(Call).where(col(Call.run_id) == run.id)).scalars().all()
    session.refresh(run)
    stored = everything_stored(session)

    assert run.status == "finished"
    by_slot = {(c.item_id, c.call_index): c for c in rows}
    assert len(rows) == len(by_slot) == len(planned)
    named = {}
    for call, key in zip(planned, keys, strict=True):
        name, _, ok, reason = behaviour[key]
        row = named[name] = by_slot[(call.item_db_id, call.call_index)]
        assert row.ok == ok, (name, row.error)
        assert (row.error or "").split(":")[0] == (reason or ""), name
        assert row.cost_usd >= 0, name
        assert 0 <= row.input_tokens <= SPEC.max_attempts * MAX_CALL_TOKENS, name
        if ok:
            assert len(row.judgment["ranking"]) == 4, name
    assert named["10^20 tokens"].input_tokens == MAX_CALL_TOKENS
    assert named["negative tokens"].input_tokens == named["NaN tokens"].input_tokens == 0
    assert NUL_REPAIR in named["NUL bytes"].repaired
    assert named["NUL bytes"].response_text.endswith("}\ufffd")
    assert "[redacted]" in named["key echoed"].response_text
    assert "[redacted]" in named["another account's key"].response_text
    assert "[redacted]" in named["key echoed in an error"].error
    assert run.cost_usd >= 0
    assert run.input_tokens == report.input_tokens == sum(c.input_tokens for c in rows)
    assert run.output_tokens == report.output_tokens == sum(c.output_tokens for c in rows)
    assert run.failures == report.failures == sum(not c.ok for c in rows)
    assert not [s for s in stored if SECRET in s or OTHER_ACCOUNTS_KEY in s]
    assert not [s for s in stored if "\x00" in s]
