"""The run engine through the real OpenAI and Anthropic SDKs against the local wire server.

Every planned call gets a scripted behaviour (rate limit, server error, timeout, malformed body,
truncated answer, wrong keys, refusal, bad request, or a plain answer), keyed on its prompt.
The run must finish with one row per call, every failure kept with its reason, and counts
that add up to what the server actually received.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections import Counter, defaultdict

import pytest
from sqlmodel import col, select

from pcf.access import operator
from pcf.judges import BASE_URL_ENV, judge_server
from pcf.judges.anthropic_judge import AnthropicJudge
from pcf.judges.openai_judge import OpenAIJudge
from pcf.runs.call_plan import content_key, plan
from pcf.runs.manage import judge_run
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import Call, call_request, import_items, item_db_ids
from tests.factories import make_item, template_hostile_items
from tests.judge_providers import PROVIDERS, run_at_server, use_environment
from tests.wire_server import Scripted, WireRequest, WireServer, message_key

CANDIDATE_KEY = re.compile(r'<candidate key="([^"]+)">')
TOKENS_IN, TOKENS_OUT = 100, 10
RETRY_AFTER_S = 0.2
TIMEOUT_S = 1.0  # generous: a busy machine must not time out a plain answer
CONFIG = RunSpec(
    "ds", protocol="pcf", k=4, concurrency=4, max_attempts=3, backoff_s=0.01, parse_retries=1
)


def listwise_text(user_text: str, *, keys: list[str] | None = None) -> str:
    """A valid listwise answer for the keys the prompt shows: slot order is the ranking.

    ``keys`` overrides the keys written in the answer (to script unknown keys).
    """
    shown = CANDIDATE_KEY.findall(user_text)
    written = keys or shown
    candidates = [
        {"key": key, "factuality": 9 - slot, "hallucination_risk": 0.1, "rationale": "ok"}
        for slot, key in enumerate(written)
    ]
    return json.dumps({"candidates": candidates, "ranking": written, "confidence": 0.8})


def _with_tokens(action: Scripted) -> Scripted:
    return dataclasses.replace(action, input_tokens=TOKENS_IN, output_tokens=TOKENS_OUT)


def answers(request: WireRequest) -> Scripted:
    """A listwise answer to the request's own prompt, with token counts."""
    return ACTIONS["ok"](request.last_user_text)


ACTIONS = {
    "ok": lambda text: _with_tokens(Scripted.answer(listwise_text(text))),
    "rate_limited": lambda _: Scripted.error(
        429, "Rate limit reached", retry_after=str(RETRY_AFTER_S)
    ),
    "server_error": lambda _: Scripted.error(500, "The server had an error"),
    "slow": lambda text: Scripted.answer(listwise_text(text), delay_s=TIMEOUT_S * 3),
    "broken": lambda _: Scripted.broken(),
    "truncated": lambda text: _with_tokens(Scripted.truncated(listwise_text(text)[:120])),
    "wrong_keys": lambda text: _with_tokens(
        Scripted.answer(listwise_text(text, keys=list("WXYZ")))
    ),
    "refusal": lambda _: _with_tokens(Scripted.refusal("I can't help with judging these.")),
    "bad_request": lambda _: Scripted.error(400, "Invalid schema for response_format"),
}
"""What the server does for one attempt of a call, from the call's prompt text."""


# Per planned call (by index): the attempts' behaviours (the last one repeats), then what the
# row must say: ok, the error's reason, attempts, and attempts that got an answer with usage.
SCRIPTS: dict[int, tuple[list[str], bool, str | None, int, int]] = {
    0: (["rate_limited", "ok"], True, None, 2, 1),
    1: (["server_error", "ok"], True, None, 2, 1),
    2: (["slow", "ok"], True, None, 2, 1),
    3: (["broken", "ok"], True, None, 2, 1),
    4: (["broken"], False, "bad_response", 3, 0),
    5: (["truncated"], False, "invalid_json", 2, 2),
    6: (["wrong_keys"], False, "unknown_key", 2, 2),
    7: (["wrong_keys", "ok"], True, None, 2, 2),
    8: (["refusal"], False, "refusal", 1, 1),  # an answer, not a parse failure: not asked again
    9: (["bad_request"], False, "client_error", 1, 0),
}
PLAIN = (["ok"], True, None, 1, 1)


class Script:
    """The responder: each call's attempts follow its script; arrival times are kept."""

    def __init__(self, steps: dict[str, list[str]]) -> None:
        self.steps = steps
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def __call__(self, request: WireRequest) -> Scripted:
        with self.lock:
            arrivals = self.arrivals[request.key]
            arrivals.append(time.monotonic())
            attempt = len(arrivals) - 1
        steps = self.steps[request.key]
        return ACTIONS[steps[min(attempt, len(steps) - 1)]](request.last_user_text)


