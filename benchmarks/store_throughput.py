"""Store throughput: import 10,000 items of 4 candidates, then read a run's 70,000 calls back
as judgments (`pcf.store.run_judgments`), in a fresh SQLite file. Last line: JSON figures."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from pcf.items import Candidate, Item
from pcf.store import (
    create_run,
    get_engine,
    import_items,
    insert_calls,
    item_db_ids,
    run_judgments,
    session_scope,
)

ITEMS, CANDIDATES, CALLS_PER_ITEM = 10_000, 4, 7
REQUEST = {
    "backend": "simulated",
    "model": "sim",
    "system": "Judge the candidates.",
    "user": "The candidates.",
    "schema": {},
    "temperature": 0.0,
    "max_tokens": 2048,
}


def main() -> None:
    items = [
        Item(
            f"item-{i}",
            f"Question {i}?",
            tuple(Candidate(f"c{c}", f"Answer {c} to question {i}.") for c in range(CANDIDATES)),
            "c0",
        )
        for i in range(ITEMS)
    ]
    with tempfile.TemporaryDirectory() as folder:
        engine = get_engine(f"sqlite:///{Path(folder) / 'store.db'}")
        started = time.perf_counter()
        with session_scope(engine) as session:
            dataset = import_items(items, session=session, name="bench", fmt="jsonl")
        import_s = time.perf_counter() - started
        order = [f"c{c}" for c in range(CANDIDATES)]
        judgment = {
            "factuality": dict.fromkeys(order, 5.0),
            "hallucination_risk": dict.fromkeys(order, 0.2),
            "ranking": order,
            "confidence": 0.8,
        }
        with session_scope(engine) as session:
            run = create_run(
                "bench-run",
                session=session,
                dataset_id=dataset.id,
                protocol="pcf",
                backend="simulated",
                model="sim",
                k=CALLS_PER_ITEM,
                schedule="balanced",
            )
            rows = [
                {
                    "run_id": run.id,
                    "item_id": item_id,
                    "call_index": index,
                    "order": order,
                    "keys": ["A", "B", "C", "D"],
                    "content_key": f"{item_id}:{index}",
                    "request": REQUEST,
                    "ok": True,
                    "repaired": [],
                    "judgment": judgment,
                }
                for item_id in item_db_ids(dataset.id, session=session).values()
                for index in range(CALLS_PER_ITEM)
            ]
            insert_calls(rows, session=session)
        with session_scope(engine) as session:
            started = time.perf_counter()
            judgments = run_judgments(run.id, session=session)
            read_s = time.perf_counter() - started
        engine.dispose()
    assert len(judgments) == ITEMS * CALLS_PER_ITEM
    print(
        f"import {ITEMS:,} items x {CANDIDATES} candidates: {import_s:.2f} s; "
        f"run_judgments on {len(judgments):,} calls: {read_s:.2f} s"
    )
    print(json.dumps({"import_s": round(import_s, 3), "run_judgments_s": round(read_s, 3)}))


if __name__ == "__main__":
    main()
