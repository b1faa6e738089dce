"""Provider batch APIs: OpenAI's Batch API and Anthropic's Message Batches, through the SDKs.
A submission carries a token, so a killed submit finds its batch (docs/costs.md, "Kill-safe")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pcf.judges._provider import ProviderJudge, status_error
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest, configured_keys, redact

if TYPE_CHECKING:  # the SDKs load on first use: a page that only names BatchAPIError stays quick
    from pcf.judges.anthropic_judge import AnthropicJudge
    from pcf.judges.openai_judge import OpenAIJudge

OPENAI_ENDPOINT = "/v1/chat/completions"
TOKEN_FIELD = "pcf_submission"  # noqa: S105 (a metadata key, not a secret)
OPENAI_ENDED = ("completed", "failed", "expired", "cancelled")

T = TypeVar("T")


class BatchAPIError(RuntimeError):
    """A batch endpoint refused or could not be reached; the message names the cause."""


class BatchLostError(BatchAPIError):
    """The provider answers 404 for a batch (or its results): it no longer knows it, or this
    key or server is not the one it was sent with."""

    def __init__(self, batch_id: str, message: str) -> None:
        super().__init__(f"the provider does not know batch {batch_id} ({message})")
        self.batch_id = batch_id


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the provider reports it (``status`` in the provider's words; ``ended``: its
    results can be read; ``error``: why the whole batch failed, when it did)."""

    batch_id: str
    status: str
    ended: bool
    total: int
    finished: int
    failed: int
    error: str | None = None


@dataclass(frozen=True)
class BatchResult:
    """One request's outcome: a reply, or an error as ``reason: message``."""

    custom_id: str
    reply: JudgeReply | None = None
    error: str | None = None


async def _sdk_call(call: Awaitable[T], judge: ProviderJudge, batch_id: str | None = None) -> T:
    """Await a call of ``judge``'s SDK, its errors as :class:`BatchAPIError` without the key (a
    404 for ``batch_id`` as :class:`BatchLostError`)."""
    sdk, key = judge.sdk, judge.secret
    try:
        return await call
    except sdk.APIStatusError as err:
        message = str(getattr(err, "message", err))
        if batch_id is not None and err.status_code == 404:
            lost = redact(f"HTTP 404: {message}", [key, *configured_keys()])
            raise BatchLostError(batch_id, lost) from None
        raise BatchAPIError(str(status_error(err.status_code, message, {}, key))) from None
    except sdk.APIError as err:
        raise BatchAPIError(redact(f"batch API: {err}", [key, *configured_keys()])) from None


async def _first_id(
    listing: AsyncIterable[Any],
    match: Callable[[Any], bool],
    judge: ProviderJudge,
    since: Any = None,
) -> str | None:
    """The id of the first listed object ``match`` accepts, none created before ``since`` (the
    provider lists the newest first)."""

    async def first() -> str | None:
        async for found in listing:
            if since is not None and found.created_at < since:
                return None
            if match(found):
                return str(found.id)
        return None

    return await _sdk_call(first(), judge)


def _reply_or_error(custom_id: str, parse: Callable[[], JudgeReply]) -> BatchResult:
    try:
        return BatchResult(custom_id, reply=parse())
    except JudgeError as err:
        return BatchResult(custom_id, error=str(err))


