"""A webhook receiver for tests: a real HTTP server on a free loopback port that records
each request and answers ``status`` (settable while it runs)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG_S = 300
"""Bounds only a hang."""


@dataclass
class Received:
    headers: dict[str, str]
    body: str


@dataclass
class Receiver:
    """``with Receiver() as receiver``: ``receiver.url`` takes POSTs; ``received`` holds them."""

    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                with receiver.arrived:  # recorded before the answer: a sender that has it sees it
                    receiver.received.append(Received(dict(self.headers.items()), body))
                    receiver.arrived.notify_all()
                self.send_response(receiver.status)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int) -> list[Received]:
        """The requests once ``count`` have come (AssertionError after :data:`HANG_S`)."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.received) >= count, HANG_S):
                raise AssertionError(f"{len(self.received)} of {count} webhooks came")
            return list(self.received)
