"""A local, scripted HTTP server that speaks the OpenAI and Anthropic wire protocols.

Tests and benchmarks point the real SDKs at it: it answers ``POST /v1/chat/completions``
(and ``/chat/completions``) like OpenAI's Chat Completions API and ``POST /v1/messages``
like Anthropic's Messages API, with bodies, headers and error JSON shaped like the real
ones. What it answers is scripted by a ``responder`` callable::

    with WireServer(lambda req: Scripted.error(429, retry_after="2")) as server:
        judge = OpenAIJudge("gpt-test", base_url=server.openai_base_url)

Nothing here reaches the network beyond 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

WireProtocol = Literal["openai", "anthropic"]
Kind = Literal["answer", "refusal", "truncated", "error", "broken"]

DEFAULT_JSON_TEXT = '{"ok": true}'

_ROUTES: dict[str, WireProtocol] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class JsonLiteral:
    """JSON text written into a reply's body as is: a value ``json.dumps`` cannot write (an
    integer of 5,000 digits), ``NaN``, or nesting deeper than a decoder follows."""

    text: str


TokenCount = int | JsonLiteral | None


@dataclass(frozen=True)
class Scripted:
    """What the server does with one request; build it with the class methods.

    Every action may be delayed by ``delay_s`` seconds (latency, or a client timeout).
    """

    kind: Kind
    text: str = ""
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    input_tokens: TokenCount = None
    output_tokens: TokenCount = None

    @classmethod
    def answer(
        cls,
        text: str,
        *,
        delay_s: float = 0.0,
        input_tokens: TokenCount = None,
        output_tokens: TokenCount = None,
    ) -> Scripted:
        """A normal completion whose content is ``text``; token counts are estimated if omitted.

        A count may be any integer (negative, 10**20) or a :class:`JsonLiteral`.
        """
        return cls(
            "answer", text, delay_s=delay_s, input_tokens=input_tokens, output_tokens=output_tokens
        )

    @classmethod
    def refusal(cls, text: str = "I can't help with that.", *, delay_s: float = 0.0) -> Scripted:
        """A refusal: OpenAI ``message.refusal``, Anthropic ``stop_reason == "refusal"``."""
        return cls("refusal", text, delay_s=delay_s)

    @classmethod
    def truncated(cls, text: str, *, delay_s: float = 0.0) -> Scripted:
        """A cut-off answer: ``finish_reason == "length"`` / ``stop_reason == "max_tokens"``."""
        return cls("truncated", text, delay_s=delay_s)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        retry_after: str | None = None,
        delay_s: float = 0.0,
    ) -> Scripted:
        """An error status with the provider's error JSON and an optional ``Retry-After`` value."""
        return cls("error", message, status=status, retry_after=retry_after, delay_s=delay_s)

    @classmethod
    def broken(
        cls, body: str = '{"id": "broken", "choices": [', *, delay_s: float = 0.0
    ) -> Scripted:
        """A ``200`` whose ``application/json`` body is sent as is (malformed by default)."""
        return cls("broken", body, delay_s=delay_s)


@dataclass(frozen=True)
class WireRequest:
    """One request as the responder sees it."""

    protocol: WireProtocol
    path: str
    body: dict[str, Any]
    index: int
    key: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def last_user_text(self) -> str:
        """The text of the last user message in the body."""
        return last_user_text(self.body)


Responder = Callable[[WireRequest], Scripted]