def _judge(backend: str, server: WireServer) -> OpenAIJudge | AnthropicJudge:
    if backend == "openai":
        return OpenAIJudge(
            "gpt-test", base_url=server.openai_base_url, api_key="test-key", timeout=TIMEOUT_S
        )
    return AnthropicJudge(
        "claude-test", base_url=server.base_url, api_key="test-key", timeout=TIMEOUT_S
    )


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_run_survives_every_provider_failure_and_counts_add_up(backend: str, session):
    """4 items x K=4 at concurrency 4 through the real SDK; every failure mode once."""
    items = [make_item(f"q{i}") for i in range(4)]
    dataset = import_items(items, session=session, name="ds", fmt="jsonl")
    db_ids = item_db_ids(dataset.id, session=session)
    planned = plan(items, db_ids, CONFIG)
    assert len(planned) == 16
    keys = [message_key(p.render().user) for p in planned]
    assert len(set(keys)) == 16
    script = Script({key: SCRIPTS.get(i, PLAIN)[0] for i, key in enumerate(keys)})
    served = run_at_server(
        backend,
        script,
        _judge,
        name="r",
        items=items,
        spec=CONFIG,
        session=session,
        dataset_id=dataset.id,
        prices={},
    )
    run, report = served.run, served.report
    rows = session.exec(select(Call).where(Call.run_id == run.id).order_by(col(Call.id))).all()
    backends = {call_request(c, session=session)["backend"] for c in rows}
    session.refresh(run)

    assert run.status == "finished"
    by_call = {(c.item_id, c.execution, c.call_index): c for c in rows}
    assert len(rows) == len(by_call) == 16
    assert set(by_call) == {(p.item_db_id, p.execution, p.call_index) for p in planned}
    for index, (call, key) in enumerate(zip(planned, keys, strict=True)):
        _, ok, reason, attempts, answered = SCRIPTS.get(index, PLAIN)
        row = by_call[(call.item_db_id, call.execution, call.call_index)]
        assert (row.ok, row.attempts) == (ok, attempts), (index, row.error)
        assert served.per_key[key] == attempts
        assert row.cached_from is None
        assert (row.input_tokens, row.output_tokens) == (
            TOKENS_IN * answered,
            TOKENS_OUT * answered,
        ), index
        if ok:
            assert row.error is None
            assert row.judgment["ranking"] == row.order  # keys mapped back to candidate ids
        else:
            assert row.error.split(":")[0] == reason
            assert row.judgment is None
    errors = {
        index: by_call[(p.item_db_id, 0, p.call_index)].error for index, p in enumerate(planned)
    }
    assert errors[6].startswith("unknown_key:W")
    assert errors[9].startswith("client_error: HTTP 400: Invalid schema")
    assert errors[4] == "bad_response: invalid response body"

    rate_limited = script.arrivals[keys[0]]
    assert rate_limited[1] - rate_limited[0] >= RETRY_AFTER_S

    attempts = sum(c.attempts for c in rows)
    assert run.calls_made == report.calls_made == attempts == served.requests
    assert served.requests == sum(served.per_key.values())
    failed = [c for c in rows if not c.ok]
    assert run.failures == report.failures == len(failed) == 5
    assert report.errors == Counter(
        {"bad_response": 1, "invalid_json": 1, "unknown_key": 1, "refusal": 1, "client_error": 1}
    )
    assert run.input_tokens == report.input_tokens == sum(c.input_tokens for c in rows)
    assert run.output_tokens == report.output_tokens == sum(c.output_tokens for c in rows)
    assert run.cache_hits == report.cache_hits == 0
    assert backends == {backend}


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.backend)
def test_two_servers_under_one_model_name_answer_for_themselves(provider, monkeypatch, session):
    """A run against a second server under the same model name makes its calls there (a
    server that fails every call: no cache hit, each failure recorded); the first server
    again, its address written otherwise, or given by the SDK's variable instead of
    ``--base-url``, is answered from the cache."""
    use_environment(monkeypatch, provider)
    items = [make_item(f"q{i}") for i in range(3)]
    import_items(items, session=session, name="ds", fmt="jsonl")
    session.commit()
    planned = 3 * 3

    def refuses(_request: WireRequest) -> Scripted:
        return Scripted.error(400, "this server refuses every call")

    def judged(name: str, base_url: str | None) -> RunReport:
        spec = dataclasses.replace(
            CONFIG, name=name, backend=provider.backend, model=provider.model, base_url=base_url
        )
        return judge_run(dataclasses.replace(spec, k=3), session=session, actor=operator())[1]

    with WireServer(answers) as first, WireServer(refuses) as second:
        by_first = judged("first", provider.base_url(first))
        by_second = judged("second", provider.base_url(second))
        sent_to_second = second.request_count
        rewritten = provider.base_url(first).replace("http://", "HTTP://") + "/"
        again = judged("first-again", rewritten)
        monkeypatch.setenv(BASE_URL_ENV[provider.backend], provider.base_url(first))
        by_variable = judged("first-by-variable", None)
        sent_to_first = first.request_count

    assert (by_first.calls_made, by_first.cache_hits, by_first.failures) == (planned, 0, 0)
    assert (by_second.calls_made, by_second.cache_hits, by_second.failures) == (planned, 0, planned)
    assert by_second.errors == Counter({"client_error": planned})
    assert sent_to_second == planned
    assert (again.cache_hits, again.calls_made) == (planned, 0)
    assert (by_variable.cache_hits, by_variable.calls_made) == (planned, 0)
    assert sent_to_first == planned
    stored = session.exec(select(Call).where(~col(Call.ok))).all()
    server = judge_server(provider.backend, provider.base_url(second))
    refusal = f"client_error: HTTP 400: this server refuses every call (from {server})"
    assert {c.error for c in stored} == {refusal}


