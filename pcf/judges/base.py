"""The one small protocol every judge backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pcf.items import Item


@dataclass(frozen=True)
class CallContext:
    """What the runner knows about a call; never sent to a provider.

    The simulated judge reads it to answer like a real judge would.
    """

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
    """The raw answer of a judge, with usage and latency."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)
    refusal: str | None = None


class JudgeError(Exception):
    """A call that did not produce an answer.

    Attributes:
        reason: short machine-readable reason (``rate_limited``, ``server_error``, ``timeout``...).
        retryable: whether the runner may try the call again after a backoff.
        retry_after: seconds the provider asked us to wait, when it said so.
    """

    def __init__(
        self, reason: str, message: str, *, retryable: bool, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


class Judge(Protocol):
    """Given a rendered request, return the raw text plus usage and latency."""

    backend: str
    model: str

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        ...