def message_key(text: str) -> str:
    """The key under which requests are counted: a short hash of the last user message."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a Chat Completions or Messages body."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(
                    block.get("text", "") for block in content if isinstance(block, dict)
                )
            return content if isinstance(content, str) else ""
    return ""


def fixed_json(text: str = DEFAULT_JSON_TEXT, *, delay_s: float = 0.0) -> Responder:
    """A responder that answers every request with the same (JSON) text."""
    action = Scripted.answer(text, delay_s=delay_s)
    return lambda _request: action


class WireServer:
    """A threaded local server; use it as a context manager.

    Attributes:
        base_url: ``http://127.0.0.1:PORT``, the Anthropic SDK's ``base_url``.
        openai_base_url: ``base_url + "/v1"``, the OpenAI SDK's ``base_url``.
    """

    def __init__(self, responder: Responder | None = None) -> None:
        self._responder = responder or fixed_json()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._received: list[WireRequest] = []
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.wire = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # how long close() may wait for the loop
            name="wire-server",
            daemon=True,
        )
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.openai_base_url = f"{self.base_url}/v1"

    def start(self) -> WireServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; delayed answers still pending are dropped."""
        self._stopping.set()
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def request_count(self) -> int:
        """How many protocol requests were received."""
        with self._lock:
            return len(self._received)

    @property
    def counts(self) -> Counter[str]:
        """A copy of the per-key request counts (keys from :func:`message_key`)."""
        with self._lock:
            return Counter(self._counts)

    @property
    def received(self) -> list[WireRequest]:
        """A copy of the requests received, in arrival order."""
        with self._lock:
            return list(self._received)

    def _dispatch(
        self, protocol: WireProtocol, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Scripted:
        key = message_key(last_user_text(body))
        with self._lock:
            request = WireRequest(protocol, path, body, len(self._received), key, headers)
            self._received.append(request)
            self._counts[key] += 1
        return self._responder(request)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default of 5 drops connections under a burst of clients
    wire: WireServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: request lines would only clutter test output."""

    def do_POST(self) -> None:
        """Answer one protocol request as scripted."""
        wire = self.server.wire
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        protocol = _ROUTES.get(path)
        if protocol is None:
            self._send_json(404, _openai_error(404, f"Unknown path {path}"), {})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(
                400, _error_body(protocol, 400, "Request body is not a JSON object"), {}
            )
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            action = wire._dispatch(protocol, path, body, headers)
        except Exception as exc:  # a broken script should fail the call, not hang it
            self._send_json(500, _error_body(protocol, 500, f"responder failed: {exc!r}"), {})
            return
        if action.delay_s > 0 and wire._stopping.wait(action.delay_s):
            self.close_connection = True  # the server is closing: drop the answer
            return
        self._respond(protocol, body, action)

    def _respond(self, protocol: WireProtocol, body: dict[str, Any], action: Scripted) -> None:
        request_id = f"req_{uuid.uuid4().hex}"
        id_header = "x-request-id" if protocol == "openai" else "request-id"
        headers = {id_header: request_id}
        if action.kind == "broken":
            self._send(200, action.text.encode(), headers)
        elif action.kind == "error":
            if action.retry_after is not None:
                headers["Retry-After"] = action.retry_after
            message = action.text or f"Scripted error {action.status}"
            self._send_json(action.status, _error_body(protocol, action.status, message), headers)
        elif protocol == "openai":
            self._send_json(200, _openai_completion(body, action), headers)
        else:
            self._send_json(200, _anthropic_message(body, action), headers)

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        self._send(status, _dumps(payload).encode(), headers)

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. it timed out)


def _dumps(payload: dict[str, Any]) -> str:
    """``payload`` as JSON text, with each :class:`JsonLiteral` written as is."""
    literals: list[str] = []

    def placeholder(value: object) -> str:
        if not isinstance(value, JsonLiteral):
            raise TypeError(f"{type(value).__name__} is not JSON")
        literals.append(value.text)
        return f"<literal {len(literals) - 1}>"

    text = json.dumps(payload, default=placeholder)
    for index, literal in enumerate(literals):
        text = text.replace(f'"<literal {index}>"', literal, 1)
    return text


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _usage(body: dict[str, Any], action: Scripted) -> tuple[int | JsonLiteral, int | JsonLiteral]:
    prompt = json.dumps(body.get("messages", [])) + str(body.get("system", ""))
    input_tokens = (
        action.input_tokens if action.input_tokens is not None else _estimate_tokens(prompt)
    )
    output_tokens = (
        action.output_tokens if action.output_tokens is not None else _estimate_tokens(action.text)
    )
    return input_tokens, output_tokens


def _openai_completion(body: dict[str, Any], action: Scripted) -> dict[str, Any]:
    prompt_tokens, completion_tokens = _usage(body, action)
    refused = action.kind == "refusal"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:29]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if refused else action.text,
                    "refusal": action.text if refused else None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "length" if action.kind == "truncated" else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": _total(prompt_tokens, completion_tokens),
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_wire_server",
    }


def _total(first: int | JsonLiteral, second: int | JsonLiteral) -> int | JsonLiteral:
    """The sum of two counts; a literal one stands for the total too."""
    if isinstance(first, JsonLiteral):
        return first
    return second if isinstance(second, JsonLiteral) else first + second


def _anthropic_message(body: dict[str, Any], action: Scripted) -> dict[str, Any]:
    input_tokens, output_tokens = _usage(body, action)
    stop_reason = {"refusal": "refusal", "truncated": "max_tokens"}.get(action.kind, "end_turn")
    refused = action.kind == "refusal"
    return {
        "id": f"msg_01{uuid.uuid4().hex[:22]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": [] if refused else [{"type": "text", "text": action.text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "stop_details": (
            {"type": "refusal", "category": None, "explanation": action.text} if refused else None
        ),
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


def _error_body(protocol: WireProtocol, status: int, message: str) -> dict[str, Any]:
    if protocol == "openai":
        return _openai_error(status, message)
    error_type = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_{uuid.uuid4().hex}",
    }


def _openai_error(status: int, message: str) -> dict[str, Any]:
    error_type = _OPENAI_ERROR_TYPES.get(status, "server_error")
    code = _OPENAI_ERROR_CODES.get(status)
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}
