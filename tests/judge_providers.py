"""What the provider judge tests share: one spec per provider and the wire-server helpers.

``tests/judges/test_providers.py`` runs the behaviour the judges share once per spec (OpenAI,
Anthropic, Gemini, Azure OpenAI);
``tests/judges/test_openai.py`` and ``tests/judges/test_anthropic.py`` keep what only one
provider does; :func:`run_at_server` makes a whole run through a provider's SDK.
"""

from __future__ import annotations

import asyncio
import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from sqlmodel import Session

from pcf.items import Item
from pcf.judges._provider import ProviderJudge
from pcf.judges.anthropic_judge import AnthropicJudge
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest
from pcf.judges.google_judge import GoogleJudge
from pcf.judges.openai_judge import AzureJudge, OpenAIJudge
from pcf.runs.live import execute
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import Run
from tests.factories import stored_run
from tests.wire_server import Responder, WireServer

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


@dataclass(frozen=True)
class ProviderSpec:
    """How one provider's judge is built, called and answered through the wire server."""

    backend: str
    judge: type[ProviderJudge]
    model: str
    key_env: str
    sdk_env: tuple[str, ...]
    """Environment variables the SDK reads on its own; cleared so none leaks into a test."""
    server_url_attr: str
    """The :class:`WireServer` attribute this SDK takes as ``base_url``."""
    url_suffix: str
    """What that ``base_url`` adds to ``http://host:port``."""
    path: str
    """The path the request is received on."""
    finish_reason: Callable[[dict[str, Any]], Any]
    """The finish (stop) reason in a reply's ``raw``."""
    finished: str
    truncated: str
    not_a_reply: str
    """A JSON body that parses but is not the provider's answer."""
    overloaded_status: int
    """The provider's own 5xx besides 500."""
    bad_request_message: str
    sent_key: Callable[[dict[str, str]], str] = lambda h: h["authorization"].removeprefix("Bearer ")
    """The key in a request's headers."""
    sent_max_tokens: Callable[[dict[str, Any]], Any] = lambda body: body["max_tokens"]
    """The answer token limit in a request's body."""
    settings: tuple[tuple[str, str], ...] = ()
    """Other environment variables the provider needs."""

    def base_url(self, server: WireServer) -> str:
        """The ``base_url`` that points this SDK at ``server``."""
        return getattr(server, self.server_url_attr)

    def new_judge(self, base_url: str | None = None, *, timeout: float = 60.0) -> ProviderJudge:
        """The judge with the spec's model."""
        return self.judge(self.model, base_url=base_url, timeout=timeout)


OPENAI = ProviderSpec(
    backend="openai",
    judge=OpenAIJudge,
    model="gpt-test",
    key_env="OPENAI_API_KEY",
    sdk_env=("OPENAI_BASE_URL", "OPENAI_CUSTOM_HEADERS", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    server_url_attr="openai_base_url",
    url_suffix="/v1",
    path="/v1/chat/completions",
    finish_reason=lambda raw: raw["choices"][0]["finish_reason"],
    finished="stop",
    truncated="length",
    not_a_reply='{"choices": []}',
    overloaded_status=503,
    bad_request_message="Invalid schema for response_format",
)
ANTHROPIC = ProviderSpec(
    backend="anthropic",
    judge=AnthropicJudge,
    model="claude-test",
    key_env="ANTHROPIC_API_KEY",
    sdk_env=("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"),
    server_url_attr="base_url",
    url_suffix="",
    path="/v1/messages",
    finish_reason=lambda raw: raw["stop_reason"],
    finished="end_turn",
    truncated="max_tokens",
    not_a_reply='{"content": null}',
    overloaded_status=529,
    bad_request_message="output_config.format: invalid schema",
)
GOOGLE = ProviderSpec(
    backend="google",
    judge=GoogleJudge,
    model="gemini-test",
    key_env="GOOGLE_API_KEY",
    sdk_env=(
        "GEMINI_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
    ),
    server_url_attr="base_url",
    url_suffix="",
    path="/v1/models/gemini-test:generateContent",
    finish_reason=lambda raw: raw["candidates"][0]["finishReason"],
    finished="STOP",
    truncated="MAX_TOKENS",
    not_a_reply='{"candidates": null}',
    overloaded_status=503,
    bad_request_message="Invalid JSON payload received. Unknown name",
    sent_key=lambda headers: headers["x-goog-api-key"],
    sent_max_tokens=lambda body: body["generationConfig"]["maxOutputTokens"],
)
AZURE = dataclasses.replace(
    OPENAI,
    backend="azure",
    judge=AzureJudge,
    key_env="AZURE_OPENAI_API_KEY",
    sdk_env=("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_AD_TOKEN", "OPENAI_BASE_URL"),
    server_url_attr="base_url",
    url_suffix="",
    path="/openai/deployments/gpt-test/chat/completions",
    sent_key=lambda headers: headers["api-key"],
    settings=(("OPENAI_API_VERSION", "2024-10-21"),),
)
PROVIDERS = (OPENAI, ANTHROPIC, GOOGLE, AZURE)
BATCH_PROVIDERS = (OPENAI, ANTHROPIC)
"""The providers whose batch API PCF uses."""


def use_environment(monkeypatch: pytest.MonkeyPatch, spec: ProviderSpec) -> None:
    """Set the provider's key to :data:`SECRET` and clear the SDK's other settings."""
    monkeypatch.setenv(spec.key_env, SECRET)
    for name in spec.sdk_env:
        monkeypatch.delenv(name, raising=False)
    for name, value in spec.settings:
        monkeypatch.setenv(name, value)


async def call(judge: ProviderJudge, request: JudgeRequest) -> JudgeReply:
    """One request, closing the judge's connections afterwards."""
    try:
        return await judge.complete(request)
    finally:
        await judge.aclose()


def complete(
    spec: ProviderSpec, server: WireServer, request: JudgeRequest = REQUEST, *, timeout: float = 5.0
) -> JudgeReply:
    """One request from a new judge pointed at ``server``, in its own event loop."""
    judge = spec.new_judge(spec.base_url(server), timeout=timeout)
    return asyncio.run(call(judge, request))


def failure(
    spec: ProviderSpec, responder: Responder, *, timeout: float = 5.0
) -> tuple[JudgeError, WireServer]:
    """The error a request answered by ``responder`` raises, checked to not show the key."""
    with WireServer(responder) as server, pytest.raises(JudgeError) as info:
        complete(spec, server, timeout=timeout)
    assert SECRET not in "".join(traceback.format_exception(info.value))
    return info.value, server


@dataclass(frozen=True)
class ServedRun:
    """A run made through a provider's SDK at a wire server, and what the server received."""

    run: Run
    report: RunReport
    requests: int
    per_key: dict[str, int]


def run_at_server(
    backend: str,
    respond: Responder,
    new_judge: Callable[[str, WireServer], ProviderJudge],
    *,
    name: str,
    items: list[Item],
    spec: RunSpec,
    session: Session,
    dataset_id: int,
    prices: dict[str, tuple[float, float]],
) -> ServedRun:
    """Create run ``name`` (PCF, K=4, balanced) and make its calls with ``backend``'s judge
    (``new_judge(backend, server)``) at a wire server answering with ``respond``."""
    run = stored_run(session, dataset_id, name=name, backend=backend, model="m", k=4)
    with WireServer(respond) as server:
        judge = new_judge(backend, server)

        async def go() -> RunReport:
            try:
                return await execute(run, items, judge, spec, session=session, prices=prices)
            finally:
                await judge.aclose()

        report = asyncio.run(go())
        return ServedRun(run, report, server.request_count, server.counts)