def test_a_run_stored_before_servers_were_in_the_key_resumes_without_paying_again(
    monkeypatch, session
):
    """Calls stored with the key of before (no server in it) are the run's calls: resumed with
    one more item, the run makes that item's calls only; its old keys stay as stored."""
    use_environment(monkeypatch, PROVIDERS[0])
    items = [make_item(f"q{i}") for i in range(3)]
    dataset = import_items(items, session=session, name="ds", fmt="jsonl")
    session.commit()

    with WireServer(answers) as server:
        spec = dataclasses.replace(
            CONFIG, name="old", backend="openai", base_url=server.openai_base_url, k=3
        )
        judge_run(dataclasses.replace(spec, limit=2), session=session, actor=operator())
        slots = {
            (p.item_db_id, p.execution, p.call_index): p
            for p in plan(items, item_db_ids(dataset.id, session=session), spec)
        }
        old_keys = {}
        for call in session.exec(select(Call)).all():  # as the previous release stored them
            planned = slots[call.item_id, call.execution, call.call_index]
            call.content_key = old_keys[call.id] = content_key(
                "openai", spec.model, planned.render(), spec, planned.repeat_index, server=False
            )
            session.add(call)
        session.commit()
        _, resumed = judge_run(spec, session=session, actor=operator())
        sent = server.request_count
    assert (resumed.already_done, resumed.calls_made, resumed.cache_hits) == (6, 3, 0)
    assert sent == 9
    session.expire_all()
    calls = session.exec(select(Call)).all()
    assert len(calls) == 9
    assert all(c.ok for c in calls)
    assert {c.id: c.content_key for c in calls if c.id in old_keys} == old_keys


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.backend)
def test_each_stored_request_is_the_one_the_server_received(provider, monkeypatch, session):
    """Rebuilt from its template and its item's texts (what the Review page's audit shows),
    each call's system and user messages are those the provider's server received, byte for
    byte, also for texts the prompt escaped or that hide in the prompt's own wording; the
    calls of plain items share one template whatever their ordering."""
    use_environment(monkeypatch, provider)
    plain = [make_item(f"q{i}") for i in range(3)]
    items = plain + template_hostile_items()
    dataset = import_items(items, session=session, name="ds", fmt="jsonl")
    session.commit()

    with WireServer(answers) as server:
        spec = dataclasses.replace(
            CONFIG,
            name="served",
            backend=provider.backend,
            model=provider.model,
            base_url=provider.base_url(server),
        )
        _, report = judge_run(spec, session=session, actor=operator())
        received = server.received

    calls = session.exec(select(Call)).all()
    assert report.failures == 0
    assert len(calls) == len(received) == len(items) * CONFIG.k
    requests = [call_request(call, session=session) for call in calls]
    shown = sorted((request["system"], request["user"]) for request in requests)
    assert shown == sorted((r.system_text, r.last_user_text) for r in received)
    assert all(call.sent(request) for call, request in zip(calls, requests, strict=True))
    db_ids = item_db_ids(dataset.id, session=session)
    plain_ids = {db_ids[item.item_id] for item in plain}
    assert len({call.template_id for call in calls if call.item_id in plain_ids}) == 1
