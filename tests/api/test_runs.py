"""Runs submitted through the API: a restarted server resumes those a stopped one left
unfinished (not the cancelled ones), as their members; estimates as ``pcf judge`` plans."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from pcf.access import Actor, Role
from pcf.api import standalone
from pcf.runs.submitted import RunRequest, cancel
from pcf.store import claim_api_run, get_run
from tests.factories import stored_run

pytestmark = pytest.mark.db


def left_by_a_stopped_server(new_session, name: str, email: str) -> None:
    """The record a server that was killed after accepting the run leaves (no run row yet)."""
    request = RunRequest("demo", name=name, k=1, limit=3)
    with new_session() as session:
        claim_api_run(
            name, session=session, email=email, idempotency_key=name, request=vars(request)
        )
        session.commit()


def test_a_restarted_server_resumes_the_runs_it_accepted_but_not_cancelled_ones(
    demo_engine, token, new_session
):
    headers = token("ci@example.org", "admin", "run")
    left_by_a_stopped_server(new_session, "resumed", "ci@example.org")
    left_by_a_stopped_server(new_session, "cancelled", "ci@example.org")
    cancel("cancelled", engine=demo_engine, actor=Actor("ci@example.org", Role.ADMIN))
    with TestClient(standalone(), base_url="http://127.0.0.1/api/v1") as client:  # a restart
        for _ in range(10_000):
            status = client.get("/runs/resumed", headers=headers).json()
            if status["status"] not in ("starting", "pending", "running"):
                break
        assert status["status"] == "finished", status
        assert status["attempts"] + status["cache_hits"] == 3
        assert client.get("/runs/cancelled", headers=headers).json()["status"] == "starting"
    with new_session() as session:
        assert get_run("cancelled", session=session) is None


def test_an_estimate_is_the_plan_of_pcf_judge_and_starts_nothing(
    demo_engine, client, token, new_session
):
    headers = token("ci@example.org", "admin", "run")
    asked = {"dataset": "demo", "name": "planned", "k": 3, "limit": 10}
    estimate = client.post("/api/v1/runs/estimate", headers=headers, json=asked).json()
    assert (estimate["items"], estimate["planned"], estimate["resumes"]) == (10, 30, False)
    with new_session() as session:
        assert get_run("planned", session=session) is None
    unknown = client.post("/api/v1/runs/estimate", headers=headers, json=asked | {"dataset": "x"})
    assert unknown.status_code == 404
    replay = client.post(
        "/api/v1/runs",
        headers=headers | {"Idempotency-Key": "r"},
        json=asked | {"model": "replay/x"},
    )
    assert replay.status_code == 422, replay.text


def test_a_run_or_estimate_of_an_unpriced_model_costs_null_never_zero(
    demo_engine, client, token, new_session
):
    headers = token("ci@example.org", "admin", "run")
    with new_session() as session:
        dataset_id = get_run("demo-pcf", session=session).dataset_id
        for name, model, cost in (("house", "house-model", 0.0), ("mini", "gpt-4o-mini", 0.0123)):
            run = stored_run(session, dataset_id, name=name, backend="openai", model=model)
            run.input_tokens, run.output_tokens, run.cost_usd = 1200, 300, cost
            session.add(run)
        session.commit()

    def cost_of(name: str) -> float | None:
        answer = client.get(f"/api/v1/runs/{name}", headers=headers)
        assert answer.status_code == 200, answer.text
        return answer.json()["cost_usd"]

    assert cost_of("house") is None  # spent on a model without a price: unknown, not $0
    assert cost_of("mini") == 0.0123
    assert cost_of("demo-pcf") == 0.0  # the simulated judge costs nothing

    asked = {"dataset": "demo", "name": "planned", "k": 1, "limit": 4}
    for model, priced in (("openai/house-model", False), ("openai/gpt-4o-mini", True)):
        answer = client.post(
            "/api/v1/runs/estimate", headers=headers, json=asked | {"model": model}
        )
        assert answer.status_code == 200, answer.text
        found = answer.json()
        assert found["input_tokens"] > 0
        assert found["cost_usd"] > 0 if priced else found["cost_usd"] is None, found
