"""Helpers shared by the judges that call a provider's HTTP API through its SDK."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from pcf.judges.base import (
    JudgeError,
    JudgeReply,
    JudgeRequest,
    configured_keys,
    env_key,
    key_names,
    redact,
)

PLACEHOLDER_KEY = "not-needed"
"""Sent to a self-hosted server (vLLM, Ollama...) that wants no key when none is set."""


def resolve_key(api_key: str | None, backend: str, base_url: str | None) -> str:
    """The key to use: the explicit one, else the backend's variable (:func:`env_key`), else a
    placeholder for a custom URL.

    Raises:
        ValueError: no key is set and the provider's own endpoint would be called.
    """
    key = api_key or env_key(backend)
    if key:
        return key
    if base_url is not None:
        return PLACEHOLDER_KEY
    raise ValueError(f"{key_names(backend)} is not set")


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``retry-after``.

    ``retry-after`` may hold seconds or an HTTP date; None when neither header is usable.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def status_error(status: int, message: str, headers: Mapping[str, str], secret: str) -> JudgeError:
    """The :class:`JudgeError` for an HTTP error status from the provider.

    429 is ``rate_limited``, 408 ``timeout`` and 5xx ``server_error``, all retryable (with
    the provider's ``retry_after`` when it sent one); any other status is a non-retryable
    ``client_error``. ``secret`` and any other key is masked in the message (:func:`redact`).
    """
    text = redact(f"HTTP {status}: {message}", [secret, *configured_keys()])
    if status == 429:
        return JudgeError(
            "rate_limited", text, retryable=True, retry_after=retry_after_seconds(headers)
        )
    if status == 408:
        return JudgeError("timeout", text, retryable=True)
    if status >= 500:
        return JudgeError(
            "server_error", text, retryable=True, retry_after=retry_after_seconds(headers)
        )
    return JudgeError("client_error", text, retryable=False)


class AsyncClosable(Protocol):
    """An SDK client: ``openai.AsyncOpenAI`` or ``anthropic.AsyncAnthropic`` (google-genai's
    ``AsyncClient`` closes with ``aclose``)."""

    async def close(self) -> None:
        """Close the client's connection pool."""
        ...


Client = TypeVar("Client", bound=AsyncClosable)


class PerLoop(Generic[Client]):
    """One SDK client per running event loop: a connection pool cannot move between loops.

    A judge reused under a new ``asyncio.run`` gets a fresh client instead of failing with
    "Event loop is closed".
    """

    def __init__(self, factory: Callable[[], Client]) -> None:
        self._factory = factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None

    def get(self) -> Client:
        """The client for the running loop, built on first use in that loop."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self._factory()
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the running loop's client, if there is one."""
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await (client.aclose() if hasattr(client, "aclose") else client.close())


class ProviderJudge:
    """What the provider judges share: the key, the seed and one SDK client per event loop.

    Subclasses set ``backend`` and implement ``_new_client`` and ``complete``, or set ``sdk``
    (``openai`` or ``anthropic``: their error classes share names) and implement ``_send``,
    ``_reply`` and ``_status_message`` for the ``complete`` here. The key comes
    from ``api_key`` or the backend's variables (:data:`~pcf.judges.base.KEY_ENV`); a
    placeholder is used for a custom ``base_url`` when neither is set (self-hosted servers
    need none). ``seed`` is sent where the provider takes one.

    Raises:
        ValueError: no key is set and no ``base_url`` is given.
    """

    backend: str
    sdk: Any

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        seed: int | None = None,
    ) -> None:
        self.model, self.seed = model, seed
        self._key = resolve_key(api_key, self.backend, base_url)
        self._clients = PerLoop(partial(self._new_client, self._key, base_url, timeout))

    @staticmethod
    def _new_client(api_key: str, base_url: str | None, timeout: float) -> Any:
        raise NotImplementedError

    def client(self) -> Any:
        """The SDK client of the running event loop."""
        return self._clients.get()

    @property
    def secret(self) -> str:
        """The API key, to mask wherever the provider might echo it."""
        return self._key

    async def aclose(self) -> None:
        """Close the HTTP connections opened in the running event loop."""
        await self._clients.aclose()

    async def _send(self, request: JudgeRequest) -> object:
        raise NotImplementedError

    @staticmethod
    def _reply(answer: object, latency: float) -> JudgeReply:
        raise NotImplementedError

    @staticmethod
    def _status_message(err: Any) -> str:
        raise NotImplementedError

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one request or raise :class:`JudgeError`."""
        sdk = self.sdk
        start = time.perf_counter()
        try:
            answer = await self._send(request)
        except sdk.APIStatusError as err:
            raise status_error(
                err.status_code, self._status_message(err), err.response.headers, self._key
            ) from None  # the SDK error repeats the provider message, which may echo the key
        except sdk.APITimeoutError as err:
            if _refused(err):  # the aiohttp transport reports a refused connection as a timeout
                raise JudgeError("connection_error", _cause(err), retryable=True) from err
            raise JudgeError("timeout", "request timed out", retryable=True) from err
        except sdk.APIConnectionError as err:
            raise JudgeError("connection_error", _cause(err), retryable=True) from err
        # ValueError: not JSON, or an integer past Python's 4,300 digits; RecursionError: too deep
        except (sdk.APIResponseValidationError, ValueError, RecursionError) as err:
            raise JudgeError("bad_response", "invalid response body", retryable=True) from err
        return self._reply(answer, time.perf_counter() - start)


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
