"""OpenAIJudge with the real ``openai`` SDK against the local wire server."""

from __future__ import annotations

import asyncio
import email.utils
import gc
import json
import logging
import socket
import time
import traceback
import warnings

import pytest

from pcf.judges._provider import PLACEHOLDER_KEY, retry_after_seconds
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest
from pcf.judges.openai_judge import OpenAIJudge
from pcf.wire_server import Responder, Scripted, WireServer, fixed_json, message_key

SECRET = "sk-test-SECRET"
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
REQUEST = JudgeRequest(
    system="You judge facts.",
    user="Is water wet?",
    schema=SCHEMA,
    schema_name="verdict",
    temperature=0.0,
    max_tokens=256,
)


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for name in ("OPENAI_BASE_URL", "OPENAI_CUSTOM_HEADERS", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


async def _call(judge: OpenAIJudge, request: JudgeRequest) -> JudgeReply:
    try:
        return await judge.complete(request)
    finally:
        await judge.aclose()


def _complete(
    server: WireServer, request: JudgeRequest = REQUEST, *, timeout: float = 5.0
) -> JudgeReply:
    judge = OpenAIJudge("gpt-test", base_url=server.openai_base_url, timeout=timeout)
    return asyncio.run(_call(judge, request))


def _failure(responder: Responder, *, timeout: float = 5.0) -> tuple[JudgeError, WireServer]:
    with WireServer(responder) as server, pytest.raises(JudgeError) as info:
        _complete(server, timeout=timeout)
    assert SECRET not in "".join(traceback.format_exception(info.value))
    return info.value, server


def test_success_maps_text_usage_latency_and_sends_the_schema() -> None:
    with WireServer(
        lambda _r: Scripted.answer('{"ok": true}', input_tokens=42, output_tokens=7)
    ) as server:
        reply = _complete(server)
    assert reply.text == '{"ok": true}'
    assert (reply.input_tokens, reply.output_tokens) == (42, 7)
    assert reply.latency_s > 0
    assert reply.refusal is None
    assert reply.raw["choices"][0]["finish_reason"] == "stop"
    assert SECRET not in json.dumps(reply.raw)
    [received] = server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    body = received.body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "You judge facts."},
        {"role": "user", "content": "Is water wet?"},
    ]
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 256
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
    }


def test_no_schema_means_no_response_format() -> None:
    with WireServer() as server:
        _complete(server, JudgeRequest(system="s", user="u"))
    assert "response_format" not in server.received[0].body


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("3", 3.0), ("0.5", 0.5), (None, None)],
)
def test_429_is_rate_limited_with_retry_after(
    retry_after: str | None, expected: float | None
) -> None:
    error, server = _failure(
        lambda _r: Scripted.error(429, "Rate limit reached", retry_after=retry_after)
    )
    assert error.reason == "rate_limited"
    assert error.retryable
    assert error.retry_after == expected
    assert server.request_count == 1  # the SDK did not retry on its own


def test_retry_after_as_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    error, _ = _failure(lambda _r: Scripted.error(429, retry_after=when))
    assert error.retry_after is not None
    assert 25 < error.retry_after <= 31


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_is_a_retryable_server_error(status: int) -> None:
    error, server = _failure(lambda _r: Scripted.error(status, "The server had an error"))
    assert error.reason == "server_error"
    assert error.retryable
    assert server.request_count == 1


def test_slow_answer_times_out() -> None:
    start = time.perf_counter()
    error, _ = _failure(lambda _r: Scripted.answer("late", delay_s=3.0), timeout=0.3)
    assert time.perf_counter() - start < 2.0
    assert error.reason == "timeout"
    assert error.retryable


def test_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = OpenAIJudge("gpt-test", base_url=f"http://127.0.0.1:{port}/v1", timeout=2.0)
    with pytest.raises(JudgeError) as info:
        asyncio.run(_call(judge, REQUEST))
    assert info.value.reason == "connection_error"
    assert info.value.retryable
    assert SECRET not in str(info.value)


def test_malformed_json_body_is_a_bad_response() -> None:
    error, _ = _failure(lambda _r: Scripted.broken())
    assert error.reason == "bad_response"
    assert error.retryable


def test_json_that_is_not_a_completion_is_a_bad_response() -> None:
    error, _ = _failure(lambda _r: Scripted.broken('{"choices": []}'))
    assert error.reason == "bad_response"


def test_truncated_answer_is_still_a_reply() -> None:
    with WireServer(lambda _r: Scripted.truncated('{"ok": tr')) as server:
        reply = _complete(server)
    assert reply.text == '{"ok": tr'
    assert reply.raw["choices"][0]["finish_reason"] == "length"


def test_refusal_sets_the_refusal_field() -> None:
    with WireServer(lambda _r: Scripted.refusal("I can't judge this.")) as server:
        reply = _complete(server)
    assert reply.refusal == "I can't judge this."
    assert reply.text == ""


def test_400_is_a_client_error_with_status_and_message() -> None:
    error, _ = _failure(lambda _r: Scripted.error(400, "Invalid schema for response_format"))
    assert error.reason == "client_error"
    assert not error.retryable
    assert "400" in str(error)
    assert "Invalid schema for response_format" in str(error)


def test_api_key_echoed_by_the_provider_is_redacted() -> None:
    error, _ = _failure(lambda _r: Scripted.error(401, f"Incorrect API key provided: {SECRET}."))
    assert error.reason == "client_error"
    assert not error.retryable
    assert "[redacted]" in str(error)


def test_custom_base_url_without_a_key_sends_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with WireServer() as server:
        _complete(server)
    assert server.received[0].headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"


def test_missing_key_for_the_real_endpoint_fails_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIJudge("gpt-test")


def test_judge_can_be_reused_under_a_new_event_loop() -> None:
    with WireServer() as server:
        judge = OpenAIJudge("gpt-test", base_url=server.openai_base_url)
        first = asyncio.run(judge.complete(REQUEST))  # not closed: its loop ends with it open
        second = asyncio.run(_call(judge, REQUEST))
    assert first.text == second.text
    assert server.request_count == 2
    with warnings.catch_warnings():  # the first loop's connection can only be dropped now
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_concurrent_calls_are_each_answered_once() -> None:
    requests = [JudgeRequest(system="s", user=f"claim {i}") for i in range(64)]
    with WireServer(fixed_json(delay_s=0.2)) as server:
        judge = OpenAIJudge("gpt-test", base_url=server.openai_base_url)

        async def run_all() -> list[JudgeReply]:
            try:
                return await asyncio.gather(*(judge.complete(r) for r in requests))
            finally:
                await judge.aclose()

        start = time.perf_counter()
        replies = asyncio.run(run_all())
        elapsed = time.perf_counter() - start
    assert len(replies) == 64
    assert elapsed < 3.0
    assert server.counts == {message_key(r.user): 1 for r in requests}


def test_api_key_never_reaches_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    actions = iter([Scripted.answer("{}"), Scripted.error(401, f"bad key {SECRET}")])
    with WireServer(lambda _r: next(actions)) as server:
        _complete(server)
        with pytest.raises(JudgeError):
            _complete(server)
    assert caplog.records
    assert SECRET not in caplog.text


def test_describe_names_the_settings_but_not_the_key() -> None:
    judge = OpenAIJudge("gpt-test", base_url="http://127.0.0.1:9/v1", timeout=7.0)
    assert judge.backend == "openai"
    assert judge.describe() == {
        "backend": "openai",
        "model": "gpt-test",
        "base_url": "http://127.0.0.1:9/v1",
        "timeout_s": 7.0,
    }
