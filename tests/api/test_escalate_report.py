"""``POST /runs/{name}/escalate`` is ``pcf escalate``'s JSON (and queues as ``--queue``), and
``GET /runs/{name}/report`` is what ``pcf report`` writes, in the form the Accept header asks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pcf.cli import app

pytestmark = pytest.mark.db
runner = CliRunner()


def test_escalate_is_pcf_escalates_json_and_queues_only_with_the_right_to_resolve(
    demo_engine, client, token
):
    reviewer, runner_token = token("rev@example.org", "reviewer", "admin"), token("ci@example.org")
    asked = {"alpha": 0.3, "signal": "margin"}
    answer = client.post("/api/v1/runs/demo-pcf/escalate", headers=reviewer, json=asked)
    cli = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "0.3", "--signal", "margin"])
    assert answer.json() == json.loads(cli.stdout) | {"queued": False}
    assert client.get("/api/v1/datasets/demo/plan", headers=reviewer).json()["escalated"] == []

    run_scope = token("pipe@example.org", "admin", "run")  # may run, not resolve
    queue = asked | {"queue": True}
    refused = client.post("/api/v1/runs/demo-pcf/escalate", headers=run_scope, json=queue)
    assert refused.status_code == 403
    assert "scope is run" in refused.json()["detail"]
    queued = client.post("/api/v1/runs/demo-pcf/escalate", headers=reviewer, json=queue).json()
    assert queued["queued"] is True
    plan = client.get("/api/v1/datasets/demo/plan", headers=runner_token).json()
    assert plan["escalated"] == queued["escalated"] != []

    too_few = client.post("/api/v1/runs/demo-pcf/escalate", headers=reviewer, json={"alpha": 0.05})
    assert too_few.status_code == 422
    assert "need at least 45" in too_few.json()["detail"]
    tiny = client.post("/api/v1/runs/demo-pcf/escalate", headers=reviewer, json={"delta": 0})
    assert [e["field"] for e in tiny.json()["errors"]] == ["delta"]


def test_the_report_is_pcf_reports_json_markdown_or_html_by_accept(
    demo_engine, client, token, tmp_path
):
    viewer = token("view@example.org", "viewer", "read")
    written = runner.invoke(app, ["report", "demo-pcf", "--out", str(tmp_path)])
    assert written.exit_code == 0, written.output
    report = "/api/v1/runs/demo-pcf/report"
    as_json = client.get(report, headers=viewer)
    assert as_json.headers["content-type"] == "application/json"
    assert as_json.json() == json.loads((tmp_path / "report.json").read_text())

    markdown = client.get(report, headers=viewer | {"Accept": "text/markdown, */*;q=0.1"})
    assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"
    assert markdown.text.startswith("# PCF report: demo-pcf\n")
    file_lines = (tmp_path / "report.md").read_text().splitlines()
    tables = [line for line in file_lines if line.startswith("|")]
    assert tables == [line for line in markdown.text.splitlines() if line.startswith("|")]

    page = client.get(report, headers=viewer | {"Accept": "text/html"})
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.text == (tmp_path / "report.html").read_text()

    refused = client.get(report, headers=viewer | {"Accept": "image/png"})
    assert refused.status_code == 406
    assert "text/markdown" in refused.json()["detail"]
    assert client.get("/api/v1/runs/nope/report", headers=viewer).status_code == 404
