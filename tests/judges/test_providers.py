"""What the provider judges (OpenAI, Anthropic, Gemini, Azure OpenAI) share, run for each with
its real SDK.

Every test takes the ``provider`` spec (see ``tests/judge_providers.py``) and runs once per
provider against the local wire server; what only one provider does is tested in
``tests/test_judges_openai.py`` and ``tests/test_judges_anthropic.py``.
"""

from __future__ import annotations

import asyncio
import email.utils
import gc
import json
import logging
import socket
import threading
import time
import warnings

import pytest

from pcf.judges import BASE_URL_ENV, JudgeModel, judge_server, parse_model
from pcf.judges._provider import PLACEHOLDER_KEY, retry_after_seconds
from pcf.judges.base import (
    MAX_CALL_TOKENS,
    JudgeError,
    JudgeReply,
    JudgeRequest,
    schema_without,
)
from pcf.judges.openai_judge import OpenAIJudge
from pcf.prompts import LISTWISE_SCHEMA_NAME, RATIONALE_MAX_CHARS, render_listwise
from tests.factories import make_item
from tests.judge_providers import (
    PROVIDERS,
    REQUEST,
    SECRET,
    ProviderSpec,
    call,
    complete,
    failure,
    use_environment,
)
from tests.wire_server import (
    JsonLiteral,
    Scripted,
    WireRequest,
    WireServer,
    fixed_json,
    message_key,
)

HANG_S = 120
"""Bounds only a hang: how long a call may wait for the others on a loaded machine."""


@pytest.fixture(params=PROVIDERS, ids=lambda spec: spec.backend)
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ProviderSpec:
    """Each provider's spec, with its key set to ``SECRET`` in the environment."""
    spec: ProviderSpec = request.param
    use_environment(monkeypatch, spec)
    return spec


def test_success_maps_text_usage_latency_and_sends_the_request(provider: ProviderSpec) -> None:
    with WireServer(
        lambda _r: Scripted.answer('{"ok": true}', input_tokens=42, output_tokens=7)
    ) as server:
        reply = complete(provider, server)
    assert reply.text == '{"ok": true}'
    assert (reply.input_tokens, reply.output_tokens) == (42, 7)
    assert reply.latency_s > 0
    assert reply.refusal is None
    assert provider.finish_reason(reply.raw) == provider.finished
    assert SECRET not in json.dumps(reply.raw)
    [received] = server.received
    assert received.path == provider.path
    # Anthropic's 2.x SDK sends its key as a bearer token too, not as x-api-key.
    assert provider.sent_key(received.headers) == SECRET
    assert provider.model in received.path or received.body["model"] == provider.model
    assert provider.sent_max_tokens(received.body) == 256  # the rest: each provider's own tests


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("3", 3.0), ("0.5", 0.5), (None, None)],
)
def test_429_is_rate_limited_with_retry_after(
    provider: ProviderSpec, retry_after: str | None, expected: float | None
) -> None:
    error, server = failure(
        provider, lambda _r: Scripted.error(429, "Rate limit reached", retry_after=retry_after)
    )
    assert error.reason == "rate_limited"
    assert error.retryable
    assert error.retry_after == expected
    assert server.request_count == 1  # the SDK did not retry on its own


def test_retry_after_as_http_date(provider: ProviderSpec) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    error, _ = failure(provider, lambda _r: Scripted.error(429, retry_after=when))
    assert error.retry_after is not None
    assert 25 < error.retry_after <= 31


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(
    ("provider", "status"),
    [
        (spec, status)
        for spec in PROVIDERS
        for status in (500, spec.overloaded_status)  # 503 for OpenAI, 529 for Anthropic
    ],
    ids=lambda value: value.backend if isinstance(value, ProviderSpec) else str(value),
    indirect=["provider"],
)
def test_5xx_is_a_retryable_server_error(provider: ProviderSpec, status: int) -> None:
    error, server = failure(provider, lambda _r: Scripted.error(status, "The server had an error"))
    assert error.reason == "server_error"
    assert error.retryable
    assert server.request_count == 1


