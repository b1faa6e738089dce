"""A judge that calls an OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama...)."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pydantic
from openai.types.chat import ChatCompletion

from pcf.judges._provider import ProviderJudge, status_error, token_count
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest


class OpenAIJudge(ProviderJudge):
    """Chat Completions through ``openai.AsyncOpenAI``, with SDK retries off.

    The runner owns retries, so every failure is raised at once as a :class:`JudgeError`.
    A truncated answer (``finish_reason == "length"``) is still returned as a reply; its
    ``raw`` shows the finish reason and the parser rejects the cut-off text.

    Attributes:
        backend: always ``"openai"``.
        model: the model name sent with every request.
    """

    backend = "openai"
    key_env = "OPENAI_API_KEY"

    @staticmethod
    def _new_client(api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
        # An http_client of our own: the SDK's default one, when garbage-collected while a later
        # event loop runs, tries to close itself on that loop and logs "Event loop is closed".
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(timeout=timeout),
        )

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        extra: dict[str, Any] = {}
        if request.schema is not None:
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "schema": request.schema,
                    "strict": True,
                },
            }
        client = self._clients.get()
        start = time.perf_counter()
        try:
            completion = await client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": request.system},
                    {"role": "user", "content": request.user},
                ],
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                **extra,
            )
        except openai.APIStatusError as err:
            raise status_error(
                err.status_code, _provider_message(err), err.response.headers, self._key
            ) from None  # the SDK error repeats the provider message, which may echo the key
        except openai.APITimeoutError as err:
            raise JudgeError("timeout", "request timed out", retryable=True) from err
        except openai.APIConnectionError as err:
            raise JudgeError("connection_error", _cause(err), retryable=True) from err
        except (openai.APIResponseValidationError, json.JSONDecodeError) as err:
            raise JudgeError("bad_response", "invalid response body", retryable=True) from err
        latency = time.perf_counter() - start
        return _reply(completion, latency)


def _reply(completion: object, latency: float) -> JudgeReply:
    if not isinstance(completion, ChatCompletion):
        raise JudgeError("bad_response", "response is not a chat completion", retryable=True)
    try:
        message = completion.choices[0].message
        usage = completion.usage
        if not isinstance(message.content, str | None):
            raise TypeError(f"content is a {type(message.content).__name__}")
        return JudgeReply(
            text=message.content or "",
            input_tokens=token_count(usage and usage.prompt_tokens),
            output_tokens=token_count(usage and usage.completion_tokens),
            latency_s=latency,
            raw=completion.model_dump(mode="json"),
            refusal=message.refusal,
        )
    except (AttributeError, IndexError, TypeError, pydantic.ValidationError) as err:
        raise JudgeError(
            "bad_response", f"malformed chat completion: {err}", retryable=True
        ) from err


def _provider_message(err: openai.APIStatusError) -> str:
    """The provider's own error message (the SDK keeps the ``error`` object as ``body``)."""
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return err.message


def _cause(err: openai.APIConnectionError) -> str:
    cause = err.__cause__
    return f"Connection error ({type(cause).__name__})" if cause else "Connection error"
