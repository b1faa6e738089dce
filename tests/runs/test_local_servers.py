"""`pcf judge` on a self-hosted OpenAI-compatible server (``openai-compatible/``, ``ollama/``,
``vllm/``) through the real OpenAI SDK at the wire server: a server slower than the timeout
gets one request per call (a timed-out request still runs there: sent again it would queue
behind it), and the message names the timeout and how to raise it."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, select
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from pcf.analysis.markdown import escape_markdown
from pcf.cli import app
from pcf.labelling.membership import set_local_name
from pcf.store import Call, audit_events, get_run
from tests.app import APP
from tests.runs.processes import import_dataset
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireServer

ITEMS, K = 2, 2
PLANNED = ITEMS * K
HANG_S = 120.0
"""How long the slow server holds each request: far past the timeout; only a hang waits it."""
runner = CliRunner()


@pytest.fixture
def dataset(tmp_path, isolated_database, monkeypatch) -> None:
    """Dataset ``ds``: 2 items of 4 candidates; no provider settings in the environment."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "PCF_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    import_dataset(tmp_path, ITEMS)


def judge(server: WireServer, *extra: str) -> list[str]:
    return [
        *("judge", "ds", "--name", "r", "--model", "openai-compatible/tiny"),
        *("--base-url", server.openai_base_url, "--k", str(K), "--concurrency", "2", *extra),
    ]


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_a_server_slower_than_the_timeout_gets_one_request_per_call(
    dataset, session: Session, monkeypatch, given: str
) -> None:
    """Each call is sent once, not again into the busy queue: the server received exactly the
    planned calls; every call is stored failed with a message naming the timeout, and the
    invocation's timeout is recorded in the audit log."""
    if given == "environment":
        monkeypatch.setenv("PCF_TIMEOUT", "0.3")
    flag = ("--timeout", "0.3") if given == "flag" else ()
    with WireServer(lambda _: Scripted.answer("{}", delay_s=HANG_S)) as server:
        result = runner.invoke(app, judge(server, *flag))
        asked = server.request_count
    assert result.exit_code == 1, result.output  # most calls failed
    assert asked == PLANNED
    assert "within 0.3 s; raise the wait with --timeout SECONDS or PCF_TIMEOUT" in result.output
    run = get_run("r", session=session)
    assert run is not None
    calls = session.exec(select(Call).where(Call.run_id == run.id)).all()
    assert [c.attempts for c in calls] == [1] * PLANNED
    assert all(
        c.error and c.error.startswith(f"timeout: no answer from {server.openai_base_url}")
        for c in calls
    )
    started = audit_events(session=session, limit=1)[0]
    assert started.details["timeout_s"] == 0.3


def test_a_bad_timeout_is_refused_and_leaves_no_run(dataset, session: Session, monkeypatch):
    monkeypatch.setenv("PCF_TIMEOUT", "soon")
    with WireServer(lambda r: Scripted.answer(listwise_text(r.last_user_text))) as server:
        result = runner.invoke(app, judge(server))
        assert server.request_count == 0
    assert result.exit_code == 2
    assert "PCF_TIMEOUT='soon': give the seconds to wait for an answer" in result.output
    assert get_run("r", session=session) is None


def test_a_run_on_a_compatible_server_is_named_by_provider_and_address(
    dataset, session: Session
) -> None:
    """The summary, `pcf runs` and the sidebar name the judge ``openai-compatible/tiny at
    SERVER``, never ``openai/tiny``; the summaries say ``attempts`` where they count requests."""
    with WireServer(lambda r: Scripted.answer(listwise_text(r.last_user_text))) as server:
        result = runner.invoke(app, judge(server))
    assert result.exit_code == 0, result.output
    judged = f"openai-compatible/tiny at {server.openai_base_url}"
    summary = json.loads(result.stdout)
    assert summary["judge"] == judged
    assert summary["attempts"] == summary["this_invocation"]["attempts"] == PLANNED
    listed = json.loads(runner.invoke(app, ["runs"]).stdout)["runs"]
    assert [(run["judge"], run["attempts"]) for run in listed] == [(judged, PLANNED)]
    assert "base_url" not in listed[0]
    set_local_name("Ada", session=session)
    session.commit()
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert at.sidebar.caption[0].value == f"r: pcf, K={K}, {escape_markdown(judged)}"
