"""Judges that call a Chat Completions endpoint: OpenAI's, an OpenAI-compatible server's (vLLM,
Ollama...) or an Azure OpenAI deployment's."""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from pcf.judges._provider import ProviderJudge
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest, schema_without, usage_count

OPENAI_API = "https://api.openai.com/v1"
STRICT_UNSUPPORTED = ("maxLength",)
"""Schema keywords OpenAI's own strict structured outputs reject (Azure's too); an
OpenAI-compatible server (llama.cpp, vLLM, Ollama) compiles them into its grammar."""


def chat_reply(completion: object, latency: float) -> JudgeReply:
    """The reply in a chat completion's JSON, which is kept whole as ``raw``."""
    try:
        if not isinstance(completion, dict):
            raise TypeError("the response is not a JSON object")
        message = completion["choices"][0]["message"]
        content, refusal = message.get("content"), message.get("refusal")
        if not isinstance(content, str | None) or not isinstance(refusal, str | None):
            raise TypeError("content and refusal must be text or null")
        usage = completion.get("usage") or {}
        return JudgeReply(
            text=content or "",
            input_tokens=usage_count(usage.get("prompt_tokens")),
            output_tokens=usage_count(usage.get("completion_tokens")),
            latency_s=latency,
            raw=completion,
            refusal=refusal,
        )
    except (AttributeError, IndexError, KeyError, TypeError) as err:
        raise JudgeError(
            "bad_response", f"malformed chat completion: {err}", retryable=True
        ) from err


class OpenAIJudge(ProviderJudge):
    """Chat Completions through ``openai.AsyncOpenAI``, with SDK retries off (the runner owns
    retries); a truncated answer is still returned, and the parser rejects it."""

    backend = "openai"
    sdk, sdk_client = openai, openai.AsyncOpenAI
    # The SDK's aiohttp transport costs about a third less CPU per call than its httpx one,
    # and the event loop's CPU is what limits a run at high concurrency.
    http_client = openai.DefaultAioHttpClient
    _reply = staticmethod(chat_reply)

    def __init__(self, model: str, *, base_url: str | None = None, **options: Any) -> None:
        super().__init__(model, base_url=base_url, **options)
        # OpenAI's own API (or Azure's) takes a subset of JSON schema; another server all of it
        server = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_API).rstrip("/")
        compatible = self.backend == "openai" and server != OPENAI_API
        self.unsupported = () if compatible else STRICT_UNSUPPORTED

    def body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Chat Completions body of ``request`` (also a batch request's body)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if request.schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "schema": schema_without(request.schema, self.unsupported),
                    "strict": True,
                },
            }
        return body

    async def _send(self, request: JudgeRequest) -> object:
        # The SDK's documented request method with a plain JSON body and a plain JSON
        # answer: the typed ``chat.completions.create`` walks every message and the nested
        # schema through its TypedDict transforms, and builds response models, on each
        # call: the largest CPU costs of a call at high concurrency, where the event loop
        # is the bottleneck (benchmarks/runner_throughput.py). Same endpoint, same bytes.
        return await self.client().post("/chat/completions", body=self.body(request), cast_to=dict)

    @staticmethod
    def _status_message(err: openai.APIStatusError) -> str:
        """The server's own message: the ``message`` of OpenAI's ``error`` object (which the
        SDK keeps as ``body``), ``{"error": "text"}`` (Ollama), ``{"detail": ...}``, or the text
        of a body that is not JSON (cut to 300 characters)."""
        body = err.body
        if isinstance(body, dict):
            for field in ("message", "detail", "error"):
                if isinstance(body.get(field), str) and body[field].strip():
                    return str(body[field]).strip()[:300]
            return json.dumps(body)[:300]
        if isinstance(body, str) and body.strip():
            return body.strip()[:300]
        return "the server sent no message"


class AzureJudge(OpenAIJudge):
    """An Azure OpenAI deployment (``model``) through ``openai.AsyncAzureOpenAI``, which reads
    the endpoint (unless ``base_url`` names it) and the API version from the environment."""

    backend = "azure"

    def __init__(self, model: str, *, base_url: str | None = None, **options: Any) -> None:
        super().__init__(model, base_url=base_url, **options)
        for given, variable in ((base_url, "AZURE_OPENAI_ENDPOINT"), (None, "OPENAI_API_VERSION")):
            if not (given or os.environ.get(variable)):
                raise ValueError(f"azure/ models need {variable} set in the environment")

    @staticmethod
    def _new_client(api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
        # the deployment is the body's model: the SDK puts it in the path
        return openai.AsyncAzureOpenAI(
            api_key=api_key,
            azure_endpoint=base_url or os.environ["AZURE_OPENAI_ENDPOINT"],
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )
