"""A judge that calls Google's Gemini API (``generateContent``) through the official
``google-genai`` SDK, installed with the optional extra ``google``."""

from __future__ import annotations

import json
import time

import aiohttp  # the SDK's transport when installed, as it is with openai[aiohttp]
from google import genai
from google.genai import errors, types

from pcf.judges._provider import ProviderJudge
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest, schema_without, usage_count

UNSUPPORTED = ("maxLength",)
"""Schema keywords Gemini's response schema does not take (it bounds lists, not texts)."""
REFUSED = ("SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION")
"""Finish reasons of an answer the provider withheld."""


class GoogleJudge(ProviderJudge):
    """Gemini's ``generateContent`` through ``genai.Client(...).aio``, with SDK retries off
    (the runner owns retries); the answer's JSON is read as sent, thinking tokens as output."""

    backend = "google"

    @staticmethod
    def _new_client(api_key: str, base_url: str | None, timeout: float) -> genai.client.AsyncClient:
        options = types.HttpOptions(
            base_url=base_url,  # None: GOOGLE_GEMINI_BASE_URL, else Google's own endpoint
            timeout=int(timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=api_key, vertexai=False, http_options=options).aio

    def config(self, request: JudgeRequest) -> types.GenerateContentConfig:
        """The generation settings of ``request``."""
        schema = request.schema
        return types.GenerateContentConfig(
            system_instruction=request.system,
            temperature=request.temperature,
            max_output_tokens=request.max_tokens,
            seed=self.seed,
            response_mime_type=None if schema is None else "application/json",
            response_json_schema=None if schema is None else schema_without(schema, UNSUPPORTED),
            should_return_http_response=True,
        )

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        client = self.client()
        start = time.perf_counter()
        try:
            response = await client.models.generate_content(
                model=self.model, contents=request.user, config=self.config(request)
            )
            body = json.loads(response.sdk_http_response.body or "")
        except errors.APIError as err:
            headers = getattr(err.response, "headers", None) or {}
            raise self._status_error(err.code, str(err.message), headers) from None
        except TimeoutError as err:
            raise self._timed_out() from err
        except (aiohttp.ClientError, OSError) as err:
            raise self._connection_error(f"Connection error ({type(err).__name__})") from err
        # ValueError: not JSON, or an integer past Python's 4,300 digits; RecursionError: too deep
        except (ValueError, RecursionError) as err:
            raise JudgeError("bad_response", "invalid response body", retryable=True) from err
        return content_reply(body, time.perf_counter() - start)


def content_reply(response: object, latency: float) -> JudgeReply:
    """The reply in a ``generateContent`` answer's JSON, which is kept whole as ``raw``."""
    try:
        if not isinstance(response, dict):
            raise TypeError("the response is not a JSON object")
        blocked = (response.get("promptFeedback") or {}).get("blockReason")
        candidates = response.get("candidates")
        if not candidates and not blocked:
            raise ValueError("no candidate and no block reason")
        first = candidates[0] if candidates else {}
        parts = (first.get("content") or {}).get("parts") or []
        text = "".join(
            p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")
        )
        reason = first.get("finishReason")
        refused = blocked or reason in REFUSED
        usage = response.get("usageMetadata") or {}
        output_tokens = usage_count(usage.get("candidatesTokenCount"))
        if output_tokens is not None:  # thinking tokens, when reported, are billed as output
            output_tokens += usage_count(usage.get("thoughtsTokenCount")) or 0
        return JudgeReply(
            text=text,
            input_tokens=usage_count(usage.get("promptTokenCount")),
            output_tokens=output_tokens,
            latency_s=latency,
            raw=response,
            refusal=(first.get("finishMessage") or blocked or reason) if refused else None,
        )
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as err:
        raise JudgeError("bad_response", f"malformed answer: {err}", retryable=True) from err
