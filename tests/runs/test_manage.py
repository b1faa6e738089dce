"""Run management (pcf/runs/manage.py): which backends this process can use, who may import,
run and delete, where the server's key may go, and cost caps."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from pcf.access import ALLOWED_BASE_URLS_ENV, AccessDeniedError, Actor, Role, operator
from pcf.cli import app
from pcf.errors import DataError
from pcf.labelling.audit import audit_log
from pcf.run_settings import DATASET_SEED, RunSettings
from pcf.runs.background import start_run
from pcf.runs.estimate import estimate_run
from pcf.runs.manage import (
    APP_BACKENDS,
    MAX_COST_ENV,
    CostCapError,
    RunConflictError,
    backend_problem,
    delete_run,
    import_dataset,
    import_upload,
    judge_run,
    open_run,
)
from pcf.runs.spec import RunSpec
from pcf.store import get_dataset, get_run, import_items, load_items, run_calls
from tests.factories import enrol, make_item, stored_run
from tests.shared_data import RB2
from tests.wire_server import Scripted, WireServer


def test_providers_need_their_key_or_a_base_url():
    assert {b: backend_problem(b, environ={}) for b in APP_BACKENDS} == {
        "simulated": None,
        "openai": "set OPENAI_API_KEY in the server's environment or give an OpenAI-compatible "
        "base URL",
        "anthropic": "set ANTHROPIC_API_KEY in the server's environment",
        "google": "set GOOGLE_API_KEY or GEMINI_API_KEY in the server's environment",
        "azure": "set AZURE_OPENAI_API_KEY in the server's environment",
    }
    keys = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "GEMINI_API_KEY": "k"}
    keys["AZURE_OPENAI_API_KEY"] = "k"
    assert {backend_problem(b, environ=keys) for b in APP_BACKENDS} == {None}
    assert backend_problem("openai", "http://localhost:1/v1", environ={}) is None
    assert "command line" in backend_problem("replay", environ={})


def _dataset(session, seed: int):
    dataset = import_items(
        [make_item(f"q{i}") for i in range(3)], session=session, name="ds", fmt="jsonl", seed=seed
    )
    session.commit()
    return dataset


def test_new_runs_are_marked_as_planned_from_the_dataset_seed(session):
    _dataset(session, seed=4)
    run, _ = judge_run(
        RunSpec("ds", "r", protocol="direct", seed=9), session=session, actor=operator()
    )
    assert run.settings.canonical_orders == DATASET_SEED
    again, report = judge_run(
        RunSpec("ds", "r", protocol="direct", seed=9), session=session, actor=operator()
    )
    assert (again.id, report.calls_made) == (run.id, 0)


def test_a_run_stored_before_the_dataset_seed_rule_resumes_only_if_its_plan_is_the_same(session):
    """Such a run took canonical orders from its own seed: equal to the dataset's, its plan is
    unchanged; otherwise resuming would mix two canonical orders, so it is refused."""
    dataset = _dataset(session, seed=0)
    for name, seed in (("same", 0), ("other", 3)):
        spec = RunSpec("ds", name, protocol="direct", seed=seed)
        stored_run(
            session,
            dataset.id,
            name=name,
            protocol="direct",
            backend=spec.backend,
            model=spec.model,
            k=1,
            schedule=spec.schedule,
            seed=seed,
            settings=RunSettings(identity=spec.identity()),
        )
    assert open_run(RunSpec("ds", "same", protocol="direct", seed=0), session=session)
    with pytest.raises(RunConflictError, match="canonical orders from its own seed 3"):
        open_run(RunSpec("ds", "other", protocol="direct", seed=3), session=session)


# ---------------------------------------------------------------- who may run, and the key

ALICE = Actor("alice@example.com", Role.ANNOTATOR)
RITA = Actor("rita@example.com", Role.REVIEWER)
VERA = Actor("vera@example.com", Role.VIEWER)
ADAM = Actor("adam@example.com", Role.ADMIN)
SERVER_KEY = "sk-server-key-that-must-stay-home-0001"
OWN_KEY = "sk-adams-own-key-for-one-run-0002"


@pytest.mark.parametrize("actor", [ALICE, RITA, VERA], ids=lambda a: a.role.value)
def test_only_admins_import_start_and_delete(engine, session, actor: Actor):
    enrol(session, actor, ADAM)
    with pytest.raises(AccessDeniedError, match="may not import"):
        import_dataset([make_item("q1")], session=session, actor=actor, name="x", fmt="jsonl")
    _dataset(session, seed=0)
    with pytest.raises(AccessDeniedError, match="may not start"):
        judge_run(RunSpec("ds", "r", protocol="direct"), session=session, actor=actor)
    with pytest.raises(AccessDeniedError, match="may not start"):
        start_run(engine, RunSpec("ds", "bg", protocol="direct"), actor=actor)
    judge_run(RunSpec("ds", "r", protocol="direct"), session=session, actor=ADAM)
    with pytest.raises(AccessDeniedError, match="may not delete"):
        delete_run("r", session=session, actor=actor)
    assert get_run("r", session=session) is not None


def test_imports_runs_and_deletes_are_in_the_audit_log(session):
    enrol(session, ADAM)
    import_dataset([make_item("q1")], session=session, actor=ADAM, name="ds", fmt="jsonl")
    judge_run(RunSpec("ds", "r", protocol="direct"), session=session, actor=ADAM)
    judge_run(RunSpec("ds", "r", protocol="direct"), session=session, actor=ADAM)
    delete_run("r", session=session, actor=ADAM)
    log = audit_log(session=session, actor=ADAM)
    assert [(e["action"], e["target"], e["actor"]) for e in log[::-1]] == [
        ("dataset_imported", "ds", ADAM.identity),
        ("run_started", "r", ADAM.identity),
        ("run_resumed", "r", ADAM.identity),
        ("run_deleted", "r", ADAM.identity),
    ]


@pytest.mark.skipif(not RB2.exists(), reason="../shared/data is absent")
def test_an_upload_imports_what_pcf_import_does_and_a_bad_row_imports_nothing(session, tmp_path):
    enrol(session, ADAM)
    session.commit()
    done = CliRunner().invoke(app, ["import", "rewardbench2", str(RB2), "--name", "cli"])
    assert done.exit_code == 0, done.output
    upload = import_upload(
        RB2.read_bytes(), RB2.name, session=session, actor=ADAM, name="app", fmt="rewardbench2"
    )
    cli = get_dataset("cli", session=session)
    assert cli is not None
    assert upload.n_items == cli.n_items == 120
    assert load_items(upload.id, session=session) == load_items(cli.id, session=session)

    rows = [json.loads(line) for line in RB2.read_text(encoding="utf-8").splitlines()]
    del rows[56]["prompt"]  # the 57th row; a Parquet file is RewardBench 2's by its suffix
    parquet = tmp_path / "rb2.parquet"
    pd.DataFrame(rows).to_parquet(parquet)
    with pytest.raises(DataError) as raised:
        import_upload(
            parquet.read_bytes(), "Factuality.parquet", session=session, actor=ADAM, name="bad"
        )
    assert [str(p) for p in raised.value.problems] == ["Factuality.parquet:57: prompt: missing"]
    assert get_dataset("bad", session=session) is None
    assert [e["target"] for e in audit_log(session=session, actor=ADAM)] == ["app", "cli"]


def listwise(request) -> Scripted:
    """A valid answer for the candidates the prompt shows, 1,000 tokens in and 200 out."""
    keys = re.findall(r'<candidate key="([^"]+)">', request.last_user_text)
    text = json.dumps(
        {
            "candidates": [
                {"key": k, "factuality": 9 - i, "hallucination_risk": 0.1, "rationale": "ok"}
                for i, k in enumerate(keys)
            ],
            "ranking": keys,
            "confidence": 0.8,
        }
    )
    return Scripted.answer(text, input_tokens=1000, output_tokens=200)


@pytest.fixture
def server(monkeypatch, session):
    """The wire server answering every call, the server's OpenAI key set, dataset ``ds``;
    adam is an admin."""
    enrol(session, ADAM)
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    for name in ("OPENAI_BASE_URL", ALLOWED_BASE_URLS_ENV, MAX_COST_ENV):
        monkeypatch.delenv(name, raising=False)
    _dataset(session, seed=0)
    with WireServer(listwise) as wire:
        yield wire


def at(wire: WireServer, name: str, **options) -> RunSpec:
    return RunSpec(
        "ds", name, backend="openai", model="m", base_url=wire.openai_base_url, k=2, **options
    )


def keys_sent(wire: WireServer) -> set[str]:
    return {r.headers.get("authorization", "") for r in wire.received}


def test_the_servers_key_never_goes_to_a_server_the_operator_did_not_list(session, server):
    with pytest.raises(AccessDeniedError, match="PCF_ALLOWED_BASE_URLS"):
        judge_run(at(server, "unlisted"), session=session, actor=ADAM)
    assert get_run("unlisted", session=session) is None
    assert server.request_count == 0
    judge_run(at(server, "own-key"), session=session, actor=ADAM, api_key=OWN_KEY)
    stored = json.dumps(
        [
            c.model_dump(mode="json")
            for c in run_calls(get_run("own-key", session=session).id, session=session)
        ]
    )
    events = json.dumps(audit_log(session=session, actor=ADAM))
    assert keys_sent(server) == {f"Bearer {OWN_KEY}"}
    assert OWN_KEY not in stored
    assert OWN_KEY not in events


def test_a_listed_server_gets_the_servers_key_and_the_operator_names_any(
    session, server, monkeypatch
):
    monkeypatch.setenv(
        ALLOWED_BASE_URLS_ENV, f"http://example.invalid/v1 {server.openai_base_url}/"
    )
    judge_run(at(server, "listed"), session=session, actor=ADAM)
    assert keys_sent(server) == {f"Bearer {SERVER_KEY}"}
    monkeypatch.delenv(ALLOWED_BASE_URLS_ENV)
    judge_run(at(server, "operator", seed=1), session=session, actor=operator())
    assert keys_sent(server) == {f"Bearer {SERVER_KEY}"}


# ---------------------------------------------------------------- cost caps

PRICE = (2.0, 8.0)  # USD per million tokens: each answered call costs $0.0036


@pytest.fixture
def priced(tmp_path, monkeypatch):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": list(PRICE)}), encoding="utf-8")
    monkeypatch.setenv("PCF_PRICES", str(prices))
    monkeypatch.setenv(ALLOWED_BASE_URLS_ENV, "")


def test_a_run_estimated_above_its_cap_is_refused_before_any_call(session, server, priced):
    spec = at(server, "capped", concurrency=1)
    cap = estimate_run(spec, session=session).cost_usd / 2
    with pytest.raises(CostCapError, match="cost cap"):
        judge_run(spec, session=session, actor=operator(), max_cost=cap)
    assert server.request_count == 0


def test_a_run_stops_at_its_cap_with_its_calls_stored_and_resumes_under_a_higher_one(
    session, server, priced, monkeypatch
):
    """A request goes out only when its reserved upper bound fits under the cap: the run stops
    within its cap, and a higher cap (here the operator's default) finishes it without asking
    a stored call again."""
    spec = at(server, "capped", concurrency=1, max_tokens=200)
    cap = estimate_run(spec, session=session).cost_usd * 1.01
    run, report = judge_run(spec, session=session, actor=operator(), max_cost=cap)
    made = server.request_count
    assert run.status == "capped"
    assert 0 < made < 6
    assert (report.calls_made, report.capped) == (made, 6 - made)
    assert len(run_calls(run.id, session=session)) == made
    assert run.cost_usd == pytest.approx(made * (1000 * PRICE[0] + 200 * PRICE[1]) / 1e6)
    assert run.cost_usd <= cap
    monkeypatch.setenv(MAX_COST_ENV, "1")
    run, report = judge_run(spec, session=session, actor=operator())
    assert run.status == "finished"
    assert len(run_calls(run.id, session=session)) == 6
    assert server.request_count == 6
    assert report.calls_made == 6 - made


def test_a_bad_operator_cap_is_named(session, server, priced, monkeypatch):
    monkeypatch.setenv(MAX_COST_ENV, "ten dollars")
    with pytest.raises(ValueError, match=MAX_COST_ENV):
        judge_run(at(server, "r"), session=session, actor=operator())
