"""The Runs page: the runs table, the cost estimate, and a run started from the page."""

from __future__ import annotations

import json
import time

import pytest
from sqlmodel import Session, func, select
from streamlit.testing.v1 import AppTest

from pcf.runs.study import DEMO_RUNS
from pcf.store import Call, delete_run, get_run
from tests.app import open_page
from tests.wire_server import WireServer, fixed_json

LISTWISE = json.dumps(
    {
        "candidates": [
            {"key": k, "factuality": 9 - i, "hallucination_risk": 0.1, "rationale": "ok"}
            for i, k in enumerate("ABCD")
        ],
        "ranking": list("ABCD"),
        "confidence": 0.8,
    }
)
"""A listwise answer for four candidates keyed A-D (the prompts' default keys)."""

TIMEOUT_S = 300  # only bounds a hang: a loaded machine may take minutes


@pytest.fixture
def at(app: AppTest, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The Runs page on the demo database, with no provider key in the environment."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    page = open_page(app, "runs")
    assert not page.exception, [e.message for e in page.exception]
    return page


def shown(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def stored_calls(db: Session, name: str) -> int:
    db.expire_all()
    run = get_run(name, session=db)
    if run is None:
        return 0
    return db.exec(select(func.count()).select_from(Call).where(Call.run_id == run.id)).one()


def configure(at: AppTest, **values) -> AppTest:
    """Set the start form's widgets by key suffix (``k=3`` sets ``runs_k``) and rerun."""
    for name, value in values.items():
        widget = next(w for w in at.get_by_key(f"runs_{name}") if hasattr(w, "set_value"))
        widget.set_value(value)
    return at.run()


def test_the_tables_list_the_datasets_runs_with_their_settings_and_totals(at, db):
    settings, usage = (frame.value for frame in at.dataframe[:2])
    assert settings["run"].tolist() == usage["run"].tolist() == [s.run_name for s in DEMO_RUNS]
    pcf = settings.merge(usage, on="run").set_index("run").loc["demo-pcf"]
    stored = get_run("demo-pcf", session=db)
    assert (pcf["protocol"], pcf["K"], pcf["schedule"], pcf["executions"]) == (
        "pcf",
        7,
        "balanced",
        3,
    )
    assert (pcf["calls"], pcf["cache hits"], pcf["failures"]) == (
        stored.calls_made,
        stored.cache_hits,
        stored.failures,
    )
    assert pcf["input tokens"] == stored.input_tokens


def test_the_estimate_counts_items_times_k_times_executions_less_the_cache(at):
    # The default form (pcf, K=7, 1 execution, sim-primacy) is all in demo-pcf's cache.
    assert shown(at)["Planned calls"] == str(52 * 7)
    assert shown(at)["From cache"] == str(52 * 7)
    assert shown(at)["Calls to send"] == "0"
    configure(at, model="sim-new", k=3, executions=2, limit=10)
    assert shown(at)["Planned calls"] == str(10 * 3 * 2)
    assert shown(at)["Calls to send"] == str(10 * 3 * 2)
    assert shown(at)["Estimated cost"] == "$0.0000"


def test_a_large_run_is_estimated_when_asked_and_its_estimate_follows_the_form(at):
    """Over 20,000 planned calls the page renders no prompt until asked; the estimate shown is
    that of the form's settings, and a change asks again."""
    configure(at, model="sim-new", k=400)
    assert "Planned calls" not in shown(at)
    at.button(key="runs_estimate").click().run()
    assert shown(at)["Planned calls"] == f"{52 * 400:,}"
    assert shown(at)["Calls to send"] == f"{52 * 400:,}"
    configure(at, seed=1)  # another run: its estimate is asked for again
    assert "Planned calls" not in shown(at)
    configure(at, seed=0)
    assert shown(at)["Planned calls"] == f"{52 * 400:,}"


def test_a_run_of_that_name_with_other_settings_cannot_start(at):
    configure(at, name="demo-pcf", k=5)
    assert any("exists with other settings" in e.value for e in at.error)
    assert at.button(key="runs_start").disabled


def test_a_priced_provider_model_is_estimated_and_an_unknown_one_is_unpriced(at):
    configure(at, model="openai/gpt-4o-mini")
    assert at.button(key="runs_start").disabled
    configure(at, base_url="http://localhost:9/v1")
    assert not at.warning
    assert shown(at)["Estimated cost"].startswith("$")
    assert not at.button(key="runs_start").disabled
    configure(at, model="openai/my-local-model")
    assert shown(at)["Estimated cost"] == "unpriced"
    configure(at, model="google/gemini-2.5-flash", base_url="")
    assert shown(at)["Estimated cost"].startswith("$")


def test_providers_without_a_key_cannot_start(at, monkeypatch):
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for model, variable in [
        ("anthropic/claude-3-5-haiku-20241022", "ANTHROPIC_API_KEY"),
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("google/gemini-2.5-flash", "GOOGLE_API_KEY or GEMINI_API_KEY"),
        ("azure/my-deployment", "AZURE_OPENAI_API_KEY"),
    ]:
        configure(at, model=model)
        assert any(variable in w.value for w in at.warning), model
        assert at.button(key="runs_start").disabled
    configure(at, model="mistral/large")
    assert "name it provider" in at.error[0].value


def test_a_name_taken_with_other_settings_cannot_start(at):
    configure(at, name="demo-pcf", k=3)
    assert "exists with other settings" in at.error[0].value
    assert at.button(key="runs_start").disabled


def test_a_run_started_from_the_page_finishes_and_stores_its_calls(at, db):
    configure(at, name="page-run", model="sim-page", k=3, limit=5)
    assert shown(at)["Calls to send"] == "15"
    at.button(key="runs_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    deadline = time.monotonic() + TIMEOUT_S
    while "**page\\-run** — finished" not in [m.value for m in at.markdown]:  # name escaped
        assert time.monotonic() < deadline, "the run did not finish in time"
        time.sleep(0.2)
        at.run()
    assert stored_calls(db, "page-run") == 15
    assert shown(at)["Attempts"] == "15"
    assert at.get("progress")[0].proto.value == 100
    assert "page-run" in at.dataframe[0].value["run"].tolist()
    # Starting it again resumes: nothing left to call.
    assert shown(at)["Already stored"] == "15"
    assert shown(at)["Calls to send"] == "0"


def test_a_run_deleted_after_it_finished_is_said_gone(at, db):
    """The progress of a run started from the page stays while the server runs; once the run
    is deleted (``pcf runs delete``) the page says so instead of failing on its summary."""
    configure(at, name="gone-run", model="sim-gone", k=2, limit=2)
    at.button(key="runs_start").click().run()
    finished(at, "gone-run")
    delete_run("gone-run", session=db)
    db.commit()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert "**gone\\-run** — finished" in [m.value for m in at.markdown]
    assert "Run deleted since: its summary is gone." in [c.value for c in at.caption]
    assert "Attempts" not in shown(at)


SERVER_KEY = "sk-server-key-that-must-stay-home-0003"
OWN_KEY = "sk-a-key-typed-for-one-run-0004"


def finished(at: AppTest, name: str) -> AppTest:
    """Rerun the page until the background run ``name`` has finished (or failed)."""
    deadline = time.monotonic() + TIMEOUT_S
    escaped = name.replace("-", "\\-")
    ended = {f"**{escaped}** — finished", f"**{escaped}** — failed"}
    while not ended & {m.value for m in at.markdown}:
        assert time.monotonic() < deadline, "the run did not end in time"
        time.sleep(0.2)
        at.run()
    return at


def test_the_servers_key_goes_only_to_listed_servers_from_the_page(app, monkeypatch, db):
    """A base URL typed in the page that the operator did not list never receives the
    server's key: the page asks for a key for that run; a listed one gets the server's."""
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.delenv("PCF_ALLOWED_BASE_URLS", raising=False)
    with WireServer(fixed_json(LISTWISE)) as wire:
        at = open_page(app, "runs")
        configure(at, base_url=wire.openai_base_url, model="openai/m", k=2, limit=2)
        assert at.button(key="runs_start").disabled
        assert any("PCF_ALLOWED_BASE_URLS" in i.value for i in at.info)
        configure(at, name="typed", own_key=OWN_KEY)
        at.button(key="runs_start").click().run()
        finished(at, "typed")
        assert {r.headers["authorization"] for r in wire.received} == {f"Bearer {OWN_KEY}"}
        monkeypatch.setenv("PCF_ALLOWED_BASE_URLS", wire.openai_base_url)
        at = open_page(app, "runs")
        configure(at, base_url=wire.openai_base_url, model="openai/m", k=2, limit=2)
        assert not [w for w in at.text_input if w.key == "runs_own_key"]
        configure(at, name="listed", model="openai/m2")  # another judge: the cache cannot answer
        at.button(key="runs_start").click().run()
        finished(at, "listed")
        sent = [r.headers["authorization"] for r in wire.received]
    assert set(sent[:4]) == {f"Bearer {OWN_KEY}"}
    assert set(sent[4:]) == {f"Bearer {SERVER_KEY}"}
    assert stored_calls(db, "typed") == stored_calls(db, "listed") == 4
    db.expire_all()
    stored = json.dumps([c.model_dump(mode="json") for c in db.exec(select(Call)).all()])
    assert OWN_KEY not in stored
    assert SERVER_KEY not in stored
