"""Helpers shared by the judges that call a provider's HTTP API through its SDK."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from pcf.judges.base import (
    JudgeError,
    JudgeReply,
    JudgeRequest,
    configured_keys,
    env_key,
    key_names,
    redact,
)
from pcf.judges.servers import OWN_SERVERS, judge_server

PLACEHOLDER_KEY = "not-needed"
"""Sent to a self-hosted server (vLLM, Ollama...) that wants no key when none is set."""


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``retry-after``
    (seconds or an HTTP date); None when neither header is usable."""
    for name, per_second in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            return max(0.0, float(headers[name]) / per_second)
        except (KeyError, ValueError):
            pass
    try:
        when = email.utils.parsedate_to_datetime(headers["retry-after"])
    except (KeyError, TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def status_error(status: int, message: str, headers: Mapping[str, str], secret: str) -> JudgeError:
    """The :class:`JudgeError` for an HTTP error status (429, 408 and 5xx retryable), with
    ``secret`` and any other key masked."""
    text = redact(f"HTTP {status}: {message}", [secret, *configured_keys()])
    if status == 408:
        return JudgeError("timeout", text, retryable=True, answered=True)
    if status == 429 or status >= 500:
        reason = "rate_limited" if status == 429 else "server_error"
        wait = retry_after_seconds(headers)
        return JudgeError(reason, text, retryable=True, retry_after=wait, answered=True)
    return JudgeError("client_error", text, retryable=False, answered=True)


class ProviderJudge:
    """What the provider judges share: the key, the seed and one SDK client per event loop.
    The ``complete`` here is for the SDKs whose error classes share names (openai, anthropic)."""

    backend: str
    sdk: Any
    sdk_client: Any  # the SDK's async client class
    http_client: Any  # the SDK's HTTP client class
    _send: Callable[[JudgeRequest], Awaitable[object]]
    _reply: Callable[[object, float], JudgeReply]
    _status_message: Callable[[Any], str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        seed: int | None = None,
    ) -> None:
        self.model, self.seed, self.timeout = model, seed, timeout
        self.address = _address(self.backend, base_url)
        key = api_key or env_key(self.backend) or (None if base_url is None else PLACEHOLDER_KEY)
        if key is None:
            raise ValueError(f"{key_names(self.backend)} is not set")
        self._key = key
        self._new = partial(self._new_client, key, base_url, timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None

    @classmethod
    def _new_client(cls, api_key: str, base_url: str | None, timeout: float) -> Any:
        # An http_client of our own: the SDK's default one, when garbage-collected while a later
        # event loop runs, tries to close itself on that loop and logs "Event loop is closed".
        http_client = cls.http_client(timeout=timeout)
        return cls.sdk_client(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=http_client,
        )

    def client(self) -> Any:
        """The SDK client of the running event loop (a connection pool cannot move between
        loops), built on first use in that loop."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = self._new(), loop
        return self._client

    @property
    def secret(self) -> str:
        """The API key, to mask wherever the provider might echo it."""
        return self._key

    async def aclose(self) -> None:
        """Close the HTTP connections opened in the running event loop."""
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await (client.aclose() if hasattr(client, "aclose") else client.close())

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        sdk = self.sdk
        start = time.perf_counter()
        try:
            answer = await self._send(request)
        except sdk.APIStatusError as err:
            raise self._status_error(
                err.status_code, self._status_message(err), err.response.headers
            ) from None  # the SDK error repeats the provider message, which may echo the key
        except sdk.APITimeoutError as err:
            if _refused(err):  # the aiohttp transport reports a refused connection as a timeout
                raise self._connection_error(_cause(err)) from err
            raise self._timed_out() from err
        except sdk.APIConnectionError as err:
            raise self._connection_error(_cause(err)) from err
        # ValueError: not JSON, or an integer past Python's 4,300 digits; RecursionError: too deep
        except (sdk.APIResponseValidationError, ValueError, RecursionError) as err:
            raise JudgeError("bad_response", "invalid response body", retryable=True) from err
        return self._reply(answer, time.perf_counter() - start)

    def _status_error(self, status: int, message: str, headers: Mapping[str, str]) -> JudgeError:
        """:func:`status_error`, the server's message followed by its address."""
        return status_error(status, f"{message} (from {self.address})", headers, self._key)

    def _timed_out(self) -> JudgeError:
        """A request that got no answer within the timeout: the message says how to wait longer."""
        return JudgeError(
            "timeout",
            f"no answer from {self.address} within {self.timeout:g} s; raise the wait with "
            "--timeout SECONDS or PCF_TIMEOUT",
            retryable=True,
        )

    def _connection_error(self, cause: str) -> JudgeError:
        return JudgeError("connection_error", f"{cause} to {self.address}", retryable=True)


def _address(backend: str, base_url: str | None) -> str:
    """The server a judge's requests go to, for its messages."""
    return judge_server(backend, base_url) or OWN_SERVERS.get(backend, "the provider's API")


def _refused(err: BaseException) -> bool:
    """Whether a connection error (refused, reset) lies under ``err``."""
    cause = err.__cause__ or err.__context__
    while cause is not None:
        if isinstance(cause, ConnectionError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    return f"Connection error ({type(cause).__name__})" if cause else "Connection error"
