"""The HTTP API's cost over the library: the p50/p95 of a label POST, and the time to page a
run's decisions, each beside the same work through the library directly.

On a fresh SQLite file in a temporary folder: ``--items`` generated items (two short
candidates each) judged by the simulated judge with the direct protocol, and the API served
alone (``pcf.api.standalone``, uvicorn) on a free port of 127.0.0.1. Then:

- ``label_post``: ``--labels`` POSTs of one label each (a new item and ``label_id`` each time)
  by an annotator's token, timed from request to response; beside it the same number of
  :func:`pcf.labelling.posted.post_labels` calls, each in its own transaction, by another
  annotator, on the other half of the items.
- ``page_decisions``: every decision through ``GET /runs/{name}/decisions?limit=1000``, cursor
  after cursor; beside it :func:`pcf.analysis.paging.decision_page` in one session.

Targets: a label POST's p95 <= 50 ms, paging 100,000 decisions <= 10 s. Last line: JSON.

    .venv/bin/python -m benchmarks.api --items 100000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from pcf.access import Actor, Role, operator
from pcf.analysis.paging import decision_page
from pcf.api import standalone
from pcf.items import Candidate, Item
from pcf.labelling.posted import post_labels
from pcf.labelling.tokens import create_token
from pcf.runs.manage import import_dataset, judge_run
from pcf.runs.spec import RunSpec
from pcf.store import DATABASE_URL_ENV, get_engine, get_run, save_member, session_scope
from tests.served_app import free_port

RUN = "bench-direct"


def build(items: int) -> None:
    """The dataset, its direct run, two annotators and a viewer."""
    engine = get_engine()
    made = [
        Item(f"i{n}", f"Question {n}?", (Candidate("a", f"yes {n}"), Candidate("b", f"no {n}")))
        for n in range(items)
    ]
    with session_scope(engine) as session:
        import_dataset(made, session=session, actor=operator(), name="bench", fmt="jsonl")
        for who in ("api@example.org", "lib@example.org"):
            save_member(who, "annotator", session=session, added_by="benchmark")
        save_member("reader@example.org", "viewer", session=session, added_by="benchmark")
    with session_scope(engine) as session:
        spec = RunSpec("bench", RUN, protocol="direct", concurrency=64)
        judge_run(spec, session=session, actor=operator())


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * len(ordered)) - 1)]
    return {"p50_ms": 1000 * statistics.median(ordered), "p95_ms": 1000 * p95}


def label_posts(api: httpx.Client, count: int) -> dict[str, dict[str, float]]:
    """Timed label POSTs through the API, and through the library."""
    served, direct = [], []
    engine = get_engine()
    for n in range(count):
        label = {"label_id": f"api-{n}", "item_id": f"i{n}", "answer": "a"}
        start = time.perf_counter()
        answer = api.post("/datasets/bench/labels", json={"labels": [label]})
        served.append(time.perf_counter() - start)
        answer.raise_for_status()
        label = {"label_id": f"lib-{n}", "item_id": f"i{count + n}", "answer": "a"}
        label |= {"confidence": None, "note": ""}
        start = time.perf_counter()
        with session_scope(engine) as session:
            actor = Actor("lib@example.org", Role.ANNOTATOR)
            post_labels("bench", [label], session=session, actor=actor)
        direct.append(time.perf_counter() - start)
    return {"api": percentiles(served), "library": percentiles(direct)}


def page_decisions(api: httpx.Client) -> dict[str, float]:
    """Seconds to read every decision through the API, and through the library."""
    start, cursor, served = time.perf_counter(), None, 0
    while True:
        params = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
        page = api.get(f"/runs/{RUN}/decisions", params=params).json()
        served += len(page["decisions"])
        if (cursor := page["next_cursor"]) is None:
            break
    api_s = time.perf_counter() - start
    start, cursor, direct = time.perf_counter(), None, 0
    with session_scope(get_engine()) as session:
        run = get_run(RUN, session=session)
        while True:
            found, cursor = decision_page(run, session=session, cursor=cursor, limit=1000)
            direct += len(found)
            if cursor is None:
                break
    library_s = time.perf_counter() - start
    assert served == direct
    return {"decisions": served, "api_s": api_s, "library_s": library_s}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        os.environ[DATABASE_URL_ENV] = f"sqlite:///{Path(folder) / 'pcf.db'}"
        os.environ.setdefault("PCF_API_RATE", "100000")  # measure the work, not the limit
        build(args.items)
        with session_scope(get_engine()) as session:
            labeller = create_token("api@example.org", "label", session=session, actor=operator())
            reader = create_token("reader@example.org", "read", session=session, actor=operator())
        port = free_port()
        config = uvicorn.Config(standalone(), host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            thread.join(0.05)
        url = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=url, headers=bearer(labeller.secret)) as api:
            labels = label_posts(api, min(args.labels, args.items // 2))
        with httpx.Client(base_url=url, headers=bearer(reader.secret), timeout=60) as api:
            paging = page_decisions(api)
        server.should_exit = True
        thread.join(30)
    print(
        f"label POST p50 {labels['api']['p50_ms']:.1f} ms, p95 {labels['api']['p95_ms']:.1f} ms "
        f"(library: {labels['library']['p50_ms']:.1f} / {labels['library']['p95_ms']:.1f} ms)"
    )
    print(
        f"{paging['decisions']} decisions paged in {paging['api_s']:.2f} s "
        f"(library: {paging['library_s']:.2f} s)"
    )
    print(json.dumps({"items": args.items, "label_post": labels, "page_decisions": paging}))


if __name__ == "__main__":
    main()
