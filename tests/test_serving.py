"""``make run`` serves this machine only: it listens on 127.0.0.1, on no other address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.served_app import free_port

ROOT = Path(__file__).resolve().parents[1]
HANG_BOUND_S = 300


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))
                found.add(socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, words))
    return found


def answers(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def other_addresses() -> list[str]:
    """This machine's addresses that are not loopback."""
    names = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    return [a for a in names.stdout.split() if not a.startswith("127.") and a != "::1"]


@pytest.mark.sqlite_only(reason="make run serves the demo in the user's SQLite file")
def test_make_run_listens_on_loopback_only(tmp_path: Path):
    if not (ROOT / ".venv" / "bin" / "streamlit").exists():
        pytest.skip("make run uses .venv (made by make test or make run)")
    port = free_port()
    env = {
        **os.environ,
        "PCF_DATABASE_URL": f"sqlite:///{tmp_path / 'pcf.db'}",
        "PYTHONUNBUFFERED": "1",  # what the server prints reaches the pipe before it stops
    }
    server = subprocess.Popen(
        ["make", "--no-print-directory", "run", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + HANG_BOUND_S
        while not listening_addresses(port):
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "make run did not start listening"
            time.sleep(0.5)
        assert listening_addresses(port) == {"127.0.0.1"}
        while not answers(f"http://127.0.0.1:{port}/_stcore/health"):  # started, URL printed
            assert time.monotonic() < deadline, "make run did not answer"
            time.sleep(0.5)
        for address in other_addresses():
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            with socket.socket(family) as probe:
                probe.settimeout(5)
                with pytest.raises(ConnectionRefusedError):
                    probe.connect((address, port))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        output = server.communicate(timeout=60)[0]
    assert "Network URL" not in output
    assert f"http://127.0.0.1:{port}" in output
    before_address = output[: output.index(f"http://127.0.0.1:{port}")]
    assert "demo database ready at" in before_address
    assert '"runs"' not in output  # the demo's JSON summary does not bury the address
