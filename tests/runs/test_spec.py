"""What a run is: the protocol's fixed settings, validation and the default name
(pcf/runs/spec.py)."""

from __future__ import annotations

import pytest

from pcf.runs.manage import open_run
from pcf.runs.spec import RunSpec
from pcf.store import import_items
from tests.factories import make_item


@pytest.mark.parametrize(
    ("protocol", "fixed"),
    [
        ("direct", {"k": 1, "schedule": "balanced", "executions": 1}),
        ("repeated", {"k": 5, "schedule": "repeated", "executions": 2}),
        ("apoc", {"k": 3, "schedule": "apoc", "executions": 1}),
        ("pcf", {"k": 5, "schedule": "random", "executions": 2}),
    ],
)
def test_each_protocol_fixes_its_settings(protocol, fixed):
    spec = RunSpec("ds", protocol=protocol, k=5, schedule="random", executions=2)
    assert {key: getattr(spec, key) for key in fixed} == fixed


def test_the_default_name_encodes_the_settings_and_a_given_name_wins():
    spec = RunSpec("rb2", backend="openai", model="gpt-x", k=7, executions=3, seed=2)
    assert spec.run_name == "rb2/pcf/openai/gpt-x/k7-balanced-x3-s2"
    assert RunSpec("rb2", "mine").run_name == "mine"


def test_the_identity_leaves_out_what_may_change_between_resumptions():
    spec = RunSpec("ds", protocol="direct", concurrency=3, limit=4)
    assert spec.identity().stored() == {
        "protocol": "direct",
        "k": 1,
        "schedule": "balanced",
        "executions": 1,
        "seed": 0,
        "temperature": 0.0,
        "max_tokens": 2048,
        "ballpark_guard": True,
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"protocol": "vote"}, "unknown protocol 'vote'"),
        ({"backend": "llm"}, "unknown backend 'llm'"),
        ({"schedule": "spiral"}, "unknown schedule 'spiral'"),
        ({"k": 0}, "at least 1"),
        ({"executions": 0}, "at least 1"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        RunSpec("ds", **settings)


def test_structured_output_off_is_part_of_the_identity_and_a_stored_run_keeps_it(session):
    """Off, it is in the identity (a run resumes only with it off); on, it is not, so a run
    stored before the setting existed keeps its identity and resumes with the schema."""
    assert "structured_output" not in RunSpec("ds").identity().stored()
    off = RunSpec("ds", "r", structured_output=False)
    assert off.identity().stored()["structured_output"] is False
    import_items([make_item("q")], session=session, name="ds", fmt="jsonl")
    run = open_run(off, session=session)
    assert RunSpec.from_run(run, "ds").structured_output is False
    assert RunSpec.from_run(open_run(RunSpec("ds", "on"), session=session), "ds").structured_output
