"""The scripted wire server: protocol shapes, errors, counting and concurrency (plain HTTP)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.wire_server import (
    DEFAULT_JSON_TEXT,
    JsonLiteral,
    Scripted,
    WireRequest,
    WireServer,
    fixed_json,
    message_key,
)

HANG_S = 120
"""Bounds only a hang: how long a request may wait for the others on a loaded machine."""


def _body(user: str = "Is water wet?", **extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": user}], **extra}


def _post(url: str, payload: Any, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def test_openai_answer_has_the_chat_completion_shape() -> None:
    with WireServer(
        lambda _r: Scripted.answer('{"ok": true}', input_tokens=11, output_tokens=4)
    ) as s:
        status, headers, raw = _post(f"{s.openai_base_url}/chat/completions", _body())
    body = json.loads(raw)
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"].startswith("req_")
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "test-model"
    choice = body["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": '{"ok": true}',
        "refusal": None,
        "annotations": [],
    }
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 11
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["total_tokens"] == 15


def test_gemini_and_azure_paths_speak_their_protocols() -> None:
    """Gemini's generateContent (usageMetadata, its error JSON) and an Azure deployment's chat
    completions, which Azure answers only with an ``api-version``."""
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Is water wet?"}]}]}
    actions = iter([Scripted.answer("yes", input_tokens=9, output_tokens=2), Scripted.error(429)])
    with WireServer(lambda _r: next(actions, Scripted.answer("{}"))) as s:
        _, _, raw = _post(f"{s.base_url}/v1beta/models/gemini-x:generateContent", gemini)
        limited, _, error = _post(f"{s.base_url}/v1/models/gemini-x:generateContent", gemini)
        azure = f"{s.base_url}/openai/deployments/d/chat/completions"
        unversioned, _, _ = _post(azure, _body())
        versioned, _, _ = _post(f"{azure}?api-version=2024-10-21", _body())
        received = s.received
    answer = json.loads(raw)
    assert answer["candidates"][0]["content"]["parts"] == [{"text": "yes"}]
    assert answer["usageMetadata"] == {
        "promptTokenCount": 9,
        "candidatesTokenCount": 2,
        "totalTokenCount": 11,
    }
    assert (limited, json.loads(error)["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert (unversioned, versioned) == (404, 200)
    assert [r.protocol for r in received] == ["google", "google", "openai"]
    assert received[0].last_user_text == "Is water wet?"


def test_chat_completions_is_also_served_without_the_v1_prefix() -> None:
    with WireServer() as s:
        status, _, raw = _post(f"{s.base_url}/chat/completions", _body())
        assert s.received[0].protocol == "openai"
    assert status == 200
    assert json.loads(raw)["choices"][0]["message"]["content"] == DEFAULT_JSON_TEXT


def test_anthropic_answer_has_the_message_shape() -> None:
    with WireServer(lambda _r: Scripted.answer("hello", input_tokens=9, output_tokens=2)) as s:
        status, headers, raw = _post(f"{s.base_url}/v1/messages", _body(max_tokens=10))
    body = json.loads(raw)
    assert status == 200
    assert headers["request-id"].startswith("req_")
    assert body["id"].startswith("msg_")
    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["content"] == [{"type": "text", "text": "hello"}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["input_tokens"] == 9
    assert body["usage"]["output_tokens"] == 2


def test_token_counts_are_estimated_when_not_scripted() -> None:
    with WireServer(lambda _r: Scripted.answer("x" * 40)) as s:
        _, _, raw = _post(f"{s.openai_base_url}/chat/completions", _body())
    usage = json.loads(raw)["usage"]
    assert usage["completion_tokens"] == 10
    assert usage["prompt_tokens"] > 0


def test_refusal_and_truncation_shapes() -> None:
    actions = iter(
        [
            Scripted.refusal("No."),
            Scripted.truncated('{"ok": tr'),
            Scripted.refusal("No."),
            Scripted.truncated("cut"),
        ]
    )
    with WireServer(lambda _r: next(actions)) as s:
        refused = json.loads(_post(f"{s.openai_base_url}/chat/completions", _body())[2])
        cut = json.loads(_post(f"{s.openai_base_url}/chat/completions", _body())[2])
        a_refused = json.loads(_post(f"{s.base_url}/v1/messages", _body())[2])
        a_cut = json.loads(_post(f"{s.base_url}/v1/messages", _body())[2])
    assert refused["choices"][0]["message"]["content"] is None
    assert refused["choices"][0]["message"]["refusal"] == "No."
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"] == '{"ok": tr'
    assert a_refused["stop_reason"] == "refusal"
    assert a_refused["stop_details"]["explanation"] == "No."
    assert a_cut["stop_reason"] == "max_tokens"
    assert a_cut["content"][0]["text"] == "cut"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/v1/chat/completions",
            {
                "error": {
                    "message": "slow down",
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
        ),
        (
            "/v1/messages",
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        ),
    ],
)
def test_error_bodies_and_retry_after(path: str, expected: dict[str, Any]) -> None:
    with WireServer(lambda _r: Scripted.error(429, "slow down", retry_after="7")) as s:
        status, headers, raw = _post(f"{s.base_url}{path}", _body())
    body = json.loads(raw)
    body.pop("request_id", None)
    assert status == 429
    assert headers["retry-after"] == "7"
    assert body == expected


def test_server_error_bodies_name_the_provider_error_type() -> None:
    with WireServer(lambda _r: Scripted.error(529)) as s:
        _, _, anthropic_raw = _post(f"{s.base_url}/v1/messages", _body())
        _, _, openai_raw = _post(f"{s.openai_base_url}/chat/completions", _body())
    assert json.loads(anthropic_raw)["error"]["type"] == "overloaded_error"
    assert json.loads(openai_raw)["error"]["type"] == "server_error"


def test_scripted_token_counts_may_be_any_integer_or_json_text() -> None:
    digits = "9" * 5000  # more than json.dumps writes
    scripted = Scripted.answer("x", input_tokens=-(2**62), output_tokens=JsonLiteral(digits))
    with WireServer(lambda _r: scripted) as s:
        _, _, openai_raw = _post(f"{s.openai_base_url}/chat/completions", _body())
        _, _, anthropic_raw = _post(f"{s.base_url}/v1/messages", _body())
    assert f'"prompt_tokens": {-(2**62)}, "completion_tokens": {digits}, ' in openai_raw.decode()
    assert f'"total_tokens": {digits}' in openai_raw.decode()
    assert f'"input_tokens": {-(2**62)}, "output_tokens": {digits}, ' in anthropic_raw.decode()


def test_broken_body_is_sent_verbatim_as_json_content() -> None:
    with WireServer(lambda _r: Scripted.broken('{"id": "x", "choi')) as s:
        status, headers, raw = _post(f"{s.openai_base_url}/chat/completions", _body())
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert raw == b'{"id": "x", "choi'


def test_unknown_path_and_non_json_body_are_rejected() -> None:
    with WireServer() as s:
        missing, _, _ = _post(f"{s.base_url}/v1/embeddings", _body())
        not_json, _, raw = _post(f"{s.base_url}/v1/messages", b"not json")
        assert s.request_count == 0
    assert missing == 404
    assert not_json == 400
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_responder_sees_the_request_and_failures_become_500() -> None:
    seen: list[WireRequest] = []

    def responder(request: WireRequest) -> Scripted:
        seen.append(request)
        raise RuntimeError("script bug")

    with WireServer(responder) as s:
        status, _, raw = _post(f"{s.base_url}/v1/messages", _body("hello", system="sys"))
    assert status == 500
    assert "script bug" in json.loads(raw)["error"]["message"]
    assert seen[0].protocol == "anthropic"
    assert seen[0].body["system"] == "sys"
    assert seen[0].last_user_text == "hello"
    assert seen[0].key == message_key("hello")
    assert seen[0].index == 0


def test_last_user_text_reads_content_blocks() -> None:
    with WireServer() as s:
        blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
        messages = [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"},
            {"role": "user", "content": blocks},
        ]
        _post(f"{s.base_url}/v1/messages", {"model": "m", "messages": messages})
        assert s.received[0].last_user_text == "ab"


def test_concurrent_requests_are_served_at_once_and_counted_exactly_once_each() -> None:
    users = [f"question {i}" for i in range(64)]
    # each answer waits until all 64 requests are in the server at once (a hang if served one
    # at a time: the barrier's timeout then breaks it and every request fails)
    together = threading.Barrier(64, timeout=HANG_S)
    answer = fixed_json()

    def answer_together(request: WireRequest) -> Scripted:
        together.wait()
        return answer(request)

    with WireServer(answer_together) as s:
        with ThreadPoolExecutor(max_workers=64) as pool:
            statuses = list(
                pool.map(
                    lambda u: _post(f"{s.openai_base_url}/chat/completions", _body(u), HANG_S)[0],
                    users,
                )
            )
        counts = s.counts
        indexes = sorted(r.index for r in s.received)
        total = s.request_count
    assert statuses == [200] * 64
    assert total == 64
    assert indexes == list(range(64))
    assert counts == {message_key(u): 1 for u in users}


def test_close_does_not_wait_for_pending_delayed_answers() -> None:
    # An answer 10 minutes away; closing must not wait for it (the bound is for a hang).
    server = WireServer(lambda _r: Scripted.answer("late", delay_s=600)).start()
    outcome: list[str] = []

    def call() -> None:
        try:
            _post(f"{server.base_url}/v1/messages", _body(), timeout=5.0)
        except OSError as err:  # the dropped answer closes the connection
            outcome.append(type(err).__name__)

    client = threading.Thread(target=call)
    client.start()
    while server.request_count == 0:
        time.sleep(0.01)
    start = time.perf_counter()
    server.close()
    assert time.perf_counter() - start < 60
    client.join()
    assert outcome  # the client saw the connection close instead of an answer
