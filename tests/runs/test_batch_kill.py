"""`pcf judge --batch` and `pcf batch collect` killed (SIGKILL) at the worst moments, then run
again, as real processes through the real SDKs: no request is paid twice (the server runs each
request once) and no answer is lost (every planned call is stored once, ok)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from sqlmodel import Session, col, select

from pcf.store import Call, ProviderBatch, ReplacedCall
from tests.runs.processes import environment, import_dataset
from tests.runs.test_batch import answer
from tests.wire_server import WireServer

ITEMS, K = 6, 3
PLANNED = ITEMS * K
HANG_S = 300  # only catches a hang: a loaded machine is slow, not wrong


@pytest.fixture
def dataset(tmp_path, isolated_database) -> None:
    """Dataset ``ds``: 6 items of 4 candidates."""
    import_dataset(tmp_path, ITEMS)


def pcf_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pcf", *args]


def submit(server: WireServer, backend: str, *extra: str) -> list[str]:
    url = server.openai_base_url if backend == "openai" else server.base_url
    return pcf_command(
        *("judge", "ds", "--name", "r", "--backend", backend, "--base-url", url),
        *("--model", "m", "--k", str(K), "--batch", *extra),
    )


def env() -> dict[str, str]:
    return environment() | {"ANTHROPIC_API_KEY": "sk-ant-dummy"}


def run(command: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        command, check=False, env=env(), capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 0, done.stderr
    return done


def kill_when_stalled(command: list[str], server: WireServer) -> None:
    """Start ``command``, SIGKILL it once the server holds one of its requests."""
    process = subprocess.Popen(command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + HANG_S
    while not server.stalled:
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the request never reached the server"
        time.sleep(0.02)
    process.kill()
    process.communicate(timeout=HANG_S)
    server.stall = {}


def stored_calls(new_session: Callable[[], Session]) -> list[Call]:
    with new_session() as session:
        return list(session.exec(select(Call)).all())


def assert_each_request_paid_once_and_stored_once(
    server: WireServer, new_session: Callable[[], Session]
) -> None:
    counts = server.counts
    assert sum(counts.values()) == PLANNED  # every request run once by the server
    assert set(counts.values()) == {1}
    calls = stored_calls(new_session)
    assert len(calls) == PLANNED
    assert all(c.ok for c in calls)
    assert len({(c.item_id, c.execution, c.call_index) for c in calls}) == PLANNED
    with new_session() as session:
        assert session.exec(select(ReplacedCall)).all() == []


@pytest.mark.parametrize(
    ("backend", "stall"),
    [
        ("openai", "files.create"),  # the file is uploaded, its id never arrives
        ("openai", "before.create"),  # the file id is stored, the batch not created
        ("openai", "batches.create"),  # the batch is created (paid), its id never arrives
        ("anthropic", "before.create"),
        ("anthropic", "batches.create"),
    ],
)
def test_a_submit_killed_at_any_step_is_finished_by_the_next_and_paid_once(
    dataset, new_session, backend, stall
):
    with WireServer(answer, batch_polls=1) as server:
        server.stall = {stall: 0}
        kill_when_stalled(submit(server, backend), server)
        with new_session() as session:
            left = session.exec(select(ProviderBatch)).one()
        assert left.state == "submitting"
        assert left.batch_id is None
        assert (left.file_id is not None) == (backend == "openai" and stall != "files.create")
        run(submit(server, backend))
        run(pcf_command("batch", "collect", "r", "--wait", "--poll", "0.01"))
        created = server.batches.created
        uploads = len(server.batches.files)
        assert_each_request_paid_once_and_stored_once(server, new_session)
    assert created == 1
    if backend == "openai":
        assert uploads == 2  # the input file (uploaded once) and the output file


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_collect_killed_midway_stores_each_answer_exactly_once_when_run_again(
    dataset, new_session, backend
):
    """Five batches of at most 4 requests; the collect is killed while downloading the third
    batch's results, after the first two are stored; the next collect stores the rest."""
    with WireServer(answer) as server:
        run(submit(server, backend, "--batch-size", "4"))
        server.stall = {"results": 2}
        kill_when_stalled(pcf_command("batch", "collect", "r"), server)
        with new_session() as session:
            states = session.exec(select(ProviderBatch.state).order_by(col(ProviderBatch.id))).all()
        assert states == ["collected"] * 2 + ["submitted"] * 3
        assert len(stored_calls(new_session)) == 8
        done = run(pcf_command("batch", "collect", "r"))
        assert_each_request_paid_once_and_stored_once(server, new_session)
        again = run(pcf_command("batch", "collect", "r"))
    assert '"stored": 10' in done.stdout
    assert f"] {PLANNED}/{PLANNED} requests, 10 calls stored, 0 batches running" in done.stderr
    assert '"stored": 0' in again.stdout
    runs = run(pcf_command("runs")).stdout
    assert '"status": "finished"' in runs
