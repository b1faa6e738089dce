"""The cost estimate of a planned run (pcf/runs/estimate.py)."""

from __future__ import annotations

import pytest

from pcf.access import operator
from pcf.runs.estimate import estimate_run
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.store import get_run, import_items
from tests.factories import make_item


def test_a_new_model_sends_every_call_and_the_estimate_matches_the_run(db):
    spec = RunSpec("demo", "new", model="sim-new", k=3, executions=2)
    estimate = estimate_run(spec, session=db)
    assert (estimate.planned, estimate.stored, estimate.cached) == (52 * 3 * 2, 0, 0)
    assert estimate.to_call == 312
    assert estimate.cost_usd == 0.0
    judge_run(spec, session=db, actor=operator())
    run = get_run("new", session=db)
    # The simulated judge counts input tokens as the estimate does: prompt characters / 4.
    assert run.input_tokens == estimate.input_tokens
    assert run.output_tokens == pytest.approx(estimate.output_tokens, rel=0.2)
    again = estimate_run(spec, session=db)
    assert (again.resumes, again.stored, again.to_call) == (True, 312, 0)


def test_calls_answered_before_come_from_the_cache(db):
    estimate = estimate_run(RunSpec("demo", "k3", k=3, limit=10), session=db)
    # demo-pcf made the first three balanced orderings of execution 0 with the same model.
    assert (estimate.items, estimate.planned, estimate.cached, estimate.to_call) == (10, 30, 30, 0)
    assert estimate.input_tokens == 0


def test_a_real_model_is_priced_and_an_unknown_one_is_not(db):
    def estimate(model: str):
        spec = RunSpec("demo", "priced", backend="openai", model=model, protocol="direct")
        return estimate_run(spec, session=db, prices={"gpt-x": (1.0, 2.0)})

    priced = estimate("gpt-x")
    assert priced.planned == 52
    assert priced.cost_usd == pytest.approx(
        (priced.input_tokens * 1.0 + priced.output_tokens * 2.0) / 1e6
    )
    assert priced.output_tokens == 52 * 4 * 40
    assert estimate("my-local-model").cost_usd is None


def test_a_run_of_the_same_name_with_other_settings_is_a_conflict(db):
    estimate = estimate_run(RunSpec("demo", "demo-pcf", k=3), session=db)
    assert estimate.resumes
    assert estimate.conflict == (
        "run 'demo-pcf' exists with other settings (executions: 3 -> 1, k: 7 -> 3)"
    )


def test_the_estimate_plans_with_the_dataset_seed_as_the_engine_does(session):
    """After a run on a dataset imported with seed 5, a second run of the same calls under
    another name is all cache hits in the estimate: it planned the very same prompts."""
    items = [make_item(f"q{i}") for i in range(4)]
    import_items(items, session=session, name="seeded", fmt="jsonl", seed=5)
    session.commit()
    judge_run(RunSpec("seeded", "first", k=3, seed=2), session=session, actor=operator())
    estimate = estimate_run(RunSpec("seeded", "second", k=3, seed=2), session=session)
    assert (estimate.planned, estimate.cached, estimate.to_call) == (12, 12, 0)
    other_seed = estimate_run(RunSpec("seeded", "third", k=3, seed=8), session=session)
    assert other_seed.cached == 0  # the simulated judge of another seed is another judge


@pytest.mark.parametrize("model", ["sim-primacy", "gpt-x", "gpt-unpriced"])
def test_an_estimate_made_a_few_items_at_a_time_is_the_same(db, monkeypatch, model):
    """Chunks of 7 items (the limit of 30 falls inside one), a run half stored: the same."""
    backend = "simulated" if model.startswith("sim") else "openai"
    spec = RunSpec("demo", "half", backend=backend, model=model, k=3, limit=30)
    judge_run(RunSpec("demo", "half", k=3, limit=12), session=db, actor=operator())
    if backend != "simulated":
        spec = RunSpec("demo", "other", backend=backend, model=model, k=3, limit=30)
    whole = estimate_run(spec, session=db, prices={"gpt-x": (1.0, 2.0)})
    monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", 7)
    assert estimate_run(spec, session=db, prices={"gpt-x": (1.0, 2.0)}) == whole
    assert whole.items == 30
