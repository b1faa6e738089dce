"""Which backends this process can use (pcf/runs/manage.py)."""

from __future__ import annotations

import pytest

from pcf.runs.manage import (
    CANONICAL_SETTING,
    RunConflictError,
    backend_availability,
    judge_run,
    open_run,
)
from pcf.runs.spec import RunSpec
from pcf.store import create_run, import_items
from tests.factories import make_item


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


def _dataset(session, seed: int):
    dataset = import_items(
        [make_item(f"q{i}") for i in range(3)], session=session, name="ds", fmt="jsonl", seed=seed
    )
    session.commit()
    return dataset


def test_new_runs_are_marked_as_planned_from_the_dataset_seed(session):
    _dataset(session, seed=4)
    run, _ = judge_run(RunSpec("ds", "r", protocol="direct", seed=9), session=session)
    assert run.settings[CANONICAL_SETTING] == "dataset_seed"
    again, report = judge_run(RunSpec("ds", "r", protocol="direct", seed=9), session=session)
    assert (again.id, report.calls_made) == (run.id, 0)


def test_a_run_stored_before_the_dataset_seed_rule_resumes_only_if_its_plan_is_the_same(session):
    """Such a run took canonical orders from its own seed: equal to the dataset's, its plan is
    unchanged; otherwise resuming would mix two canonical orders, so it is refused."""
    dataset = _dataset(session, seed=0)
    for name, seed in (("same", 0), ("other", 3)):
        spec = RunSpec("ds", name, protocol="direct", seed=seed)
        create_run(
            name,
            session=session,
            dataset_id=dataset.id,
            protocol="direct",
            backend=spec.backend,
            model=spec.model,
            k=1,
            schedule=spec.schedule,
            seed=seed,
            settings={"identity": spec.identity()},
        )
    session.commit()
    assert open_run(RunSpec("ds", "same", protocol="direct", seed=0), session=session)
    with pytest.raises(RunConflictError, match="canonical orders from its own seed 3"):
        open_run(RunSpec("ds", "other", protocol="direct", seed=3), session=session)
