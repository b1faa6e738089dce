"""`pcf.client.Client` against the API in this process: it pushes items in pages, starts one
run per key, follows cursors to every decision (equal to ``pcf export``), streams judgments,
posts and reads labels, and raises ApiError with the problem's fields."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from pcf.access import operator
from pcf.api import standalone
from pcf.cli import app
from pcf.client import PAGE, ApiError, Client
from pcf.labelling.tokens import create_token
from pcf.store import save_member

pytestmark = pytest.mark.db


def test_a_client_pushes_runs_pages_and_labels(isolated_database, new_session, monkeypatch):
    with new_session() as session:
        save_member("ci@example.org", "admin", session=session, added_by="test")
        secret = create_token("ci@example.org", "run", session=session, actor=operator()).secret
        session.commit()
    monkeypatch.setenv("PCF_API_TOKEN", secret)
    items = [
        {"item_id": f"q{n}", "prompt": f"question {n}"}
        | {"candidates": [{"id": "a", "text": f"yes {n}"}, {"id": "b", "text": "no"}]}
        for n in range(PAGE + 5)
    ]
    with TestClient(standalone(), base_url="http://127.0.0.1/api/v1") as http:
        client = Client(http=http)
        assert client.me()["scope"] == "run"
        client.create_dataset("pushed")
        assert client.add_items("pushed", iter(items)) == {"added": PAGE + 5, "unchanged": 0}
        assert [i["item_id"] for i in client.items("pushed")] == [i["item_id"] for i in items]
        settings = {"dataset": "pushed", "name": "pushed-run", "protocol": "direct"}
        assert client.start_run("k", **settings)["started"]
        assert not client.start_run("k", **settings)["started"]
        assert client.wait("pushed-run", poll_s=0.05)["status"] == "finished"
        exported = CliRunner().invoke(app, ["export", "pushed-run", "--what", "decisions"])
        assert list(client.decisions("pushed-run")) == [
            json.loads(line) for line in exported.output.splitlines()
        ]
        assert len(list(client.judgments("pushed-run"))) == PAGE + 5
        saved = client.post_labels("pushed", [{"label_id": "x", "item_id": "q0", "answer": "a"}])
        assert saved[0]["saved"]
        assert [label["item_id"] for label in client.labels("pushed")] == ["q0"]
        with pytest.raises(ApiError) as refused:
            client.add_items("pushed", [items[0] | {"prompt": 3}])
        assert refused.value.status == 422
        assert [e["field"] for e in refused.value.problem["errors"]] == ["items[0].prompt"]
    with pytest.raises(ValueError, match="PCF_API_URL"):
        Client()


def test_a_client_escalates_reports_plans_claims_and_assigns(demo_engine, new_session):
    with new_session() as session:
        save_member("lead@example.org", "admin", session=session, added_by="test")
        secret = create_token("lead@example.org", "admin", session=session, actor=operator())
        session.commit()
    with TestClient(standalone(), base_url="http://127.0.0.1/api/v1") as http:
        client = Client(token=secret.secret, http=http)
        escalated = client.escalate("demo-pcf", alpha=0.3, signal="margin", queue=True)
        assert escalated["queued"]
        plan, version = client.plan("demo")
        assert plan["escalated"] == escalated["escalated"]
        assert client.report("demo-pcf")["title"] == "PCF report: demo-pcf"
        assert client.report("demo-pcf", kind="md").startswith("# PCF report: demo-pcf")
        changed, newer = client.set_plan("demo", version, labels_per_item=2)
        assert (changed["labels_per_item"], newer != version) == (2, True)
        with pytest.raises(ApiError) as stale:
            client.set_plan("demo", version, labels_per_item=3)
        assert stale.value.status == 412
        first = client.next_item("demo")
        assert first is not None
        assert client.next_item("demo")["item_id"] == first["item_id"]  # held for me
        assigned = client.assign("demo", "lead@example.org", first=2)["assigned"]
        assert len(assigned) == 2
        assert client.assign("demo", "lead@example.org", remove=True)["removed"] == 2
