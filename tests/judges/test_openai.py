"""What only OpenAIJudge does, with the real ``openai`` SDK against the local wire server.

What it shares with AnthropicJudge is tested for both in ``tests/test_judges_providers.py``.
"""

from __future__ import annotations

import pytest

from pcf.judges.base import JudgeRequest
from tests.judge_providers import OPENAI, SCHEMA, complete, use_environment
from tests.wire_server import WireServer


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    use_environment(monkeypatch, OPENAI)


def test_sends_the_schema_as_response_format() -> None:
    with WireServer() as server:
        complete(OPENAI, server)
    body = server.received[0].body
    assert body["messages"] == [
        {"role": "system", "content": "You judge facts."},
        {"role": "user", "content": "Is water wet?"},
    ]
    assert body["temperature"] == 0.0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
    }


def test_no_schema_means_no_response_format() -> None:
    with WireServer() as server:
        complete(OPENAI, server, JudgeRequest(system="s", user="u"))
    assert "response_format" not in server.received[0].body
