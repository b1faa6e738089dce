"""Throughput of the run engine: 300 items x K=7 calls through the real OpenAI SDK.

The judge is :class:`pcf.judges.openai_judge.OpenAIJudge` pointed at :mod:`pcf.wire_server`,
which answers every request with a valid listwise JSON judgment after 200 ms. At concurrency
64 the ceiling is 64 / 0.2 = 320 calls/s; ``efficiency`` is the achieved rate over that
ceiling (target >= 0.9). The database is a fresh SQLite file in a temporary folder and every
answered call is committed as it arrives, as in a real run.

The wire server runs in a child process by default, as a real provider runs elsewhere: in the
same interpreter its 64 handler threads compete with the event loop for the GIL, which measures
the test server rather than the runner (``--server thread`` measures that). ``--sdk-only``
also times the same requests through the judge alone, without the runner: the ceiling the
runner's own overhead is measured against. Both are timed after a warm-up of 70 requests
through the SDK (its first requests build models and connections). Last line: JSON figures.

Where the time goes (cProfile and per-phase timers, 2-vCPU machine): the event loop's CPU is
the limit. The OpenAI judge sends a plain JSON body through the SDK's request method (the typed
``create`` walked the nested schema on every call) over the SDK's aiohttp transport (about a
third less CPU per call than its httpx one): about 1 ms of CPU per call, so the judge alone
reaches about 0.94 of the ceiling. The runner adds about 0.5-0.7 ms per call (render, parse,
one INSERT and commit per answer). Figures seen: efficiency 0.91-0.93 (it was 0.42-0.63 with
the cache looked up call by call, ORM inserts and the typed ``create`` over httpx).

Run: ``.venv/bin/python -m benchmarks.runner_throughput [--items N] [--server thread|process]
[--sdk-only] [--profile]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlmodel import Session, func, select

from pcf.items import Candidate, Item
from pcf.judges.base import JudgeRequest
from pcf.judges.openai_judge import OpenAIJudge
from pcf.runs.call_plan import plan
from pcf.runs.live import execute
from pcf.runs.spec import RunSpec
from pcf.store import Call, create_run, get_engine, import_items
from tests.wire_server import Scripted, WireRequest, WireServer

ITEMS, K, N, CONCURRENCY, LATENCY_S = 300, 7, 4, 64, 0.2
WARM_UP_ITEMS = 10
_KEY = re.compile(r'<candidate key="([^"]+)">')


def answer(request: WireRequest) -> Scripted:
    """A valid listwise judgment of the keys the prompt shows, after ``LATENCY_S``."""
    keys = _KEY.findall(request.last_user_text)
    candidates = [
        {"key": key, "factuality": 9 - slot, "hallucination_risk": 0.1, "rationale": "ok"}
        for slot, key in enumerate(keys)
    ]
    text = json.dumps({"candidates": candidates, "ranking": keys, "confidence": 0.7})
    return Scripted.answer(text, delay_s=LATENCY_S)


def make_items(count: int) -> list[Item]:
    """``count`` items of ``N`` candidates each."""
    return [
        Item(
            f"q{i}",
            f"Question {i}: which answer is factually right?",
            tuple(Candidate(f"c{j}", f"Answer {j} to question {i}.") for j in range(N)),
            "c0",
        )
        for i in range(count)
    ]


class _Server:
    """Where the judge sends requests, and how many arrived."""

    def __init__(self, base_url: str, count: Callable[[], int]) -> None:
        self.base_url = base_url
        self.openai_base_url = f"{base_url}/v1"
        self.count = count


@contextmanager
def wire_server(mode: str) -> Iterator[_Server]:
    """The scripted server, in this process (``thread``) or in a child process (``process``)."""
    if mode == "thread":
        with WireServer(answer) as server:
            yield _Server(server.base_url, lambda: server.request_count)
        return
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.runner_throughput", "--serve"],
        cwd=Path(__file__).resolve().parents[1],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    received: list[int] = []
    try:
        yield _Server(child.stdout.readline().strip(), lambda: received[0])
    finally:
        child.stdin.close()  # the child prints its request count and exits
        received.append(int(child.stdout.readline() or -1))
        child.wait(timeout=10)


def serve() -> None:
    """Child process: serve until stdin closes, then print the number of requests."""
    with WireServer(answer) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
        count = server.request_count
    print(count, flush=True)


def sdk_only(items: list[Item], server: _Server) -> tuple[float, float]:
    """(seconds, CPU seconds) to send the run's requests through the judge alone,
    ``CONCURRENCY`` at a time."""
    calls = plan(items, {item.item_id: n for n, item in enumerate(items)}, RunSpec("ds", k=K))
    requests = [call.render().request() for call in calls]
    judge = OpenAIJudge("bench-model", base_url=server.openai_base_url, api_key="dummy")
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def one(request: JudgeRequest) -> None:
        async with semaphore:
            await judge.complete(request)

    async def go() -> float:
        try:
            start = time.perf_counter()
            await asyncio.gather(*(one(r) for r in requests))
            return time.perf_counter() - start
        finally:
            await judge.aclose()

    cpu = time.process_time()
    seconds = asyncio.run(go())
    return seconds, time.process_time() - cpu


def run_once(items: list[Item], db_path: Path, server: _Server) -> tuple[float, int]:
    """Judge ``items`` as one pcf run; returns (seconds, calls stored)."""
    engine = get_engine(f"sqlite:///{db_path}")
    with Session(engine, expire_on_commit=False) as session:
        dataset = import_items(items, session=session, name="bench", fmt="jsonl")
        run = create_run(
            "bench-pcf",
            session=session,
            dataset_id=dataset.id,
            protocol="pcf",
            backend="openai",
            model="bench-model",
            k=K,
            schedule="balanced",
        )
        session.commit()
        judge = OpenAIJudge("bench-model", base_url=server.openai_base_url, api_key="dummy")
        config = RunSpec("ds", protocol="pcf", k=K, concurrency=CONCURRENCY)

        async def go() -> float:
            try:
                start = time.perf_counter()
                report = await execute(run, items, judge, config, session=session, prices={})
                seconds = time.perf_counter() - start
            finally:
                await judge.aclose()
            assert report.failures == 0, report.errors
            return seconds

        seconds = asyncio.run(go())
        stored = session.exec(select(func.count()).select_from(Call)).one()
    engine.dispose()
    return seconds, stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--server", choices=("process", "thread"), default="process")
    parser.add_argument("--sdk-only", action="store_true", help="also time the judge alone")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    items = make_items(args.items)
    calls = args.items * K
    ceiling = CONCURRENCY / LATENCY_S
    with tempfile.TemporaryDirectory() as folder:
        with wire_server(args.server) as server:
            # first use of the SDK builds its models and connections: not the runner's cost
            sdk_only(make_items(WARM_UP_ITEMS), server)
            profiler = cProfile.Profile() if args.profile else None
            cpu = time.process_time()
            if profiler:
                profiler.enable()
            seconds, stored = run_once(items, Path(folder) / "bench.db", server)
            if profiler:
                profiler.disable()
            cpu = time.process_time() - cpu
        received = server.count() - WARM_UP_ITEMS * K
        if args.sdk_only:
            with wire_server(args.server) as server:
                sdk_seconds, sdk_cpu = sdk_only(items, server)
    assert stored == calls == received, (stored, calls, received)
    rate = calls / seconds
    print(f"runner throughput: {args.items} items x K={K} = {calls} calls (pcf, balanced)")
    print(f"judge: OpenAI SDK -> wire server ({args.server}), {LATENCY_S * 1000:.0f} ms per answer")
    print(
        f"concurrency {CONCURRENCY}: ceiling {ceiling:.0f} calls/s, ideal {calls / ceiling:.2f} s"
    )
    print(f"achieved: {seconds:.2f} s, {rate:.1f} calls/s, efficiency {rate / ceiling:.3f}")
    print(f"CPU of this process: {cpu * 1000 / calls:.2f} ms per call")
    print(f"every call committed as it arrived: {stored} rows, {received} requests")
    figures = {
        "calls_per_s": round(rate, 1),
        "efficiency": round(rate / ceiling, 3),
        "calls": calls,
        "seconds": round(seconds, 3),
        "server": args.server,
    }
    if args.sdk_only:
        sdk_rate = calls / sdk_seconds
        print(
            f"judge alone, no runner: {sdk_seconds:.2f} s, {sdk_rate:.1f} calls/s, "
            f"efficiency {sdk_rate / ceiling:.3f}, CPU {sdk_cpu * 1000 / calls:.2f} ms per call"
        )
        figures["sdk_only_efficiency"] = round(sdk_rate / ceiling, 3)
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