def test_slow_answer_times_out(provider: ProviderSpec) -> None:
    # The answer would come after 10 minutes (the server drops it when it closes): the judge
    # gives up after its 0.3 s timeout. The bound is for a hang, far from any speed.
    start = time.perf_counter()
    error, _ = failure(provider, lambda _r: Scripted.answer("late", delay_s=600), timeout=0.3)
    assert time.perf_counter() - start < 60
    assert error.reason == "timeout"
    assert error.retryable


def test_unreachable_server_is_a_connection_error(provider: ProviderSpec) -> None:
    # OpenAI's aiohttp transport reports a refused connection as a timeout: the judge maps it.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = provider.new_judge(f"http://127.0.0.1:{port}{provider.url_suffix}", timeout=2.0)
    with pytest.raises(JudgeError) as info:
        asyncio.run(call(judge, REQUEST))
    assert info.value.reason == "connection_error"
    assert info.value.retryable
    assert SECRET not in str(info.value)


def test_malformed_json_body_is_a_bad_response(provider: ProviderSpec) -> None:
    error, _ = failure(provider, lambda _r: Scripted.broken())
    assert error.reason == "bad_response"
    assert error.retryable


def test_json_that_is_not_a_reply_is_a_bad_response(provider: ProviderSpec) -> None:
    error, _ = failure(provider, lambda _r: Scripted.broken(provider.not_a_reply))
    assert error.reason == "bad_response"


def test_truncated_answer_is_still_a_reply(provider: ProviderSpec) -> None:
    with WireServer(lambda _r: Scripted.truncated('{"ok": tr')) as server:
        reply = complete(provider, server)
    assert reply.text == '{"ok": tr'
    assert provider.finish_reason(reply.raw) == provider.truncated


def test_refusal_sets_the_refusal_field(provider: ProviderSpec) -> None:
    with WireServer(lambda _r: Scripted.refusal("I can't judge this.")) as server:
        reply = complete(provider, server)
    assert reply.refusal == "I can't judge this."
    assert reply.text == ""


def test_400_is_a_client_error_with_status_and_message(provider: ProviderSpec) -> None:
    message = provider.bad_request_message
    error, _ = failure(provider, lambda _r: Scripted.error(400, message))
    assert error.reason == "client_error"
    assert not error.retryable
    assert "400" in str(error)
    assert message in str(error)


def test_api_key_echoed_by_the_provider_is_redacted(provider: ProviderSpec) -> None:
    error, _ = failure(
        provider, lambda _r: Scripted.error(401, f"Incorrect API key provided: {SECRET}.")
    )
    assert error.reason == "client_error"
    assert not error.retryable
    assert "[redacted]" in str(error)


