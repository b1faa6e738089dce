"""The runs table, backend availability and the cost estimate of a planned run."""

from __future__ import annotations

import pytest

from pcf.reports.tables import RUN_COLUMNS, runs_table
from pcf.runs.estimate import estimate_run
from pcf.runs.manage import backend_availability, judge_run
from pcf.runs.spec import RunSpec
from pcf.store import get_engine, get_run, list_runs, session_scope
from tests.demo_database import copy_demo


@pytest.fixture
def session(isolated_database):
    copy_demo(isolated_database)
    with session_scope(get_engine()) as s:
        yield s


def test_runs_table_has_one_row_per_run(session):
    table = runs_table(list_runs(session=session))
    assert tuple(table.columns) == RUN_COLUMNS
    assert table["run"].tolist() == ["demo-direct", "demo-pcf", "demo-repeated"]
    pcf = table.set_index("run").loc["demo-pcf"]
    # The canonical calls were answered by the cache: demo-direct had made them.
    assert (pcf["calls"], pcf["cache hits"]) == (52 * 7 * 3 - 52, 52)
    assert (pcf["K"], pcf["judge"]) == (7, "simulated: sim-primacy")


def test_providers_need_their_key_or_a_base_url():
    assert backend_availability(environ={}) == {
        "simulated": None,
        "openai": "set OPENAI_API_KEY in the server's environment or give an OpenAI-compatible "
        "base URL",
        "anthropic": "set ANTHROPIC_API_KEY in the server's environment",
    }
    with_keys = backend_availability(environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert set(with_keys.values()) == {None}
    assert backend_availability("http://localhost:1/v1", environ={})["openai"] is None


def test_a_new_model_sends_every_call_and_the_estimate_matches_the_run(session):
    spec = RunSpec("demo", "new", model="sim-new", k=3, executions=2)
    estimate = estimate_run(spec, session=session)
    assert (estimate.planned, estimate.stored, estimate.cached) == (52 * 3 * 2, 0, 0)
    assert estimate.to_call == 312
    assert estimate.cost_usd == 0.0
    judge_run(spec, session=session)
    run = get_run("new", session=session)
    # The simulated judge counts input tokens as the estimate does: prompt characters / 4.
    assert run.input_tokens == estimate.input_tokens
    assert run.output_tokens == pytest.approx(estimate.output_tokens, rel=0.2)
    again = estimate_run(spec, session=session)
    assert (again.resumes, again.stored, again.to_call) == (True, 312, 0)


def test_calls_answered_before_come_from_the_cache(session):
    estimate = estimate_run(RunSpec("demo", "k3", k=3, limit=10), session=session)
    # demo-pcf made the first three balanced orderings of execution 0 with the same model.
    assert (estimate.items, estimate.planned, estimate.cached, estimate.to_call) == (10, 30, 30, 0)
    assert estimate.input_tokens == 0


def test_a_real_model_is_priced_and_an_unknown_one_is_not(session):
    def estimate(model: str):
        spec = RunSpec("demo", "priced", backend="openai", model=model, protocol="direct")
        return estimate_run(spec, session=session, prices={"gpt-x": (1.0, 2.0)})

    priced = estimate("gpt-x")
    assert priced.planned == 52
    assert priced.cost_usd == pytest.approx(
        (priced.input_tokens * 1.0 + priced.output_tokens * 2.0) / 1e6
    )
    assert priced.output_tokens == 52 * 4 * 40
    assert estimate("my-local-model").cost_usd is None


def test_a_run_of_the_same_name_with_other_settings_is_a_conflict(session):
    estimate = estimate_run(RunSpec("demo", "demo-pcf", k=3), session=session)
    assert estimate.resumes
    assert estimate.conflict == (
        "run 'demo-pcf' exists with other settings (executions: 3 -> 1, k: 7 -> 3)"
    )
