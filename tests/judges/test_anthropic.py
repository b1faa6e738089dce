"""What only AnthropicJudge does, with the real ``anthropic`` SDK against the local wire server.

What it shares with OpenAIJudge is tested for both in ``tests/test_judges_providers.py``.
"""

from __future__ import annotations

import pytest

from pcf.judges.base import JudgeRequest
from tests.judge_providers import ANTHROPIC, SCHEMA, complete, use_environment
from tests.wire_server import Scripted, WireServer


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    use_environment(monkeypatch, ANTHROPIC)


def test_sends_the_schema_as_output_config() -> None:
    with WireServer() as server:
        complete(ANTHROPIC, server)
    body = server.received[0].body
    assert body["system"] == "You judge facts."
    assert body["messages"] == [{"role": "user", "content": "Is water wet?"}]
    assert "temperature" not in body  # the 2.x SDK has no sampling parameters
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}


def test_no_schema_means_no_output_config() -> None:
    with WireServer() as server:
        complete(ANTHROPIC, server, JudgeRequest(system="s", user="u"))
    assert "output_config" not in server.received[0].body


def test_refusal_is_marked_by_the_stop_reason() -> None:
    with WireServer(lambda _r: Scripted.refusal("I can't judge this.")) as server:
        reply = complete(ANTHROPIC, server)
    assert reply.raw["stop_reason"] == "refusal"
