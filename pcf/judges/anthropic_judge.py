"""A judge that calls Anthropic's Messages API."""

from __future__ import annotations

from typing import Any

import anthropic
import pydantic
from anthropic.types import Message, TextBlock

from pcf.judges._provider import ProviderJudge
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest, schema_without, usage_count

UNSUPPORTED = ("maxLength", "minItems", "maxItems")
"""Schema keywords Anthropic's structured outputs reject (length and count bounds): the
schema is sent without them, and the parser checks one entry per key."""


def message_reply(message: object, latency: float) -> JudgeReply:
    """The reply in a Messages answer, kept whole as ``raw``."""
    if not isinstance(message, Message):
        raise JudgeError("bad_response", "response is not a message", retryable=True)
    try:
        text = "".join(
            block.text
            for block in message.content
            if isinstance(block, TextBlock) and isinstance(block.text, str)
        )
        refusal = None
        if message.stop_reason == "refusal":
            details = message.stop_details
            refusal = (details and details.explanation) or text or "refused"
        return JudgeReply(
            text=text,
            input_tokens=usage_count(message.usage and message.usage.input_tokens),
            output_tokens=usage_count(message.usage and message.usage.output_tokens),
            latency_s=latency,
            raw=message.model_dump(mode="json", warnings=False),  # kept as sent, even if odd
            refusal=refusal,
        )
    except (AttributeError, TypeError, pydantic.ValidationError) as err:
        raise JudgeError("bad_response", f"malformed message: {err}", retryable=True) from err


class AnthropicJudge(ProviderJudge):
    """Messages API through ``anthropic.AsyncAnthropic``, with SDK retries off (the runner owns
    retries). The installed SDK (2.x) has no sampling parameters: the temperature is not sent."""

    backend = "anthropic"
    sdk, sdk_client = anthropic, anthropic.AsyncAnthropic
    http_client = anthropic.DefaultAsyncHttpxClient
    _reply = staticmethod(message_reply)

    def params(self, request: JudgeRequest) -> dict[str, Any]:
        """The Messages parameters of ``request`` (also a batch request's ``params``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": request.system,
            "messages": [{"role": "user", "content": request.user}],
        }
        if request.schema is not None:
            schema = schema_without(request.schema, UNSUPPORTED)
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return params

    async def _send(self, request: JudgeRequest) -> object:
        return await self.client().messages.create(**self.params(request))

    @staticmethod
    def _status_message(err: anthropic.APIStatusError) -> str:
        return err.api_message or err.message
