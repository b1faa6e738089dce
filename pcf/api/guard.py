"""What every request passes before a route: a body no larger than the limit, a token read
again in the database (:func:`pcf.labelling.tokens.token_user`), its rights for the route,
and its share of requests (429 with ``Retry-After`` past it)."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pcf.access import Permission
from pcf.labelling.tokens import TokenError, TokenUser, token_user
from pcf.store import get_engine, session_scope

MAX_BODY_ENV = "PCF_API_MAX_BODY_BYTES"
MAX_BODY_BYTES = 10 * 1024 * 1024
RATE_ENV = "PCF_API_RATE"
"""Requests per second a token may make on average (bursts of ten times that, at least one)."""
RATE = 50.0

bearer = HTTPBearer(auto_error=False, description="A token of `pcf tokens create` (pcf_...)")


def _number(name: str, default: float) -> float:
    """A positive number from the environment variable ``name``, else ``default``."""
    value = os.environ.get(name, "").strip()
    try:
        number = float(value) if value else default
    except ValueError:
        number = -1.0
    if not number > 0:
        raise ValueError(f"{name}={value!r}: give a positive number")
    return number


class BodyLimit:
    """ASGI middleware: a request body past ``PCF_API_MAX_BODY_BYTES`` (10 MiB by default) is
    refused with 413, at once when its length is declared, else as soon as it passes it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.limit = int(_number(MAX_BODY_ENV, MAX_BODY_BYTES))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"the body is larger than {self.limit} bytes ({MAX_BODY_ENV}); send less at once"
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limit:
            from pcf.api.problem_details import PROBLEM_JSON  # noqa: PLC0415 - no cycle at import

            body = {"type": "about:blank", "title": "Content Too Large", "status": 413}
            body |= {"detail": detail, "instance": scope.get("path", "")}
            response = JSONResponse(body, status_code=413, media_type=PROBLEM_JSON)
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, detail)  # a route's body is read before it answers
            return message

        await self.app(scope, counted, send)


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimit:
    """A token bucket per API token: ``rate`` requests a second, ``burst`` at once."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.buckets: dict[int, _Bucket] = {}
        self.lock = threading.Lock()

    def wait_s(self, token_id: int) -> float:
        """0 when the token may make a request now (and it is counted), else the seconds
        until it may."""
        now = time.monotonic()
        with self.lock:
            bucket = self.buckets.setdefault(token_id, _Bucket(self.burst, now))
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return (1 - bucket.tokens) / self.rate


_limits: dict[float, RateLimit] = {}


def rate_limit() -> RateLimit:
    """The server's limit at ``PCF_API_RATE`` (one per rate, for the process)."""
    rate = _number(RATE_ENV, RATE)
    return _limits.setdefault(rate, RateLimit(rate, burst=max(1.0, 10 * rate)))


def caller(permission: Permission | None = None) -> Callable[..., TokenUser]:
    """A dependency: who the request's token acts as, when it may ``permission`` (None: any
    usable token); 401 without one, 403 without the right, 429 past the token's rate."""

    def authenticated(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> TokenUser:
        if credentials is None:
            raise TokenError("this needs a token: Authorization: Bearer pcf_...")
        with session_scope(get_engine()) as session:
            user = token_user(credentials.credentials, session=session)
        if wait := rate_limit().wait_s(user.token_id):
            raise HTTPException(
                429,
                f"token {user.token_id} made too many requests; try again in "
                f"{math.ceil(wait)} s ({RATE_ENV})",
                headers={"Retry-After": str(math.ceil(wait))},
            )
        if permission is not None:
            user.require(permission)
        return user

    return authenticated
