"""What only GoogleJudge does, with the real ``google-genai`` SDK against the local wire server.

What it shares with the other provider judges is tested for all in ``test_providers.py``.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from pcf.judges.google_judge import GoogleJudge
from tests.judge_providers import GOOGLE, REQUEST, SCHEMA, call, complete, use_environment
from tests.wire_server import Scripted, WireServer


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    use_environment(monkeypatch, GOOGLE)


def test_sends_the_system_the_schema_the_sampling_and_the_seed_as_gemini_takes_them() -> None:
    with WireServer() as server:
        asyncio.run(call(GoogleJudge("gemini-test", base_url=server.base_url, seed=7), REQUEST))
    body = server.received[0].body
    assert body["systemInstruction"]["parts"] == [{"text": "You judge facts."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Is water wet?"}]}]
    assert body["generationConfig"] == {
        "temperature": 0.0,
        "maxOutputTokens": 256,
        "seed": 7,
        "responseMimeType": "application/json",
        "responseJsonSchema": SCHEMA,
    }


def test_thinking_is_billed_as_output_and_is_not_the_answer() -> None:
    parts = [{"text": "Let me think.", "thought": True}, {"text": '{"ok": true}'}]
    answer = {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 90,
        },
    }
    with WireServer(lambda _r: Scripted.broken(json.dumps(answer))) as server:
        reply = complete(GOOGLE, server)
    assert reply.text == '{"ok": true}'
    assert (reply.input_tokens, reply.output_tokens) == (10, 95)


def test_a_blocked_prompt_is_a_refusal() -> None:
    answer = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {}}
    with WireServer(lambda _r: Scripted.broken(json.dumps(answer))) as server:
        reply = complete(GOOGLE, server)
    assert (reply.text, reply.refusal) == ("", "PROHIBITED_CONTENT")