@dataclass(frozen=True)
class OpenAIBatches:
    """OpenAI's Batch API (and compatible servers) over the judge's key, server and SDK client:
    upload a JSONL file, create the batch."""

    judge: OpenAIJudge
    max_requests = 50_000
    max_bytes = 200_000_000

    def entry(self, custom_id: str, request: JudgeRequest) -> dict[str, Any]:
        """One line of the batch's input file."""
        body = self.judge.body(request)
        return {"custom_id": custom_id, "method": "POST", "url": OPENAI_ENDPOINT, "body": body}

    async def submit(
        self,
        token: str,
        entries: Sequence[dict[str, Any]],
        *,
        file_id: str | None,
        on_file: Callable[[str], None],
    ) -> str:
        """Create the batch (uploading its file unless ``file_id`` is given, then telling
        ``on_file``); its id."""
        client = self.judge.client()
        name = f"pcf-{token}.jsonl"
        if file_id is None:
            files = client.files.list(purpose="batch")
            file_id = await _first_id(files, lambda file: file.filename == name, self.judge)
        if file_id is None:
            data = "".join(json.dumps(e) + "\n" for e in entries).encode()
            upload = client.files.create(file=(name, data, "application/jsonl"), purpose="batch")
            file_id = (await _sdk_call(upload, self.judge)).id
        on_file(file_id)
        batch = await _sdk_call(
            client.batches.create(
                input_file_id=file_id,
                endpoint=OPENAI_ENDPOINT,
                completion_window="24h",
                metadata={TOKEN_FIELD: token},
            ),
            self.judge,
        )
        return batch.id

    async def find(
        self, token: str, *, created_after: datetime, size: int, claimed: set[str]
    ) -> str | None:
        """The id of the batch a killed submit of ``token`` created, or None."""
        batches = self.judge.client().batches.list(limit=100)
        return await _first_id(
            batches,
            lambda b: (b.metadata or {}).get(TOKEN_FIELD) == token,
            self.judge,
            created_after.timestamp(),
        )

    async def status(self, batch_id: str) -> BatchStatus:
        """The batch's state and counts."""
        retrieve = self.judge.client().batches.retrieve(batch_id)
        batch = await _sdk_call(retrieve, self.judge, batch_id)
        counts = batch.request_counts
        total, done, failed = (
            (counts.total, counts.completed, counts.failed) if counts else (0, 0, 0)
        )
        error = None
        if batch.status == "failed":
            messages = [
                e.message or e.code or "" for e in (batch.errors and batch.errors.data) or []
            ]
            error = "; ".join(m for m in messages if m) or "the batch failed"
        ended = batch.status in OPENAI_ENDED
        return BatchStatus(batch_id, batch.status, ended, total, done + failed, failed, error)

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel the batch (requests not run yet will not be)."""
        await _sdk_call(self.judge.client().batches.cancel(batch_id), self.judge, batch_id)

    async def results(self, batch_id: str) -> list[BatchResult]:
        """Every result of an ended batch: its output file and its error file."""
        client = self.judge.client()
        batch = await _sdk_call(client.batches.retrieve(batch_id), self.judge, batch_id)
        out: list[BatchResult] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await _sdk_call(client.files.content(file_id), self.judge, batch_id)
                out += [
                    self._result(json.loads(line))
                    for line in content.text.splitlines()
                    if line.strip()
                ]
        return out

    def _result(self, line: dict[str, Any]) -> BatchResult:
        custom_id = str(line.get("custom_id"))
        error, response = line.get("error"), line.get("response") or {}
        if error:
            return BatchResult(
                custom_id, error=f"{error.get('code') or 'batch_error'}: {error.get('message')}"
            )
        status, body = response.get("status_code"), response.get("body")
        if status != 200:
            message = (body.get("error") or {}).get("message", "") if isinstance(body, dict) else ""

            error = status_error(int(status or 500), message, {}, self.judge.secret)
            return BatchResult(custom_id, error=str(error))
        from pcf.judges.openai_judge import chat_reply  # noqa: PLC0415 - slow import

        return _reply_or_error(custom_id, lambda: chat_reply(body, 0.0))


@dataclass(frozen=True)
class AnthropicBatches:
    """Anthropic's Message Batches, requests sent inline: at most 100,000 requests and 256 MB.
    Its batches carry no metadata: a killed submit's batch is found by time and size."""

    judge: AnthropicJudge
    max_requests = 100_000
    max_bytes = 256_000_000

    def entry(self, custom_id: str, request: JudgeRequest) -> dict[str, Any]:
        """One request of the batch."""
        return {"custom_id": custom_id, "params": self.judge.params(request)}

    async def submit(self, token: str, entries: Sequence[dict[str, Any]], **_: object) -> str:
        """Create the batch; its id (``token``, ``file_id`` and ``on_file`` are not used)."""
        create = self.judge.client().messages.batches.create(requests=list(entries))
        return (await _sdk_call(create, self.judge)).id

    async def find(
        self, token: str, *, created_after: datetime, size: int, claimed: set[str]
    ) -> str | None:
        """A batch of ``size`` requests created since ``created_after`` and not ``claimed``."""
        batches = self.judge.client().messages.batches.list(limit=100)
        return await _first_id(
            batches,
            lambda b: b.id not in claimed and _counts(b)[0] == size,
            self.judge,
            created_after,
        )

    async def status(self, batch_id: str) -> BatchStatus:
        """The batch's state and counts."""
        client = self.judge.client()
        retrieve = client.messages.batches.retrieve(batch_id)
        batch = await _sdk_call(retrieve, self.judge, batch_id)
        total, finished, failed = _counts(batch)
        ended = batch.processing_status == "ended"
        return BatchStatus(batch_id, batch.processing_status, ended, total, finished, failed)

    async def cancel(self, batch_id: str) -> None:
        """Ask the provider to cancel the batch (requests not run yet will not be)."""
        cancel = self.judge.client().messages.batches.cancel(batch_id)
        await _sdk_call(cancel, self.judge, batch_id)

    async def results(self, batch_id: str) -> list[BatchResult]:
        """Every result of an ended batch."""
        from pcf.judges.anthropic_judge import message_reply  # noqa: PLC0415 - slow import

        client = self.judge.client()

        async def read() -> list[BatchResult]:
            out = []
            async for line in await client.messages.batches.results(batch_id):
                result = line.result
                if result.type == "succeeded":
                    reply = partial(message_reply, result.message, 0.0)
                    out.append(_reply_or_error(line.custom_id, reply))
                    continue
                if result.type == "errored":
                    error = f"batch_error: {result.error.error.type}: {result.error.error.message}"
                else:
                    reason = "batch_expired" if result.type == "expired" else "batch_cancelled"
                    error = f"{reason}: the request was {result.type}"
                out.append(BatchResult(line.custom_id, error=error))
            return out

        return await _sdk_call(read(), self.judge, batch_id)


def _counts(batch: Any) -> tuple[int, int, int]:
    """An Anthropic batch's requests: in all, finished and failed."""
    c = batch.request_counts
    failed = c.errored + c.canceled + c.expired
    return c.processing + c.succeeded + failed, c.succeeded + failed, failed


BatchClient = OpenAIBatches | AnthropicBatches


def batch_client(judge: object) -> BatchClient:
    """The batch client for a provider judge, or a ValueError when its backend has none. Only
    the judge's own SDK is loaded (with the judge already): the other costs a second or more."""
    backend = getattr(judge, "backend", type(judge).__name__)
    if backend == "openai":
        from pcf.judges.openai_judge import OpenAIJudge  # noqa: PLC0415 - slow import

        if isinstance(judge, OpenAIJudge):
            return OpenAIBatches(judge)
    if backend == "anthropic":
        from pcf.judges.anthropic_judge import AnthropicJudge  # noqa: PLC0415 - slow import

        if isinstance(judge, AnthropicJudge):
            return AnthropicBatches(judge)
    raise ValueError(
        f"provider batches (--batch) are for openai/ and anthropic/ models; {backend}/ models "
        "are judged call by call: leave out --batch"
    )