def test_custom_base_url_without_a_key_sends_a_placeholder(
    provider: ProviderSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(provider.key_env)
    with WireServer() as server:
        complete(provider, server)
    assert provider.sent_key(server.received[0].headers) == PLACEHOLDER_KEY


def test_missing_key_for_the_real_endpoint_fails_early(
    provider: ProviderSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(provider.key_env)
    with pytest.raises(ValueError, match=provider.key_env):
        provider.new_judge()


def test_judge_can_be_reused_under_a_new_event_loop(provider: ProviderSpec) -> None:
    with WireServer() as server:
        judge = provider.new_judge(provider.base_url(server))
        first = asyncio.run(judge.complete(REQUEST))  # not closed: its loop ends with it open
        second = asyncio.run(call(judge, REQUEST))
    assert first.text == second.text
    assert server.request_count == 2
    with warnings.catch_warnings():  # the first loop's connection can only be dropped now
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_concurrent_calls_are_in_flight_at_once_and_each_answered_once(
    provider: ProviderSpec,
) -> None:
    requests = [JudgeRequest(system="s", user=f"claim {i}") for i in range(64)]
    # every answer waits until all 64 calls are at the server at once: a judge that sent them
    # one at a time would hang there until the barrier's timeout broke it
    together = threading.Barrier(64, timeout=HANG_S)
    answer = fixed_json()

    def answer_together(request: WireRequest) -> Scripted:
        together.wait()
        return answer(request)

    with WireServer(answer_together) as server:
        judge = provider.new_judge(provider.base_url(server), timeout=HANG_S)

        async def run_all() -> list[JudgeReply]:
            try:
                return await asyncio.gather(*(judge.complete(r) for r in requests))
            finally:
                await judge.aclose()

        replies = asyncio.run(run_all())
    assert len(replies) == 64
    assert not together.broken
    assert server.counts == {message_key(r.user): 1 for r in requests}


def test_api_key_never_reaches_the_logs(
    provider: ProviderSpec, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    actions = iter([Scripted.answer("{}"), Scripted.error(401, f"bad key {SECRET}")])
    with WireServer(lambda _r: next(actions)) as server:
        complete(provider, server)
        with pytest.raises(JudgeError):
            complete(provider, server)
    assert caplog.records
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("scripted", "expected"),
    [
        (10**20, MAX_CALL_TOKENS),
        (2**62, MAX_CALL_TOKENS),
        (-1000, 0),
        (JsonLiteral("NaN"), None),  # not a count: unknown, never read as 0
        (JsonLiteral("1e300"), None),
        (JsonLiteral('"12"'), None),
        (JsonLiteral("null"), None),  # a server that reports no usage (llama.cpp may not)
    ],
)
def test_absurd_or_negative_usage_counts_are_clamped_and_others_unknown(
    provider: ProviderSpec, scripted: int | JsonLiteral, expected: int | None
) -> None:
    answer = Scripted.answer('{"ok": true}', input_tokens=scripted, output_tokens=scripted)
    with WireServer(lambda _r: answer) as server:
        reply = complete(provider, server)
    assert (reply.input_tokens, reply.output_tokens) == (expected, expected)
    assert reply.text == '{"ok": true}'


@pytest.mark.parametrize(
    "literal",
    [JsonLiteral("9" * 5000), JsonLiteral("[" * 200_000 + "]" * 200_000)],
    ids=["5000_digits", "deep_nesting"],
)
def test_a_body_no_json_decoder_takes_is_a_bad_response(
    provider: ProviderSpec, literal: JsonLiteral
) -> None:
    error, _ = failure(provider, lambda _r: Scripted.answer('{"ok": true}', input_tokens=literal))
    assert error.reason == "bad_response"
    assert error.retryable


def test_the_server_of_a_cache_key_is_normalised_and_holds_no_credential(monkeypatch) -> None:
    for variable in BASE_URL_ENV.values():
        monkeypatch.delenv(variable, raising=False)
    given = "HTTP://ana:s3cret@LocalHost:80/v1/?api_key=k3y#top"
    assert judge_server("openai", given) == "http://localhost/v1"
    assert judge_server("openai", "https://Host:8443/v1") == "https://host:8443/v1"
    assert judge_server("openai", "http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert judge_server("openai", "http://host:not-a-port/v1") == "http://host/v1"
    # the provider's own endpoint, however written, and backends that call no server
    assert judge_server("openai", "https://API.openai.com:443/v1/") is None
    assert judge_server("anthropic", "https://api.anthropic.com") is None
    assert judge_server("openai", None) is None
    assert judge_server("simulated", "http://host") is None
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://proxy.example/anthropic/")
    assert judge_server("anthropic", None) == "https://proxy.example/anthropic"
    assert judge_server("anthropic", "http://other") == "http://other"
    assert judge_server("google", "https://generativelanguage.googleapis.com/") is None
    # an Azure endpoint is the operator's own resource: always part of the key
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://Team.openai.azure.com/")
    assert judge_server("azure", None) == "https://team.openai.azure.com"


@pytest.mark.parametrize(
    ("name", "backend", "base_url", "expected"),
    [
        ("openai/gpt-4o-mini", None, None, ("openai", "gpt-4o-mini", None)),
        ("google/gemini-2.5-flash", None, None, ("google", "gemini-2.5-flash", None)),
        (
            "azure/my-deployment",
            None,
            "https://t.openai.azure.com",
            ("azure", "my-deployment", "https://t.openai.azure.com"),
        ),
        ("ollama/llama3.1", None, None, ("openai", "llama3.1", "http://localhost:11434/v1")),
        (
            "vllm/org/model",
            None,
            "http://gpu:8000/v1",
            ("openai", "org/model", "http://gpu:8000/v1"),
        ),
        (
            "openai-compatible/openai/gpt-4o",
            None,
            "https://or.example/v1",
            ("openai", "openai/gpt-4o", "https://or.example/v1"),
        ),
        ("simulated/sim-fresh", None, None, ("simulated", "sim-fresh", None)),
        ("sim-fresh", None, None, ("simulated", "sim-fresh", None)),  # as before providers
        ("openai/gpt-4o", "openai", None, ("openai", "openai/gpt-4o", None)),  # --backend: as is
    ],
)
def test_a_model_is_named_provider_slash_name(name, backend, base_url, expected, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert parse_model(name, backend=backend, base_url=base_url) == JudgeModel(*expected)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("mistral/large", "the provider one of simulated, openai, anthropic, google, azure"),
        ("openai/", "name it provider/name"),
        ("openai-compatible/qwen", "give the server's base URL"),
    ],
)
def test_a_model_name_that_names_no_judge_says_what_to_write(name, message, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=message):
        parse_model(name)


def _sent_schema(provider: ProviderSpec, body: dict) -> dict:
    """The answer's schema in a received body, wherever the provider's own form puts it."""
    if provider.backend == "anthropic":
        assert body["output_config"]["format"]["type"] == "json_schema"
        return body["output_config"]["format"]["schema"]
    if provider.backend == "google":
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        return body["generationConfig"]["responseJsonSchema"]
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["name"] == LISTWISE_SCHEMA_NAME
    return response_format["json_schema"]["schema"]


def _bounds(schema: dict) -> tuple[object, ...]:
    """The list and text bounds of a listwise answer's schema (None where absent)."""
    lists = [schema["properties"][name] for name in ("candidates", "ranking")]
    rationale = schema["properties"]["candidates"]["items"]["properties"]["rationale"]
    return (
        *[(ls.get("minItems"), ls.get("maxItems")) for ls in lists],
        rationale.get("maxLength"),
    )


def test_the_request_carries_the_answers_bounded_schema_in_the_providers_own_form(
    provider: ProviderSpec,
) -> None:
    """An OpenAI-compatible server (here: the wire server as ``openai/``) gets every bound;
    Azure and Gemini the lists' bounds (their schemas take no text length); Anthropic none."""
    rendered = render_listwise(make_item("q", n=4), ["c2", "c0", "c3", "c1"])
    with WireServer() as server:
        complete(provider, server, rendered.request(max_tokens=256))
    assert rendered.schema is not None
    sent = _sent_schema(provider, server.received[0].body)
    exactly = (4, 4)
    expected = {
        "openai": (exactly, exactly, RATIONALE_MAX_CHARS),
        "azure": (exactly, exactly, None),
        "google": (exactly, exactly, None),
        "anthropic": ((None, None), (None, None), None),
    }[provider.backend]
    assert _bounds(sent) == expected
    bounds = ("minItems", "maxItems", "maxLength")  # nothing else differs from the rendered one
    assert schema_without(sent, bounds) == schema_without(rendered.schema, bounds)
    assert sent["properties"]["ranking"]["items"]["enum"] == ["A", "B", "C", "D"]


def test_openais_own_api_gets_the_schema_without_what_strict_mode_rejects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    rendered = render_listwise(make_item("q", n=3), ["c0", "c1", "c2"])
    body = OpenAIJudge("gpt-test", api_key=SECRET).body(rendered.request())
    assert _bounds(body["response_format"]["json_schema"]["schema"]) == ((3, 3), (3, 3), None)
