"""What only OpenAIJudge does, with the real ``openai`` SDK against the local wire server.

What it shares with the other provider judges is tested for all in ``test_providers.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from pcf.judges.base import JudgeRequest
from pcf.judges.openai_judge import AzureJudge, OpenAIJudge
from tests.judge_providers import AZURE, OPENAI, REQUEST, SCHEMA, call, complete, use_environment
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


def test_the_seed_is_sent_when_the_judge_has_one() -> None:
    with WireServer() as server:
        complete(OPENAI, server)
        asyncio.run(call(OpenAIJudge("gpt-test", base_url=server.openai_base_url, seed=7), REQUEST))
    assert "seed" not in server.received[0].body
    assert server.received[1].body["seed"] == 7


def test_azure_needs_its_endpoint_and_api_version(monkeypatch: pytest.MonkeyPatch) -> None:
    use_environment(monkeypatch, AZURE)
    with pytest.raises(ValueError, match="AZURE_OPENAI_ENDPOINT"):
        AzureJudge("deployment")
    monkeypatch.delenv("OPENAI_API_VERSION")
    with pytest.raises(ValueError, match="OPENAI_API_VERSION"):
        AzureJudge("deployment", base_url="https://team.openai.azure.com")


def test_no_schema_means_no_response_format() -> None:
    with WireServer() as server:
        complete(OPENAI, server, JudgeRequest(system="s", user="u"))
    assert "response_format" not in server.received[0].body
