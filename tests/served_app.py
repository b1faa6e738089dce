"""The app served by ``streamlit run app.py`` on a free port, for the browser tests and the
tests of the API on the app's own port; no browser is imported here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER_START_TIMEOUT_S = 180


def in_ci() -> bool:
    """Whether the ``CI`` environment variable is set (to anything but ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false"}


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    """Poll Streamlit's health endpoint until it answers; fail with the server log if not."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"streamlit exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"streamlit did not answer in {SERVER_START_TIMEOUT_S} s:\n{log.read_text()}")


@contextmanager
def serve_app(
    database_url: str,
    log: Path,
    *,
    port: int | None = None,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """``streamlit run app.py [options]`` on ``database_url`` and ``port`` (by default a free
    one), with ``env`` added to the environment: the app's base URL.

    The file watcher is off, so that edits to the working tree cannot rerun the served app.
    """
    port = port or free_port()
    command = [
        *(sys.executable, "-m", "streamlit", "run", "app.py"),
        *("--server.headless", "true", "--server.port", str(port)),
        *("--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"),
        *options,
    ]
    env = {**os.environ, **(env or {}), "PCF_DATABASE_URL": database_url}
    with log.open("w") as output:
        server = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
