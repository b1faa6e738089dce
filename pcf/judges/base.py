"""The one small protocol every judge backend implements."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pcf.items import Item

MAX_CALL_TOKENS = 10_000_000
"""A usage count above this is the provider's nonsense (no model takes 10M tokens a call)."""
KEY_ENV = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),  # google-genai's order
    "azure": ("AZURE_OPENAI_API_KEY",),
}
"""The variables each provider's key is read from, first set first (the only place a key
comes from)."""
REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8
# OpenAI sk-..., Anthropic sk-ant-..., Google AIza... (Azure's keys have no shape of their own)
_KEY_SHAPED = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{20,}|AIza[A-Za-z0-9_-]{35})")


UNKNOWN = "unknown"
"""What a total reads when a server did not report some of its tokens (never 0)."""


def usage_count(value: object) -> int | None:
    """A token count as reported: an int clamped to [0, MAX_CALL_TOKENS]; None (unknown) when
    the server reported none, or something that is not a count."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return min(max(value, 0), MAX_CALL_TOKENS)


def schema_without(schema: dict[str, Any], keywords: Iterable[str]) -> dict[str, Any]:
    """A copy of JSON schema ``schema`` without ``keywords`` (e.g. ``maxLength``) at any depth,
    for a provider whose structured output rejects them; property names are kept whatever
    they are."""
    dropped = frozenset(keywords)

    def without(node: Any, *, names: bool = False) -> Any:
        if isinstance(node, list):
            return [without(value) for value in node]
        if not isinstance(node, dict):
            return node
        return {
            key: without(value, names=key == "properties" and not names)
            for key, value in node.items()
            if names or key not in dropped
        }

    return without(schema)


def env_key(backend: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``backend``'s key in the environment: the first of its :data:`KEY_ENV` set, or None."""
    environ = os.environ if environ is None else environ
    return next((environ[name] for name in KEY_ENV.get(backend, ()) if environ.get(name)), None)


def key_names(backend: str) -> str:
    """The variables ``backend``'s key is read from, for a message."""
    return " or ".join(KEY_ENV[backend])


def configured_keys() -> list[str]:
    """The API keys in the environment now, long enough to mask (a short one masks words)."""
    values = (os.environ.get(name) for names in KEY_ENV.values() for name in names)
    return [value for value in values if value and len(value) >= MIN_SECRET_CHARS]


def redact(text: str, secrets: Iterable[str | None] | None = None) -> str:
    """``text`` with API keys masked: ``secrets`` (by default :func:`configured_keys`) and
    anything shaped like a provider's key (``sk-...``, ``AIza...``: keys of other accounts too)."""
    for secret in configured_keys() if secrets is None else secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return _KEY_SHAPED.sub(REDACTED, text) if "sk-" in text or "AIza" in text else text


@dataclass(frozen=True)
class CallContext:
    """What the runner knows about a call, never sent to a provider (the simulated judge's)."""

    item: Item
    order: tuple[str, ...]
    keys: tuple[str, ...]
    protocol: str = "listwise"  # "listwise" or "pairwise"
    repeat_index: int = 0


@dataclass(frozen=True)
class JudgeRequest:
    """A rendered judge request: the same text for every backend."""

    system: str
    user: str
    schema: dict[str, Any] | None = None
    schema_name: str = "judgment"
    temperature: float = 0.0
    max_tokens: int = 2048
    context: CallContext | None = field(default=None, compare=False)


@dataclass(frozen=True)
class JudgeReply:
    """The raw answer of a judge, with usage and latency; token counts are made sound on
    creation, so a negative or absurd count never reaches the costs, and None is a count the
    server did not report (unknown, never read as 0)."""

    text: str
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    latency_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)
    refusal: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_tokens", usage_count(self.input_tokens))
        object.__setattr__(self, "output_tokens", usage_count(self.output_tokens))


class JudgeError(Exception):
    """A call that did not produce an answer: a short ``reason`` (``rate_limited``...), whether
    it is ``retryable``, the seconds the provider asked to wait, if it said so, and whether the
    provider ``answered`` with an error status (nothing billed; otherwise, a timeout or a lost
    connection, it may have billed the request)."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        answered: bool = False,
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self.answered = answered


class Judge(Protocol):
    """Given a rendered request, return the raw text plus usage and latency."""

    backend: str
    model: str

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        ...
