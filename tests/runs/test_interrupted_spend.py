"""A capped run interrupted three times (SIGKILL, SIGTERM or Ctrl-C) and judged again keeps its
spend: the run's ledger counts what each killed process left in flight, so the requests the
provider received, at the price it billed, stay within the cap plus one call.

`pcf judge` runs as a real process against the wire server billing 100,000 prompt tokens a call;
each interruption comes when the server has received more requests (an event, not a clock)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from sqlmodel import select

from pcf.store import Call, get_run, run_spend
from tests.runs.processes import environment, import_dataset, judge_command
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer

ITEMS, K, CONCURRENCY = 20, 7, 16
CAP = 0.30
PROMPT_TOKENS = 100_000
PRICES = {"m": [0.15, 0.60]}  # USD per million tokens: $0.015 a call, 20 calls in the cap
LATENCY_S = 0.05
HANG_S = 300
"""Bounds only a hang: a loaded machine may take long to start the process."""


def _answer(request: WireRequest) -> Scripted:
    return Scripted.answer(listwise_text(request.last_user_text), delay_s=LATENCY_S)


def _interrupt_when_received(command, env, server: WireServer, more: int, how: int) -> int:
    """Start ``command``, send it signal ``how`` once the server has received ``more``
    requests of it (unless it ends first); its exit code."""
    number = server.request_count + more
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + HANG_S
    while server.request_count < number and process.poll() is None:
        assert time.monotonic() < deadline, "the run sent too few requests"
        time.sleep(0.01)
    if process.poll() is None:
        process.send_signal(how)
    _, stderr = process.communicate(timeout=HANG_S)
    if how != signal.SIGKILL and process.returncode == 128 + how:
        assert "answers in flight" in stderr.decode()
    return process.returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    "how",
    [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
)
def test_a_run_interrupted_three_times_stays_within_its_cap_plus_one_call(
    tmp_path, isolated_database, new_session, how
):
    import_dataset(tmp_path, ITEMS)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), encoding="utf-8")
    env = environment() | {"PCF_DATABASE_URL": isolated_database, "PCF_PRICES": str(prices)}

    with WireServer(_answer, prompt_tokens=PROMPT_TOKENS) as server:
        command = judge_command(server, "--max-cost", str(CAP), k=K, concurrency=CONCURRENCY)
        codes = [_interrupt_when_received(command, env, server, more, how) for more in (1, 1, 1)]
        last = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=HANG_S
        )
        received = server.request_count
        counts = server.counts

    with new_session() as session:
        run = get_run("r", session=session)
        calls = session.exec(select(Call).where(Call.run_id == run.id)).all()
        spend = run_spend(run.id, session=session)
    one_call = max(call.cost_usd for call in calls)
    billed = received * one_call  # every request the server received is billed alike
    print(
        f"{signal.Signals(how).name}: {received} requests, billed ${billed:.4f}, "
        f"ledger ${spend:.4f}, cap ${CAP}, exits {codes} then {last.returncode}"
    )
    assert billed <= CAP + one_call + 1e-9
    assert spend <= CAP + one_call + 1e-9
    assert run.status == "capped"
    assert last.returncode != 0
    slots = [(c.item_id, c.execution, c.call_index) for c in calls]
    assert len(slots) == len(set(slots))
    assert all(c.ok for c in calls)
    if how == signal.SIGKILL:
        assert codes == [-signal.SIGKILL] * 3
    else:  # interrupted three times; every answer in flight was stored: none asked twice
        assert codes == [128 + how] * 3
        assert set(counts.values()) == {1}
        assert len(calls) == received
