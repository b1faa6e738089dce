"""A run's typed settings: every run stored by this and earlier releases parses and is written
back as it was stored, a newer release's keys are kept, and bad stored settings name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from sqlmodel import Session

from pcf.run_settings import UNVERSIONED, RunSettings, Stopping, StopRecord, parse_run_settings
from pcf.runs.spec import RunSpec
from pcf.store import get_engine, get_run, import_items, list_runs, set_run_settings, upgrade
from pcf.weights import DEFAULT_WEIGHTS, Weights
from tests.factories import make_item, stored_run
from tests.store.legacy import restore


def stored_settings(url: str) -> dict[str, dict[str, Any]]:
    """Each run's settings as the database holds them (JSON, keys in stored order), by name."""
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as connection:
        found = connection.execute(text("SELECT name, settings FROM run ORDER BY id")).all()
    engine.dispose()
    return {name: json.loads(value) if isinstance(value, str) else value for name, value in found}


def assert_read_and_written_back_unchanged(stored: dict[str, Any]) -> RunSettings:
    settings = parse_run_settings(stored)
    assert json.dumps(settings.stored()) == json.dumps(stored)  # the same keys, order and values
    return settings


EARLIER_FORMS = {
    "before settings were recorded": {},
    "before canonical orders came from the dataset seed": {
        "identity": {"protocol": "pcf", "k": 3, "schedule": "balanced", "executions": 1},
    },
    "stops before versions, a stopping record before its versions": {
        "identity": {"protocol": "pcf", "k": 7, "adaptive": "certain", "max_calls": None},
        "ballpark_guard": True,
        "canonical_orders": "dataset_seed",
        "stops": {"q1": {"calls": 5, "reason": "certain", "winner": 0}},
        "stopping": {"policy": "certain", "risk": None, "stop_on": [1.0, 2.0, 1.0, 1.0]},
    },
    "a newer release's keys, at the top and inside": {
        "identity": {"protocol": "direct", "k": 1, "top_p": 0.9},
        "canonical_orders": "dataset_seed",
        "stops": {"q1": {"calls": 2, "reason": "budget", "winner": -1, "version": 9, "why": "x"}},
        "shadow_model": {"name": "m", "share": 0.1},
    },
}


@pytest.mark.parametrize("stored", EARLIER_FORMS.values(), ids=EARLIER_FORMS.keys())
def test_settings_of_earlier_and_later_releases_are_read_and_written_back_unchanged(stored):
    settings = assert_read_and_written_back_unchanged(stored)
    assert settings.is_adaptive == (stored.get("identity", {}).get("adaptive", "off") != "off")
    if "stops" in stored and "version" not in stored["stops"]["q1"]:
        assert settings.stops["q1"].version == UNVERSIONED
        assert settings.identity.weights == DEFAULT_WEIGHTS  # stop_on unset: the proposed ones
    assert settings.plans_from_dataset_seed == ("canonical_orders" in stored)


def test_every_run_of_the_release_before_migrations_parses_and_is_read_by_the_store(
    isolated_database,
):
    restore(isolated_database)
    before = stored_settings(isolated_database)
    assert len(before) == 6
    for stored in before.values():
        assert_read_and_written_back_unchanged(stored)
    upgrade(create_engine(isolated_database, poolclass=NullPool))
    with Session(get_engine(isolated_database)) as session:
        for run in list_runs(session=session):
            assert isinstance(run.settings, RunSettings)
            assert (run.settings.identity.protocol, run.settings.identity.k) == (
                run.protocol,
                run.k,
            )
            assert run.settings.stored() == before[run.name]


def test_every_run_of_the_demo_and_of_every_shape_parses(demo_engine, mixed_runs, tmp_path):
    url = demo_engine.url.render_as_string(hide_password=False)
    found = stored_settings(url)
    assert {"demo-pcf", "mixed/adaptive", "mixed/replay", "pairs/apoc"} <= found.keys()
    parsed = {name: assert_read_and_written_back_unchanged(s) for name, s in found.items()}
    assert parsed["mixed/adaptive"].is_adaptive
    assert parsed["mixed/adaptive"].stops
    assert parsed["mixed/replay"].is_simulated("replay")
    assert not parsed["demo-pcf"].is_adaptive
    assert parsed["demo-pcf"].is_simulated("simulated")


def test_a_write_keeps_unknown_keys_and_the_stored_order(session):
    """A run stored by a newer release, updated by this one: its keys stay, in their order,
    and the new ones come after them."""
    dataset = import_items([make_item("q")], session=session, name="ds", fmt="jsonl")
    newer = {"identity": {"protocol": "pcf", "future": 1}, "shadow_model": {"name": "m"}}
    stored_run(session, dataset.id, name="newer", settings=parse_run_settings(newer))
    run = get_run("newer", session=session)
    set_run_settings(run, run.settings.with_batch(5, 2.5), session=session)
    stops = {"q": StopRecord(calls=3, reason="certain", winner=1, version=4)}
    set_run_settings(run, run.settings.with_stops(stops, Stopping(versions=[4])), session=session)
    set_run_settings(run, run.settings.with_unknown_usage(2), session=session)
    set_run_settings(run, run.settings.with_unknown_usage(3), session=session)
    session.commit()
    stored = stored_settings(session.get_bind().url.render_as_string(hide_password=False))
    assert list(stored["newer"]) == [
        *("identity", "batch_limit", "batch_max_cost_usd", "stops", "stopping"),
        *("answers_without_usage", "shadow_model"),
    ]
    assert stored["newer"]["identity"] == {"protocol": "pcf", "future": 1}
    assert stored["newer"]["shadow_model"] == {"name": "m"}
    assert stored["newer"]["answers_without_usage"] == 5
    assert stored["newer"]["stops"] == {
        "q": {"calls": 3, "reason": "certain", "winner": 1, "version": 4}
    }
    session.expire_all()
    again = get_run("newer", session=session).settings
    assert (again.batch_limit, again.batch_max_cost_usd, again.usage) == (5, 2.5, 5)


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec("ds", "r", k=5, adaptive="confident", risk=0.05, max_calls=9),
        RunSpec(
            "ds", "r", structured_output=False, adaptive="certain", stop_on=Weights(1, 1, 1, 1)
        ),
        RunSpec("ds", "r", protocol="apoc", temperature=0.5),
    ],
    ids=["confident", "certain-on-equal-weights", "apoc"],
)
def test_the_identity_a_spec_stores_makes_the_same_spec(spec):
    stored = parse_run_settings({"identity": spec.identity().stored()})
    assert RunSpec("ds", "r", **stored.identity.spec_values()) == spec


@pytest.mark.parametrize(
    ("stored", "field"),
    [
        ({"identity": {"k": "many"}}, "identity.k"),
        ({"stops": {"q1": {"calls": 3, "winner": 0}}}, "stops.q1.reason"),
        ({"ballpark_guard": "perhaps"}, "ballpark_guard"),
    ],
)
def test_settings_that_do_not_parse_name_the_field(stored, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        parse_run_settings(stored)
