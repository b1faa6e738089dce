"""Judges on self-hosted servers: what a judge says when the server fails (the server's own
message, whatever shape its error body has, and the address that was tried) and how a run's
judge is named."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pcf.judges import judge_label, make_judge, parse_model
from pcf.judges.base import JudgeError, JudgeRequest
from pcf.judges.openai_judge import OpenAIJudge
from tests.wire_server import Scripted, WireServer

REQUEST = JudgeRequest("system", "user")


def error_of(judge: OpenAIJudge) -> JudgeError:
    async def ask() -> JudgeError:
        try:
            await judge.complete(REQUEST)
        except JudgeError as error:
            return error
        finally:
            await judge.aclose()
        raise AssertionError("the call did not fail")

    return asyncio.run(ask())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"error": {"code": 500, "message": "context exceeded", "type": "server_error"}}',
            "context exceeded",
        ),  # llama.cpp, OpenAI
        ('{"error": "model \\"tiny\\" not found"}', 'model "tiny" not found'),  # Ollama
        ('{"object": "error", "message": "KV cache full"}', "KV cache full"),  # vLLM
        ('{"detail": "Not Found"}', "Not Found"),  # a FastAPI server
        ("upstream worker crashed\n", "upstream worker crashed"),  # not JSON
        ("", "the server sent no message"),
    ],
)
def test_an_http_error_carries_the_servers_own_message_and_address(body, message) -> None:
    with WireServer(lambda _: Scripted.broken(body, status=500)) as server:
        error = error_of(OpenAIJudge("tiny", base_url=server.openai_base_url))
    assert error.reason == "server_error"
    assert str(error) == f"server_error: HTTP 500: {message} (from {server.openai_base_url})"


def test_a_refused_connection_names_the_address_tried(monkeypatch) -> None:
    """``ollama/`` without --base-url tries Ollama's default address, and says so."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    backend, model, base_url = parse_model("ollama/llama3.1")
    ollama = make_judge(backend, model, base_url=base_url)
    assert isinstance(ollama, OpenAIJudge)
    assert ollama.address == "http://localhost:11434/v1"
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = error_of(OpenAIJudge("tiny", base_url=f"http://127.0.0.1:{port}/v1"))
    assert error.reason == "connection_error"
    assert str(error).endswith(f"to http://127.0.0.1:{port}/v1")


@pytest.mark.parametrize(
    ("model", "base_url", "label"),
    [
        ("openai/gpt-4o-mini", None, "openai/gpt-4o-mini"),
        ("ollama/llama3.1", None, "ollama/llama3.1 at http://localhost:11434/v1"),
        ("vllm/qwen", "http://LOCALHOST:8000/v1/", "vllm/qwen at http://localhost:8000/v1"),
        (
            "openai-compatible/tiny",
            "http://user:secret@127.0.0.1:8080/v1?key=x",
            "openai-compatible/tiny at http://127.0.0.1:8080/v1",
        ),
        ("openai/gpt-4o", "https://api.openai.com/v1", "openai/gpt-4o"),
        ("anthropic/claude", "http://127.0.0.1:9/", "anthropic/claude at http://127.0.0.1:9"),
    ],
)
def test_a_judge_is_named_by_its_provider_and_server(model, base_url, label) -> None:
    """No credential of the address is shown; OpenAI's own API needs no address."""
    backend, name, url = parse_model(model, base_url=base_url)
    assert judge_label(backend, name, url) == label
