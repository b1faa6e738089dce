"""The Runs page's provider batches: a run sent with --batch is listed with its state, and
its Collect button stores the answers of the batches that ended (real OpenAI SDK against the
wire server)."""

from __future__ import annotations

import pytest
from sqlmodel import Session, func, select
from streamlit.testing.v1 import AppTest

from pcf.access import operator
from pcf.runs.batch import submit_batches
from pcf.runs.spec import RunSpec
from pcf.store import Call, get_run
from tests.app import markdown_texts, open_page
from tests.judge_providers import OPENAI, use_environment
from tests.runs.test_batch import answer
from tests.wire_server import WireServer


def stored_calls(db: Session, name: str) -> int:
    db.expire_all()
    run = get_run(name, session=db)
    return db.exec(select(func.count()).select_from(Call).where(Call.run_id == run.id)).one()


def test_a_batch_run_is_listed_and_collected_from_the_page(
    app: AppTest, db: Session, monkeypatch: pytest.MonkeyPatch
):
    use_environment(monkeypatch, OPENAI)
    with WireServer(answer, batch_polls=1) as server:
        spec = RunSpec(
            "demo",
            "batched",
            backend="openai",
            model="gpt-test",
            base_url=server.openai_base_url,
            protocol="direct",
            limit=3,
        )
        submit_batches(spec, session=db, actor=operator())
        at = open_page(app, "runs")
        assert not at.exception, [e.message for e in at.exception]
        texts = markdown_texts(at)
        assert "**batched** — batch" in texts
        assert "0 of 1 batches collected, 3 requests sent." in texts

        at = at.button(key="runs_collect_batched").click().run()  # the batch is still running
        assert [s.value for s in at.success] == [
            "0 calls stored, 0 failed; 1 batches still running."
        ]
        assert stored_calls(db, "batched") == 0

        at = at.button(key="runs_collect_batched").click().run()  # now it has ended
        assert [s.value for s in at.success] == [
            "3 calls stored, 0 failed; 0 batches still running."
        ]
        assert stored_calls(db, "batched") == 3

    at = at.run()
    texts = markdown_texts(at)
    assert "**batched** — finished" in texts
    assert "1 of 1 batches collected, 3 requests sent." in texts
    assert "runs_collect_batched" not in [b.key for b in at.button]


def test_a_lost_batch_is_shown_and_forgotten_from_the_page(
    app: AppTest, db: Session, monkeypatch: pytest.MonkeyPatch
):
    """Collect finds the provider answers 404 for the batch: the page says so and offers to
    forget it, which stores its calls as failed calls and ends the run."""
    use_environment(monkeypatch, OPENAI)
    with WireServer(answer) as server:
        spec = RunSpec(
            "demo",
            "batched",
            backend="openai",
            model="gpt-test",
            base_url=server.openai_base_url,
            protocol="direct",
            limit=3,
        )
        (batch_id,) = submit_batches(spec, session=db, actor=operator())[1].batches
        server.batches.lose(batch_id)
        at = open_page(app, "runs")
        assert "runs_forget_batched" not in [b.key for b in at.button]

        at = at.button(key="runs_collect_batched").click().run()
        assert not at.exception, [e.message for e in at.exception]
        assert [s.value for s in at.success] == []
        assert len(at.warning) == 1
        assert at.warning[0].value.startswith(
            "The provider answers 404 (not found) for 1 of these batches"
        )
        at = at.run()  # as stored: the batch is still listed as lost
        assert len(at.warning) == 1

        at = at.button(key="runs_forget_batched").click().run()
        assert not at.exception, [e.message for e in at.exception]
        assert [s.value for s in at.success] == [
            "1 lost batches forgotten: 3 calls stored as failed (batch_lost); "
            "`pcf judge ... --retry-failed` asks them again."
        ]
    assert len(at.warning) == 0
    texts = markdown_texts(at)
    assert "**batched** — finished" in texts
    assert "1 of 1 batches collected, 3 requests sent." in texts
    assert stored_calls(db, "batched") == 3
    assert {"runs_collect_batched", "runs_forget_batched"}.isdisjoint(b.key for b in at.button)
