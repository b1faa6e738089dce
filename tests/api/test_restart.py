"""A server killed (SIGKILL) while it judges a submitted run resumes it when it starts again:
every planned call is stored once, only the calls not stored are asked again."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlmodel import col, func, select

from pcf.store import Call
from tests.runs.processes import environment, import_dataset
from tests.runs.test_live_providers import listwise_text
from tests.served_app import free_port
from tests.wire_server import Scripted, WireRequest, WireServer

ITEMS, K = 30, 7
PLANNED = ITEMS * K
KILL_AFTER_ROWS = 40
HANG_S = 300
pytestmark = [pytest.mark.slow, pytest.mark.db]


def answer(request: WireRequest) -> Scripted:
    return Scripted.answer(listwise_text(request.last_user_text), delay_s=0.05)


def stored_rows(new_session) -> int:
    with new_session() as session:
        return session.exec(select(func.count(col(Call.id)))).one()


@contextmanager
def api_server(env: dict[str, str], port: int) -> Iterator[subprocess.Popen]:
    """`pcf api` on ``port`` once it answers; killed at the end if still alive."""
    command = [sys.executable, "-m", "pcf", "api", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + HANG_S
    while True:
        assert server.poll() is None, server.stderr.read().decode()
        assert time.monotonic() < deadline, "pcf api did not answer"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2):
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    try:
        yield server
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)
        server.stderr.close()


def test_a_killed_server_resumes_its_submitted_run(tmp_path, isolated_database, new_session, token):
    import_dataset(tmp_path, ITEMS)
    headers = token("ci@example.org", "admin", "run")
    port = free_port()
    with WireServer(answer) as wire:
        env = environment() | {
            "PCF_DATABASE_URL": isolated_database,
            "OPENAI_BASE_URL": wire.openai_base_url,  # the operator's server: the key may go
        }
        url = f"http://127.0.0.1:{port}/api/v1"
        run = {"dataset": "ds", "name": "r", "model": "openai/m", "k": K}
        with api_server(env, port) as first:
            started = httpx.post(
                f"{url}/runs", json=run, headers=headers | {"Idempotency-Key": "once"}
            )
            assert started.status_code == 202, started.text
            deadline = time.monotonic() + HANG_S
            while stored_rows(new_session) < KILL_AFTER_ROWS:
                assert time.monotonic() < deadline, "the run stored too few calls"
                time.sleep(0.01)
            first.send_signal(signal.SIGKILL)
            assert first.wait(timeout=10) == -signal.SIGKILL
        killed_at = stored_rows(new_session)
        assert killed_at < PLANNED
        with api_server(env, port):  # starting, it resumes the run
            deadline = time.monotonic() + HANG_S
            while (status := httpx.get(f"{url}/runs/r", headers=headers).json())["status"] in (
                "starting",
                "pending",
                "running",
            ):
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
            again = httpx.post(
                f"{url}/runs", json=run, headers=headers | {"Idempotency-Key": "once"}
            )
            assert again.json()["started"] is False
    assert status["status"] == "finished", status
    with new_session() as session:
        slots = session.exec(select(Call.item_id, Call.execution, Call.call_index)).all()
    assert len(slots) == len(set(slots)) == PLANNED
