"""A pipeline's journey against the real served app (``streamlit run app.py``: the pages and the
API on one port): push the 120 RewardBench 2 rows, start a simulated run (the same
Idempotency-Key twice, and twice at once: one run, one set of calls), poll it to finished, page
its decisions (equal to ``pcf export``), post two labels per item for 20 items, read gold, get
``pcf check``'s JSON."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from pcf.cli import app
from pcf.items import load_dataset
from pcf.store import Call
from tests.served_app import serve_app
from tests.shared_data import RB2

HANG_GUARD_S = 300
pytestmark = [pytest.mark.slow, pytest.mark.db]


def test_a_pipeline_pushes_runs_pages_labels_and_checks(
    isolated_database, engine, session, token, tmp_path
):
    if not RB2.exists():
        pytest.skip(f"{RB2} is absent")
    rows = [item.to_dict() for item in load_dataset("rewardbench2", RB2)]
    assert len(rows) == 120
    pipeline = token("ci@example.org", "admin", "run")
    annotators = [token(f"ann{n}@example.org", "annotator", "label") for n in (1, 2)]
    with serve_app(isolated_database, tmp_path / "server.log") as url:
        api = httpx.Client(base_url=f"{url}/api/v1", timeout=60)
        assert api.get("/health").json() == {"status": "ok"}
        assert api.get("/me").status_code == 401
        assert api.put("/datasets/rb2", headers=pipeline).status_code == 201
        for start in (0, 60):
            pushed = api.post(
                "/datasets/rb2/items", headers=pipeline, json={"items": rows[start : start + 60]}
            )
            assert pushed.json() == {"added": 60, "unchanged": 0}, pushed.text
        again = api.post("/datasets/rb2/items", headers=pipeline, json={"items": rows[:10]})
        assert again.json() == {"added": 0, "unchanged": 10}

        run = {"dataset": "rb2", "name": "rb2-sim", "k": 3}
        key = pipeline | {"Idempotency-Key": "build-42"}
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: api.post("/runs", headers=key, json=run), range(2)))
        answers.append(api.post("/runs", headers=key, json=run))
        assert {a.status_code for a in answers} == {202}
        assert {a.headers["Location"] for a in answers} == {"/api/v1/runs/rb2-sim"}
        assert sorted(a.json()["started"] for a in answers) == [False, False, True]
        other = api.post("/runs", headers=key, json=run | {"k": 5})
        assert other.status_code == 409, other.text

        deadline = time.monotonic() + HANG_GUARD_S
        while (status := api.get("/runs/rb2-sim", headers=pipeline).json())["status"] in (
            "starting",
            "pending",
            "running",
        ):
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status["status"] == "finished", status
        calls = session.scalar(select(func.count()).select_from(Call))
        assert calls == status["attempts"] == 120 * 3  # one set of calls

        paged, cursor = [], None
        while True:
            page = api.get(
                "/runs/rb2-sim/decisions",
                headers=pipeline,
                params={"limit": 47} | ({"cursor": cursor} if cursor else {}),
            ).json()
            paged += page["decisions"]
            if (cursor := page["next_cursor"]) is None:
                break
        exported = CliRunner().invoke(app, ["export", "rb2-sim", "--what", "decisions"])
        assert paged == [json.loads(line) for line in exported.output.splitlines()]

        set_plan_as_operator("rb2", labels_per_item=2)
        for n, annotator in enumerate(annotators):
            labels = [
                {
                    "label_id": f"{n}-{row['item_id']}",
                    "item_id": row["item_id"],
                    "answer": row["gold"],
                }
                for row in rows[:20]
            ]
            posted = api.post("/datasets/rb2/labels", headers=annotator, json={"labels": labels})
            assert [label["saved"] for label in posted.json()["labels"]] == [True] * 20
            repeated = api.post("/datasets/rb2/labels", headers=annotator, json={"labels": labels})
            assert [label["saved"] for label in repeated.json()["labels"]] == [False] * 20
        gold = api.get("/datasets/rb2/gold", headers=pipeline).json()["gold"]
        assert {g["item_id"]: g["human_gold"] for g in gold} == {
            row["item_id"]: row["gold"] for row in rows[:20]
        }
        assert api.get("/datasets/rb2/gold", headers=annotators[0]).status_code == 403

        thresholds = {"max_order_unstable": 0.5, "min_accuracy": 0.5}
        checked = api.post(f"/runs/{quote('rb2-sim')}/check", headers=pipeline, json=thresholds)
        cli = CliRunner().invoke(
            app, ["check", "rb2-sim", "--max-order-unstable", "0.5", "--min-accuracy", "0.5"]
        )
        assert checked.json() == json.loads(cli.output.splitlines()[-1])


def set_plan_as_operator(dataset: str, *, labels_per_item: int) -> None:
    """Two labels per item, as ``pcf labelling set`` sets it."""
    done = CliRunner().invoke(
        app, ["labelling", "set", dataset, "--labels-per-item", str(labels_per_item)]
    )
    assert done.exit_code == 0, done.output
