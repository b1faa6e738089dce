"""A local, scripted HTTP server that speaks the OpenAI, Anthropic and Gemini wire protocols.

Tests and benchmarks point the real SDKs at it: it answers ``POST /v1/chat/completions``
(and ``/chat/completions``) like OpenAI's Chat Completions API, ``POST
/openai/deployments/{deployment}/chat/completions?api-version=...`` like Azure OpenAI's (404
without an API version, as Azure), ``POST /v1/messages`` like Anthropic's Messages API and
``POST /v1beta/models/{model}:generateContent`` (or ``/v1/...``) like Gemini's API, with
bodies, headers and error JSON shaped like the real ones. What it answers is scripted by a
``responder`` callable::

    with WireServer(lambda req: Scripted.error(429, retry_after="2")) as server:
        judge = OpenAIJudge("gpt-test", base_url=server.openai_base_url)

It also speaks both batch APIs (:class:`Batches`): OpenAI's files upload and content
download and batches create, retrieve, list and cancel; Anthropic's message batches create,
retrieve, list, results and cancel. A batch's requests are answered by the same responder
when the batch is created (that is when a request is paid), with ``path`` set to the batch
endpoint; a batch reports ``in_progress`` for its first ``batch_polls`` retrievals, then ends.
``Scripted.expired()`` is a request the batch did not reach in time, ``fail_batch`` makes a
whole batch fail (none of its requests run), and ``stall`` (``{endpoint: n}``) holds every
request to an endpoint after the first ``n`` until the server closes, for kill tests:
``files.create`` (the file is stored, its id not sent), ``before.create`` (the batch is not
created), ``batches.create`` (created, its id not sent), ``results`` (a download).
``server.batches.lose(batch_id)`` makes the server forget a batch, as a provider that lost
or deleted it: its status, results and cancel answer 404 (``results_only``: its results).
``prompt_tokens=N`` bills every answer N prompt tokens, whatever its request's size (a
provider that bills more than a request's bytes).

Nothing here reaches the network beyond 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

WireProtocol = Literal["openai", "anthropic", "google"]
Kind = Literal["answer", "refusal", "truncated", "error", "broken", "expired"]

DEFAULT_JSON_TEXT = '{"ok": true}'

_ROUTES: dict[str, WireProtocol] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}
_AZURE = re.compile(r"^/openai/deployments/[^/]+/chat/completions$")
_GEMINI = re.compile(r"^/v1(beta)?/models/[^/:]+:generateContent$")
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
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
    def expired(cls) -> Scripted:
        """In a batch: a request the batch did not reach before it expired (not paid)."""
        return cls("expired")

    @classmethod
    def broken(
        cls, body: str = '{"id": "broken", "choices": [', *, status: int = 200, delay_s: float = 0.0
    ) -> Scripted:
        """A ``status`` (``200``) whose ``application/json`` body is sent as is (malformed by
        default; a server's own error body with an error status)."""
        return cls("broken", body, status=status, delay_s=delay_s)


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

    @property
    def system_text(self) -> str:
        """The system message of the body: Chat Completions' first system message, the
        Messages API's ``system``, or Gemini's ``systemInstruction``."""
        if isinstance(system := self.body.get("system"), str):
            return system
        if isinstance(instruction := self.body.get("systemInstruction"), dict):
            return _text_of(instruction.get("parts"))
        for message in self.body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "system":
                return message.get("content") or ""
        return ""


Responder = Callable[[WireRequest], Scripted]


def message_key(text: str) -> str:
    """The key under which requests are counted: a short hash of the last user message."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a Chat Completions, Messages or Gemini body."""
    for message in reversed(_messages(body)):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content", message.get("parts"))
            return content if isinstance(content, str) else _text_of(content)
    return ""


def _messages(body: dict[str, Any]) -> list[Any]:
    """The messages of a Chat Completions or Messages body, or a Gemini body's ``contents``."""
    return body.get("messages") or body.get("contents") or []


def _text_of(blocks: object) -> str:
    """The text of a list of content blocks (Messages) or parts (Gemini)."""
    if not isinstance(blocks, list):
        return ""
    return "".join(block.get("text", "") for block in blocks if isinstance(block, dict))


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

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        batch_polls: int = 0,
        fail_batch: Callable[[int], bool] | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        self._responder = responder or fixed_json()
        self.prompt_tokens = prompt_tokens
        self.batches = Batches(self, batch_polls, fail_batch or (lambda _index: False))
        self.stall: dict[str, int] = {}
        self.stalled: list[str] = []
        self._passed: Counter[str] = Counter()
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
        action = self._responder(request)
        if self.prompt_tokens is not None and action.kind in ("answer", "refusal", "truncated"):
            action = dataclasses.replace(action, input_tokens=self.prompt_tokens)
        return action


_OPENAI_ENDED = ("completed", "failed", "expired", "cancelled")
_EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


class Batches:
    """The batch endpoints' state: uploaded files and batches of both providers."""

    def __init__(self, wire: WireServer, polls: int, fail: Callable[[int], bool]) -> None:
        self.wire, self.polls, self.fail = wire, polls, fail
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.openai: dict[str, dict[str, Any]] = {}
        self.anthropic: dict[str, dict[str, Any]] = {}
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.retrievals: Counter[str] = Counter()

    @property
    def created(self) -> int:
        """Batches created, of both providers."""
        with self.wire._lock:
            return len(self.openai) + len(self.anthropic)

    def lose(self, batch_id: str, *, results_only: bool = False) -> None:
        """Forget a batch (or, with ``results_only``, its results): the endpoints answer 404."""
        with self.wire._lock:
            if batch_id in self.openai:
                batch = self.openai[batch_id]
                for key in ("output_file_id", "error_file_id"):
                    self.contents.pop(batch.get(key) or (batch.get("final") or {}).get(key), None)
                if not results_only:
                    del self.openai[batch_id]
            else:
                del self.results[batch_id]
                if not results_only:
                    del self.anthropic[batch_id]

    def _answer(self, protocol: WireProtocol, path: str, body: dict[str, Any]) -> Scripted:
        return self.wire._dispatch(protocol, path, body, {})

    # OpenAI
    def upload(self, filename: str, purpose: str, data: bytes) -> dict[str, Any]:
        file = {
            "id": f"file-{uuid.uuid4().hex[:24]}",
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        with self.wire._lock:
            self.files[file["id"]] = file
            self.contents[file["id"]] = data
        return file

    def _store_file(self, name: str, lines: list[dict[str, Any]]) -> str | None:
        if not lines:
            return None
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return self.upload(name, "batch_output", data)["id"]

    def create_openai(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.wire._lock:
            index = len(self.openai) + len(self.anthropic)
            data = self.contents.get(str(body.get("input_file_id")), b"")
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        batch_id = f"batch_{uuid.uuid4().hex[:24]}"
        now = int(time.time())
        batch: dict[str, Any] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body.get("endpoint"),
            "errors": None,
            "input_file_id": body.get("input_file_id"),
            "completion_window": body.get("completion_window"),
            "status": "in_progress",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": now,
            "expires_at": now + 86400,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": body.get("metadata"),
        }
        if self.fail(index):
            batch["status"] = "failed"
            batch["request_counts"]["failed"] = len(lines)
            message = "Scripted whole-batch failure: the input file was refused."
            errors = [{"code": "invalid_request", "message": message, "line": 1, "param": None}]
            batch["errors"] = {"object": "list", "data": errors}
        else:
            out, err = self._run_openai(lines)
            batch["final"] = {
                "status": "expired" if any(e["error"] for e in err) else "completed",
                "output_file_id": self._store_file(f"{batch_id}_output.jsonl", out),
                "error_file_id": self._store_file(f"{batch_id}_error.jsonl", err),
                "request_counts": {"total": len(lines), "completed": len(out), "failed": len(err)},
            }
        with self.wire._lock:
            self.openai[batch_id] = batch
        return self.openai_view(batch)

    def _run_openai(self, lines: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
        out, err = [], []
        for line in lines:
            action = self._answer("openai", "/v1/batches", line.get("body") or {})
            result: dict[str, Any] = {"id": f"batch_req_{uuid.uuid4().hex[:24]}"}
            result |= {"custom_id": line.get("custom_id"), "response": None, "error": None}
            if action.kind == "expired":
                result["error"] = {"code": "batch_expired", "message": _EXPIRED_MESSAGE}
                err.append(result)
                continue
            if action.kind == "error":
                message = action.text or f"Scripted error {action.status}"
                response_body: Any = _openai_error(action.status, message)
                status = action.status
            elif action.kind == "broken":
                response_body, status = action.text, 200
            else:
                response_body, status = _openai_completion(line.get("body") or {}, action), 200
            result["response"] = {
                "status_code": status,
                "request_id": f"req_{uuid.uuid4().hex}",
                "body": response_body,
            }
            (out if status == 200 else err).append(result)
        return out, err

    def openai_view(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in batch.items() if key != "final"}

    def retrieve_openai(self, batch_id: str) -> dict[str, Any] | None:
        with self.wire._lock:
            batch = self.openai.get(batch_id)
            if batch is None:
                return None
            self.retrievals[batch_id] += 1
            if batch["status"] == "in_progress" and self.retrievals[batch_id] > self.polls:
                batch |= batch.pop("final")
                batch["completed_at"] = int(time.time())
            return self.openai_view(batch)

    def cancel_openai(self, batch_id: str) -> dict[str, Any] | None:
        with self.wire._lock:
            batch = self.openai.get(batch_id)
            if batch is None:
                return None
            if batch["status"] not in _OPENAI_ENDED:  # cancelled before any request ended
                batch.pop("final")
                total = batch["request_counts"]["total"]
                batch["status"] = "cancelled"
                batch["request_counts"] = {"total": total, "completed": 0, "failed": total}
            return self.openai_view(batch)

    # Anthropic
    def create_anthropic(self, body: dict[str, Any], base_url: str) -> dict[str, Any]:
        requests = body.get("requests") or []
        with self.wire._lock:
            index = len(self.openai) + len(self.anthropic)
        batch_id = f"msgbatch_{uuid.uuid4().hex[:24]}"
        now = time.time()
        fail = self.fail(index)
        results = []
        for request in requests:
            custom_id, params = request.get("custom_id"), request.get("params") or {}
            if fail:
                error = {"type": "api_error", "message": "Scripted whole-batch failure"}
                result: dict[str, Any] = {"type": "errored", "error": _anthropic_error(error)}
            else:
                result = self._run_anthropic(params)
            results.append({"custom_id": custom_id, "result": result})
        batch = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": _anthropic_counts(results, ended=False),
            "created_at": _rfc3339(now),
            "expires_at": _rfc3339(now + 86400),
            "ended_at": None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
        }
        with self.wire._lock:
            self.anthropic[batch_id] = batch | {"base_url": base_url}
            self.results[batch_id] = results
        return batch

    def _run_anthropic(self, params: dict[str, Any]) -> dict[str, Any]:
        action = self._answer("anthropic", "/v1/messages/batches", params)
        if action.kind == "expired":
            return {"type": "expired"}
        if action.kind == "error":
            error_type = _ANTHROPIC_ERROR_TYPES.get(action.status, "api_error")
            message = action.text or f"Scripted error {action.status}"
            return {
                "type": "errored",
                "error": _anthropic_error({"type": error_type, "message": message}),
            }
        if action.kind == "broken":
            return {"type": "succeeded", "message": {"content": None}}
        return {"type": "succeeded", "message": _anthropic_message(params, action)}

    def retrieve_anthropic(self, batch_id: str) -> dict[str, Any] | None:
        with self.wire._lock:
            batch = self.anthropic.get(batch_id)
            if batch is None:
                return None
            self.retrievals[batch_id] += 1
            if batch["processing_status"] != "ended" and self.retrievals[batch_id] > self.polls:
                self._end(batch)
            return {key: value for key, value in batch.items() if key != "base_url"}

    def _end(self, batch: dict[str, Any], *, cancel: bool = False) -> None:
        results = self.results.get(batch["id"], [])
        if cancel:
            for line in results:
                line["result"] = {"type": "canceled"}
        batch["processing_status"] = "ended"
        batch["ended_at"] = _rfc3339(time.time())
        batch["request_counts"] = _anthropic_counts(results, ended=True)
        batch["results_url"] = f"{batch['base_url']}/v1/messages/batches/{batch['id']}/results"

    def cancel_anthropic(self, batch_id: str) -> dict[str, Any] | None:
        with self.wire._lock:
            batch = self.anthropic.get(batch_id)
            if batch is None:
                return None
            if batch["processing_status"] != "ended":
                self._end(batch, cancel=True)
            return {key: value for key, value in batch.items() if key != "base_url"}


def _anthropic_error(error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "error", "error": error, "request_id": f"req_{uuid.uuid4().hex}"}


def _anthropic_counts(results: list[dict[str, Any]], *, ended: bool) -> dict[str, int]:
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    for line in results:
        counts[line["result"]["type"] if ended else "processing"] += 1
    return counts


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


_FILE_CONTENT = re.compile(r"^/v1/files/([^/]+)/content$")
_OPENAI_BATCH = re.compile(r"^/v1/batches/([^/]+)(/cancel)?$")
_ANTHROPIC_BATCH = re.compile(r"^/v1/messages/batches/([^/]+)(/results|/cancel)?$")


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

    def do_GET(self) -> None:
        """Batch API reads: files, file contents, batches, batch lists and results."""
        batches = self.server.wire.batches
        path = self.path.split("?", 1)[0]
        if match := _FILE_CONTENT.match(path):
            self._download(batches.contents.get(match[1]), "application/octet-stream")
        elif (match := _ANTHROPIC_BATCH.match(path)) and match[2] == "/results":
            results = batches.results.get(match[1])
            lines = None if results is None else [json.dumps(line) + "\n" for line in results]
            self._download(None if lines is None else "".join(lines).encode(), "application/binary")
        else:
            self._get_json(path)

    def _download(self, data: bytes | None, content_type: str) -> None:
        if self._held("results"):
            return
        if data is None:
            self._send_json(404, _openai_error(404, "No such file or batch"), {})
        else:
            self._send(200, data, {}, content_type=content_type)

    def _get_json(self, path: str) -> None:
        batches = self.server.wire.batches
        if path == "/v1/files":
            files = sorted(batches.files.values(), key=lambda f: f["created_at"], reverse=True)
            self._send_json(200, {"object": "list", "data": files, "has_more": False}, {})
        elif path == "/v1/batches":
            listed = [batches.openai_view(b) for b in reversed(batches.openai.values())]
            self._send_json(200, {"object": "list", "data": listed, "has_more": False}, {})
        elif match := _OPENAI_BATCH.match(path):
            self._found(batches.retrieve_openai(match[1]), "openai")
        elif path == "/v1/messages/batches":
            listed = [
                {k: v for k, v in b.items() if k != "base_url"}
                for b in reversed(batches.anthropic.values())
            ]
            page = {"data": listed, "has_more": False, "first_id": None, "last_id": None}
            self._send_json(200, page, {})
        elif match := _ANTHROPIC_BATCH.match(path):
            self._found(batches.retrieve_anthropic(match[1]), "anthropic")
        else:
            self._send_json(404, _openai_error(404, f"Unknown path {path}"), {})

    def _found(self, payload: dict[str, Any] | None, protocol: WireProtocol) -> None:
        if payload is None:
            self._send_json(404, _error_body(protocol, 404, "No such batch"), {})
        else:
            self._send_json(200, payload, {})

    def _batch_post(self, path: str, raw: bytes) -> bool:
        """Answer a batch API write; False when ``path`` is not one."""
        wire = self.server.wire
        batches = wire.batches
        if path == "/v1/files":
            content_type = self.headers.get("Content-Type", "")
            message = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {content_type}\r\n\r\n".encode() + raw
            )
            fields: dict[str, Any] = {}
            filename = "upload.jsonl"
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                if part.get_filename():
                    filename = part.get_filename()
                fields[str(name)] = part.get_payload(decode=True)
            purpose = (fields.get("purpose") or b"").decode()
            self._reply(
                batches.upload(filename, purpose, fields.get("file") or b""), "files.create"
            )
        elif path in ("/v1/batches", "/v1/messages/batches") and self._held("before.create"):
            pass
        elif path == "/v1/batches":
            self._reply(batches.create_openai(json.loads(raw)), "batches.create")
        elif (match := _OPENAI_BATCH.match(path)) and match[2]:
            self._found(batches.cancel_openai(match[1]), "openai")
        elif path == "/v1/messages/batches":
            batch = batches.create_anthropic(json.loads(raw), wire.base_url)
            self._reply(batch, "batches.create")
        elif (match := _ANTHROPIC_BATCH.match(path)) and match[2] == "/cancel":
            self._found(batches.cancel_anthropic(match[1]), "anthropic")
        else:
            return False
        return True

    def _held(self, endpoint: str) -> bool:
        """Hold the request until the server closes when ``endpoint`` stalls now (True)."""
        wire = self.server.wire
        with wire._lock:
            passed = wire._passed[endpoint]
            wire._passed[endpoint] += 1
            hold = endpoint in wire.stall and passed >= wire.stall[endpoint]
            if hold:
                wire.stalled.append(endpoint)
        if hold:
            wire._stopping.wait()
            self.close_connection = True
        return hold

    def _reply(self, payload: dict[str, Any], endpoint: str) -> None:
        """Send ``payload`` unless ``endpoint`` stalls."""
        if not self._held(endpoint):
            self._send_json(200, payload, {})

    def do_POST(self) -> None:
        """Answer one protocol request as scripted."""
        wire = self.server.wire
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        if self._batch_post(path, raw):
            return
        protocol = _route(self.path)
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
            self._send(action.status, action.text.encode(), headers)
        elif action.kind == "error":
            if action.retry_after is not None:
                headers["Retry-After"] = action.retry_after
            message = action.text or f"Scripted error {action.status}"
            self._send_json(action.status, _error_body(protocol, action.status, message), headers)
        elif protocol == "openai":
            self._send_json(200, _openai_completion(body, action), headers)
        elif protocol == "google":
            self._send_json(200, _gemini_content(body, action), headers)
        else:
            self._send_json(200, _anthropic_message(body, action), headers)

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        self._send(status, _dumps(payload).encode(), headers)

    def _send(
        self,
        status: int,
        data: bytes,
        headers: dict[str, str],
        *,
        content_type: str = "application/json",
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. it timed out)


def _route(target: str) -> WireProtocol | None:
    """The protocol a request target (path and query) speaks, or None: an unknown path, or an
    Azure deployment's path without an ``api-version``."""
    path, _, query = target.partition("?")
    if _GEMINI.match(path):
        return "google"
    if _AZURE.match(path):
        return "openai" if "api-version=" in query else None
    return _ROUTES.get(path)


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
    prompt = json.dumps(_messages(body)) + str(body.get("system", ""))
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


def _gemini_content(body: dict[str, Any], action: Scripted) -> dict[str, Any]:
    prompt_tokens, output_tokens = _usage(body, action)
    refused = action.kind == "refusal"
    candidate: dict[str, Any] = {
        "finishReason": {"refusal": "SAFETY", "truncated": "MAX_TOKENS"}.get(action.kind, "STOP"),
        "index": 0,
    }
    if refused:
        candidate["finishMessage"] = action.text
    else:
        candidate["content"] = {"parts": [{"text": action.text}], "role": "model"}
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": _total(prompt_tokens, output_tokens),
        },
        "modelVersion": "gemini-wire-server",
        "responseId": uuid.uuid4().hex[:22],
    }


def _error_body(protocol: WireProtocol, status: int, message: str) -> dict[str, Any]:
    if protocol == "openai":
        return _openai_error(status, message)
    if protocol == "google":
        code = _GOOGLE_STATUS.get(status, "UNKNOWN")
        return {"error": {"code": status, "message": message, "status": code}}
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
