"""Batch mode through the real OpenAI and Anthropic SDKs against the wire server's batch APIs.

The server answers every prompt with the same deterministic judgment, whether it comes as a
call or inside a batch; so a study made with batches must store the judgments the same study
made call by call stores, at half the cost, and each request is paid (run by the server) once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import Counter
from dataclasses import replace

import pytest
from sqlmodel import Session, col, select
from typer.testing import CliRunner

from pcf.access import operator
from pcf.cli import app
from pcf.judges import make_judge
from pcf.judges.batch_api import batch_client
from pcf.prices import batch_prices
from pcf.runs.batch import collect_runs, submit_batches
from pcf.runs.batch_status import batch_overview, batch_status, cancel_runs
from pcf.runs.call_plan import content_key, plan
from pcf.runs.estimate import estimate_run
from pcf.runs.manage import judge_run, open_run
from pcf.runs.spec import RunSpec
from pcf.runs.study import study_specs
from pcf.store import (
    Call,
    ProviderBatch,
    ReplacedCall,
    Run,
    add_provider_batch,
    call_request,
    delete_run,
    get_engine,
    get_run,
    import_items,
    item_db_ids,
    load_items,
    update_provider_batch,
)
from tests.demo_database import drop_database, new_database
from tests.factories import make_item
from tests.judge_providers import (
    BATCH_PROVIDERS,
    OPENAI,
    SECRET,
    ProviderSpec,
    use_environment,
)
from tests.runs.processes import import_dataset
from tests.runs.test_live_providers import CANDIDATE_KEY
from tests.wire_server import Scripted, WireRequest, WireServer

TOKENS_IN, TOKENS_OUT = 1000, 200
PRICE = [2.0, 8.0]
ITEMS = 4


def judged(text: str) -> str:
    """A listwise judgment that depends only on the prompt: a hash orders the keys."""
    keys = CANDIDATE_KEY.findall(text)
    ranking = sorted(keys, key=lambda k: hashlib.sha256(f"{text}{k}".encode()).hexdigest())
    candidates = [
        {"key": k, "factuality": 9 - i, "hallucination_risk": 0.1 * i, "rationale": "r"}
        for i, k in enumerate(ranking)
    ]
    return json.dumps({"candidates": candidates, "ranking": ranking, "confidence": 0.7})


def answer(request: WireRequest) -> Scripted:
    text = request.last_user_text
    return Scripted.answer(judged(text), input_tokens=TOKENS_IN, output_tokens=TOKENS_OUT)


@pytest.fixture
def provider_env(request, monkeypatch, tmp_path) -> ProviderSpec:
    """The provider's key in the environment, and a price for its test model."""
    provider: ProviderSpec = request.param
    use_environment(monkeypatch, provider)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({provider.model: PRICE}), encoding="utf-8")
    monkeypatch.setenv("PCF_PRICES", str(prices))
    return provider


def with_provider():
    return pytest.mark.parametrize(
        "provider_env", BATCH_PROVIDERS, indirect=True, ids=lambda p: p.backend
    )


def import_ds(session: Session, items: int = ITEMS) -> None:
    import_items(
        [make_item(f"q{i}") for i in range(items)], session=session, name="ds", fmt="jsonl"
    )
    session.commit()


def base_spec(provider: ProviderSpec, server: WireServer, **settings) -> RunSpec:
    defaults = {"k": 4, "executions": 2, "concurrency": 4}
    return RunSpec(
        "ds",
        backend=provider.backend,
        model=provider.model,
        base_url=provider.base_url(server),
        **defaults | settings,
    )


def judgments(session: Session, run_name: str) -> dict:
    """Each call's outcome and request (its content key names the server, which differs)."""
    run = session.exec(select(Run).where(Run.name == run_name)).one()
    calls = session.exec(select(Call).where(Call.run_id == run.id)).all()
    return {
        (c.item_id, c.execution, c.call_index): (c.ok, c.judgment, call_request(c, session=session))
        for c in calls
    }


def batch_requests(server: WireServer) -> list[WireRequest]:
    return [r for r in server.received if "batches" in r.path]


@with_provider()
def test_a_study_by_batch_matches_the_study_call_by_call_at_half_the_cost(
    provider_env, tmp_path, session
):
    """direct, pcf (K=4 x 2 executions) and repeated over 4 items: same judgments, half the
    cost, each request run by the server as often as call by call (a prompt two runs share,
    like the canonical call, is sent once)."""
    provider = provider_env
    calls_url = new_database(tmp_path / "calls")
    try:
        with WireServer(answer) as server, Session(get_engine(calls_url)) as by_call:
            import_ds(by_call)
            specs = study_specs("s", base_spec(provider, server), session=by_call)
            for spec in specs:
                judge_run(spec, session=by_call, actor=operator())
            expected = {spec.run_name: judgments(by_call, spec.run_name) for spec in specs}
            cost_by_call = sum(r.cost_usd for r in by_call.exec(select(Run)).all())
            sent_by_call, counts_by_call = server.request_count, server.counts
        with WireServer(answer, batch_polls=2) as server:
            import_ds(session)
            specs = study_specs("s", base_spec(provider, server), session=session)
            reports = [submit_batches(spec, session=session, actor=operator())[1] for spec in specs]
            names = [spec.run_name for spec in specs]
            collected = collect_runs(
                names, session=session, wait=True, poll_s=0.01, actor=operator()
            )
            paid = batch_requests(server)
            counts = server.counts
            created = server.batches.created
            status = batch_status(names[1], session=session)
    finally:
        drop_database(calls_url)

    got = {name: judgments(session, name) for name in names}
    assert got == expected
    assert all(ok for run in got.values() for ok, *_ in run.values())
    runs = session.exec(select(Run)).all()
    assert {r.status for r in runs} == {"finished"}
    cost_by_batch = sum(r.cost_usd for r in runs)
    assert cost_by_batch == pytest.approx(cost_by_call / 2)
    assert cost_by_call == pytest.approx(sent_by_call * (TOKENS_IN * 2 + TOKENS_OUT * 8) / 1e6)
    assert len(paid) == sent_by_call == sum(counts.values())
    assert counts == counts_by_call  # each prompt (and repeat) sent as often: once
    assert created == 3  # one batch per run
    assert sum(r.submitted for r in reports) == sent_by_call
    # direct's canonical calls are pcf's first calls (repeats 0, 1 of execution 0 and 1) and
    # repeated's first two: left to the batch that carries them, then taken from the cache
    assert [r.deferred for r in reports] == [0, ITEMS, 2 * ITEMS]
    assert sum(r.stored for r in collected) == sum(len(v) for v in got.values())
    assert [(row["state"], row["requests"]) for row in status] == [
        ("collected", ITEMS),  # the deferred calls
        ("collected", 8 * ITEMS - ITEMS),
    ]


@with_provider()
def test_failed_expired_and_refused_requests_are_failed_calls_retried_by_retry_failed(
    provider_env, session
):
    """A batch with an error, an expired request, a refusal and an unparseable answer: each is
    a failed call with its reason; --retry-failed in a second batch replaces them, keeping the
    failed answers."""
    provider = provider_env
    plan_script: dict[str, str] = {}

    def responder(request: WireRequest) -> Scripted:
        text = request.last_user_text
        behaviour = plan_script.get(text, "ok")
        plan_script[text] = "ok"  # the retry succeeds
        return {
            "error": lambda: Scripted.error(400, "Invalid schema for response_format"),
            "expired": Scripted.expired,
            "refusal": lambda: Scripted.refusal("no"),
            "garbled": lambda: Scripted.answer("not json at all"),
        }.get(behaviour, lambda: answer(request))()

    with WireServer(responder, batch_polls=1) as server:
        import_ds(session, 2)
        spec = base_spec(provider, server, name="r", executions=1)
        items = [make_item(f"q{i}") for i in range(2)]
        prompts = [p.render().user for p in plan(items, {f"q{i}": i for i in range(2)}, spec)]
        behaviours = ["error", "expired", "refusal", "garbled"]
        for prompt, behaviour in zip(prompts[:4], behaviours, strict=True):
            plan_script[prompt] = behaviour
        submit_batches(spec, session=session, actor=operator())
        first = collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())[0]
        failed = {c.error.split(":")[0] for c in session.exec(select(Call)).all() if not c.ok}
        run = session.exec(select(Run)).one()
        session.refresh(run)
        status_after_first = run.failures
        again = submit_batches(spec, session=session, retry_failed=True, actor=operator())[1]
        collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())
        paid = len(batch_requests(server))

    assert first.failures == status_after_first == 4
    error = "client_error" if provider.backend == "openai" else "batch_error"
    assert failed == {error, "batch_expired", "refusal", "no_json"}
    assert again.submitted == 4
    calls = session.exec(select(Call)).all()
    assert len(calls) == 8
    assert all(c.ok for c in calls)
    replaced = session.exec(select(ReplacedCall)).all()
    assert len(replaced) == 4
    assert {r.reason for r in replaced} == {"retried"}
    assert paid == 8 + 4


@with_provider()
def test_a_batch_that_fails_whole_is_failed_calls_and_nothing_is_paid(provider_env, session):
    provider = provider_env
    with WireServer(answer, fail_batch=lambda index: index == 0) as server:
        import_ds(session, 2)
        spec = base_spec(provider, server, name="r", executions=1)
        submit_batches(spec, session=session, actor=operator())
        report = collect_runs(["r"], session=session, actor=operator())[0]
        paid = len(batch_requests(server))
        calls = session.exec(select(Call)).all()
        assert len(calls) == report.failures == 8
        assert all(not c.ok for c in calls)
        if provider.backend == "openai":
            assert all(c.error.startswith("batch_failed: Scripted whole-batch") for c in calls)
            assert paid == 0
        else:
            assert all(c.error.startswith("batch_error: api_error") for c in calls)
        assert all(c.cost_usd == 0 for c in calls)
        # the failed calls are asked again call by call, like any failed call
        _, retried = judge_run(spec, session=session, retry_failed=True, actor=operator())
    assert retried.retried == 8
    session.expire_all()
    assert all(c.ok for c in session.exec(select(Call)).all())
    assert len(session.exec(select(ReplacedCall)).all()) == 8


@with_provider()
def test_a_cancelled_batch_leaves_failed_calls_and_a_key_in_an_error_is_masked(
    provider_env, session
):
    provider = provider_env

    echo = []

    def responder(request: WireRequest) -> Scripted:
        if echo:  # a provider echoing the key in its error
            return Scripted.error(400, f"Incorrect API key provided: {SECRET}")
        return answer(request)

    with WireServer(responder, batch_polls=5) as server:
        import_ds(session, 1)
        spec = base_spec(provider, server, name="r", executions=1)
        _, submitted = submit_batches(spec, session=session, actor=operator())
        assert cancel_runs(["r"], session=session, actor=operator()) == {
            "cancelled": submitted.batches,
            "lost": {},
        }
        report = collect_runs(["r"], session=session, actor=operator())[0]
        assert report.stored == report.failures == 4
        errors = {c.error for c in session.exec(select(Call)).all()}
        assert {e.split(":")[0] for e in errors} == {"batch_cancelled"}
        echo.append(True)
        submit_batches(spec, session=session, retry_failed=True, actor=operator())
        collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())
    session.expire_all()
    stored = session.exec(select(Call)).all()
    assert all(SECRET not in c.error and "[redacted]" in c.error for c in stored)
    assert delete_run("r", session=session) == {"calls": 4, "replaced_calls": 4}
    assert session.exec(select(ProviderBatch)).all() == []


ITEM_CHUNKS = pytest.mark.parametrize("item_chunk", [500, 1], ids=["whole", "item_by_item"])
"""The run gone through whole, or one item at a time (``pcf.store.datasets.ITEM_CHUNK``)."""


@with_provider()
@ITEM_CHUNKS
def test_calls_are_split_by_the_request_limit_and_collect_waits_for_every_batch(
    provider_env, session, monkeypatch, item_chunk
):
    provider = provider_env
    monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", item_chunk)
    with WireServer(answer, batch_polls=3) as server:
        import_ds(session, 3)
        spec = base_spec(provider, server, name="r", executions=1)
        _, report = submit_batches(spec, session=session, max_requests=5, actor=operator())
        early = collect_runs(["r"], session=session, actor=operator())[0]
        # call by call would pay for them again
        with pytest.raises(ValueError, match="has provider batches not collected yet"):
            judge_run(spec, session=session, actor=operator())
        done = collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())[0]
        batches = session.exec(select(ProviderBatch).order_by(col(ProviderBatch.id))).all()
        sizes = [len(b.custom_ids) for b in batches]
    assert report.submitted == 12
    assert len(report.batches) == 3
    assert sizes == [5, 5, 2]
    assert early.stored == 0
    assert early.pending == 3
    assert done.stored == 12
    assert done.pending == 0
    assert len(session.exec(select(Call)).all()) == 12


def test_batch_needs_a_provider_backend(session):
    import_ds(session, 1)
    with pytest.raises(ValueError, match="are for openai/ and anthropic/ models; simulated/"):
        submit_batches(RunSpec("ds", name="r"), session=session, actor=operator())
    assert session.exec(select(Run)).all() == []


CANDIDATE = re.compile(r'<candidate key="([^"]+)">\n(.*?)\n</candidate>', re.DOTALL)


def steady_answer(request: WireRequest) -> Scripted:
    """A judge that ranks the candidates by their text, whatever the order: items settle."""
    shown = CANDIDATE.findall(request.last_user_text)
    ranking = [key for key, _ in sorted(shown, key=lambda pair: pair[1])]
    candidates = [
        {"key": k, "factuality": 9 - i, "hallucination_risk": 0.1, "rationale": "r"}
        for i, k in enumerate(ranking)
    ]
    text = json.dumps({"candidates": candidates, "ranking": ranking, "confidence": 0.9})
    return Scripted.answer(text, input_tokens=TOKENS_IN, output_tokens=TOKENS_OUT)


@with_provider()
@ITEM_CHUNKS
def test_an_adaptive_run_sends_each_wave_as_a_batch_and_stops_where_call_by_call_stops(
    provider_env, tmp_path, session, monkeypatch, item_chunk
):
    """--adaptive certain, K=4 x 2 over 4 items: each wave (every unsettled item's next call)
    is one batch, submitted by collect when the previous one is stored; the calls made and the
    items' stops are those of the same run made call by call."""
    provider = provider_env
    calls_url = new_database(tmp_path / "calls")
    try:
        with WireServer(steady_answer) as server, Session(get_engine(calls_url)) as by_call:
            import_ds(by_call)
            spec = base_spec(provider, server, name="a", adaptive="certain")
            judge_run(spec, session=by_call, actor=operator())
            expected = judgments(by_call, "a")
            stops = by_call.exec(select(Run)).one().settings.stored()["stops"]
        monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", item_chunk)
        with WireServer(steady_answer, batch_polls=1) as server:
            import_ds(session)
            spec = base_spec(provider, server, name="a", adaptive="certain")
            first = submit_batches(spec, session=session, actor=operator())[1]
            collect_runs(["a"], session=session, wait=True, poll_s=0.01, actor=operator())
            waves = [len(b.custom_ids) for b in session.exec(select(ProviderBatch)).all()]
            paid = len(batch_requests(server))
    finally:
        drop_database(calls_url)
    assert first.submitted == ITEMS  # the first wave: each item's canonical call
    assert len(expected) < ITEMS * 8  # some item stopped early
    assert judgments(session, "a") == expected
    run = session.exec(select(Run)).one()
    assert run.status == "finished"
    assert run.settings.stored()["stops"] == stops
    assert sum(waves) == paid == len(expected)
    assert len(waves) == max(stop["calls"] for stop in stops.values())


@with_provider()
def test_a_confident_batch_run_calibrates_before_it_stops_the_other_items(
    provider_env, tmp_path, session, monkeypatch
):
    """--adaptive confident --risk 0.5 by batch, 12 items read 5 at a time: the first batch is
    the 4 calibration items' every call, the others wait for it; calls, stops and calibration
    are those of the same run made call by call."""
    provider = provider_env
    calls_url = new_database(tmp_path / "calls")
    settings = {"name": "c", "adaptive": "confident", "risk": 0.5}
    try:
        with WireServer(steady_answer) as server, Session(get_engine(calls_url)) as by_call:
            import_ds(by_call, 12)
            judge_run(base_spec(provider, server, **settings), session=by_call, actor=operator())
            expected = judgments(by_call, "c")
            made = by_call.exec(select(Run)).one().settings.stored()
        monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", 5)
        with WireServer(steady_answer, batch_polls=1) as server:
            import_ds(session, 12)
            first = submit_batches(
                base_spec(provider, server, **settings), session=session, actor=operator()
            )[1]
            collect_runs(["c"], session=session, wait=True, poll_s=0.01, actor=operator())
    finally:
        drop_database(calls_url)
    assert first.submitted == 4 * 8
    assert judgments(session, "c") == expected
    run = session.exec(select(Run)).one()
    assert run.settings.stored()["stops"] == made["stops"]
    assert run.settings.stored()["stopping"]["calibration"] == made["stopping"]["calibration"]
    assert Counter(s["reason"] for s in made["stops"].values())["calibration"] == 4


def test_the_estimate_shows_both_modes_and_batch_prices_are_half(session):
    import_ds(session, 2)
    openai_spec = RunSpec("ds", backend="openai", model="gpt-x", k=3)
    estimate = estimate_run(openai_spec, session=session, prices={"gpt-x": (1.0, 2.0)})
    assert estimate.cost_usd > 0
    assert estimate.batch_cost_usd == pytest.approx(estimate.cost_usd / 2)
    unpriced = estimate_run(replace(openai_spec, model="nobody"), session=session, prices={})
    assert unpriced.batch_cost_usd is None
    assert estimate_run(RunSpec("ds", k=3), session=session).batch_cost_usd is None
    assert batch_prices({"m": (3.0, 15.0)}) == {"m": (1.5, 7.5)}


def pairwise_answer(request: WireRequest) -> Scripted:
    """The first key shown wins: both orders disagree, so every pair needs a confirmation."""
    first = CANDIDATE_KEY.findall(request.last_user_text)[0]
    text = json.dumps({"verdict": first, "confidence": 0.8, "rationale": "r"})
    return Scripted.answer(text, input_tokens=TOKENS_IN, output_tokens=TOKENS_OUT)


@with_provider()
@ITEM_CHUNKS
def test_apocjudge_confirmations_are_a_second_batch_wave(
    provider_env, tmp_path, session, monkeypatch, item_chunk
):
    """Both orders of 3 pairs in a first batch; collect then submits the 3 confirmation calls
    in a second batch and, with --wait, stores them: the run made call by call, at half price."""
    provider = provider_env
    pairs = [make_item(f"p{i}", n=2) for i in range(3)]
    calls_url = new_database(tmp_path / "calls")
    try:
        with WireServer(pairwise_answer) as server, Session(get_engine(calls_url)) as by_call:
            import_items(pairs, session=by_call, name="ds", fmt="jsonl")
            by_call.commit()
            spec = base_spec(provider, server, name="a", protocol="apoc")
            judge_run(spec, session=by_call, actor=operator())
            expected = judgments(by_call, "a")
            cost_by_call = by_call.exec(select(Run)).one().cost_usd
        monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", item_chunk)
        with WireServer(pairwise_answer, batch_polls=1) as server:
            import_items(pairs, session=session, name="ds", fmt="jsonl")
            session.commit()
            spec = base_spec(provider, server, name="a", protocol="apoc")
            first = submit_batches(spec, session=session, actor=operator())[1]
            collect_runs(["a"], session=session, wait=True, poll_s=0.01, actor=operator())
            sizes = [len(b.custom_ids) for b in session.exec(select(ProviderBatch)).all()]
            paid = len(batch_requests(server))
    finally:
        drop_database(calls_url)
    assert first.submitted == 6
    assert sorted(sizes) == [3, 6]
    assert paid == 9
    assert judgments(session, "a") == expected
    run = session.exec(select(Run)).one()
    assert run.status == "finished"
    assert run.cost_usd == pytest.approx(cost_by_call / 2)


@pytest.mark.db  # `pcf` commands on PCF_DATABASE_URL
def test_the_commands_submit_a_study_collect_it_and_show_its_batches(monkeypatch, tmp_path):
    """`pcf study --batch`, `pcf batch status`, `pcf batch collect --wait` as a user runs them."""
    use_environment(monkeypatch, OPENAI)
    import_dataset(tmp_path, 3)
    runs = ["s/direct", "s/pcf", "s/repeated"]
    with WireServer(answer, batch_polls=1) as server:
        study = [
            *("study", "ds", "--name", "s", "--backend", "openai", "--model", "gpt-test"),
            *("--base-url", server.openai_base_url, "--k", "3", "--executions", "1", "--batch"),
        ]
        submitted = CliRunner().invoke(app, study)
        assert submitted.exit_code == 0, submitted.output
        status = CliRunner().invoke(app, ["batch", "status", "s/pcf"])
        collected = CliRunner().invoke(app, ["batch", "collect", *runs, "--wait", "--poll", "0"])
        again = CliRunner().invoke(app, ["batch", "collect", *runs])
        paid = len(batch_requests(server))
    assert collected.exit_code == 0, collected.output
    sent = json.loads(submitted.stdout)["runs"]
    assert [(r["run"], r["status"], r["submitted"]) for r in sent] == [
        ("s/direct", "batch", 3),
        ("s/pcf", "batch", 6),
        ("s/repeated", "batch", 6),
    ]
    assert "pcf batch collect 's/direct' 's/pcf' 's/repeated' --wait" in submitted.stderr
    rows = json.loads(status.stdout)["s/pcf"]
    assert [(r["state"], r["requests"], r["provider_status"]) for r in rows[1:]] == [
        ("submitted", 6, "in_progress")
    ]
    stored = json.loads(collected.stdout)
    assert [stored[name]["stored"] for name in runs] == [3, 9, 9]
    assert "] 21/21 requests, 21 calls stored, 0 batches running" in collected.stderr
    assert all(json.loads(again.stdout)[name]["stored"] == 0 for name in runs)
    assert paid == 15
    missing = CliRunner().invoke(app, ["batch", "collect", "nope"])
    assert missing.exit_code == 2
    assert "no run 'nope'" in missing.output


def test_two_calls_with_one_content_key_are_one_request_paid_once(monkeypatch, tmp_path, session):
    """Twin items (same prompt and candidates): each ordering's prompt is sent once; both
    calls are stored from its answer, the second without tokens or cost."""
    use_environment(monkeypatch, OPENAI)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({OPENAI.model: PRICE}), encoding="utf-8")
    monkeypatch.setenv("PCF_PRICES", str(prices))
    item = make_item("q0", n=2)
    import_items([item, replace(item, item_id="twin")], session=session, name="ds", fmt="jsonl")
    session.commit()
    with WireServer(answer) as server:
        spec = base_spec(OPENAI, server, name="r", schedule="exhaustive", k=2, executions=1)
        _, report = submit_batches(spec, session=session, actor=operator())
        collect_runs(["r"], session=session, actor=operator())
        paid = len(batch_requests(server))
    calls = session.exec(select(Call)).all()
    assert report.submitted == paid == 2
    assert len(calls) == 4
    assert all(c.ok for c in calls)
    run = session.exec(select(Run)).one()
    assert run.calls_made == 2
    per_request = (TOKENS_IN * PRICE[0] + TOKENS_OUT * PRICE[1]) / 1e6 / 2
    assert run.cost_usd == pytest.approx(2 * per_request)
    assert run.input_tokens == 2 * TOKENS_IN


@with_provider()
def test_a_batch_sent_before_servers_were_in_the_key_is_collected_into_its_calls(
    provider_env, session
):
    """A batch in flight when the key changed carries the old keys as custom ids: a submit
    sends none of its calls again, and collect stores every answer in its call."""
    provider = provider_env
    with WireServer(answer, batch_polls=1) as server:
        import_ds(session, 2)
        spec = base_spec(provider, server, name="r", executions=1)
        run = open_run(spec, session=session)
        items = load_items(run.dataset_id, session=session)
        calls = plan(items, item_db_ids(run.dataset_id, session=session), spec)
        old = [
            content_key(spec.backend, spec.model, c.render(), spec, c.repeat_index, server=False)
            for c in calls
        ]
        client = batch_client(make_judge(spec.backend, spec.model, base_url=spec.base_url))
        entries = [
            client.entry(key, c.render().request(spec.temperature, spec.max_tokens))
            for key, c in zip(old, calls, strict=True)
        ]
        record = add_provider_batch(run.id, "token", old, session=session)

        async def send() -> str:  # what the previous release sent and recorded
            try:
                return await client.submit("token", entries, file_id=None, on_file=lambda _: None)
            finally:
                await client.judge.aclose()

        update_provider_batch(
            record, session=session, state="submitted", batch_id=asyncio.run(send())
        )
        session.commit()
        again = submit_batches(spec, session=session, actor=operator())[1]
        collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())
        paid = len(batch_requests(server))
        created = server.batches.created
    assert (again.submitted, again.deferred) == (0, 0)
    assert paid == len(calls) == 8
    assert created == 1
    stored = session.exec(select(Call)).all()
    assert len(stored) == 8
    assert all(c.ok for c in stored)
    assert not set(old) & {c.content_key for c in stored}  # stored under the keys of now
    session.refresh(run)
    assert run.status == "finished"


@with_provider()
@pytest.mark.parametrize("retry", ["batch", "call"])
def test_a_lost_batch_is_forgotten_into_failed_calls_that_retry_failed_asks_again(
    provider_env, retry, session
):
    """Three batches: one collected, one the provider lost whole (404 on status), one whose
    results it lost (404 on results). The run is stuck until forget makes their calls failed
    calls ``batch_lost``; --retry-failed (by batch or call by call) then asks those again,
    and the answers of the first batch stay as stored."""
    provider = provider_env
    with WireServer(answer, batch_polls=1) as server:
        import_ds(session, 3)
        spec = base_spec(provider, server, name="r", executions=1)
        _, submitted = submit_batches(spec, session=session, max_requests=4, actor=operator())
        _, lost, lost_results = submitted.batches
        server.batches.lose(lost)
        server.batches.lose(lost_results, results_only=True)
        collected = collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())[
            0
        ]
        first_answers = {c.id: c.created_at for c in session.exec(select(Call)).all()}
        # every stuck state: call by call refused, a batch submit sends nothing
        with pytest.raises(ValueError, match="not collected yet"):
            judge_run(spec, session=session, actor=operator())
        assert (
            submit_batches(spec, session=session, retry_failed=True, actor=operator())[1].submitted
            == 0
        )
        asked = cancel_runs(["r"], session=session, actor=operator())
        status = {
            row["batch_id"]: row.get("provider_status")
            for row in batch_status("r", session=session)
        }
        overview = batch_overview([get_run("r", session=session)], session=session)[0]

        forgot = collect_runs(["r"], session=session, forget_lost=True, actor=operator())[0]
        failed = {c.error for c in session.exec(select(Call)).all() if not c.ok}
        if retry == "batch":
            again = submit_batches(spec, session=session, retry_failed=True, actor=operator())[
                1
            ].submitted
            collect_runs(["r"], session=session, wait=True, poll_s=0.01, actor=operator())
        else:
            again = judge_run(spec, session=session, retry_failed=True, actor=operator())[1].retried
        paid = server.request_count
    assert (collected.lost, collected.stored, collected.pending) == ([lost, lost_results], 4, 0)
    assert asked == {"cancelled": [], "lost": {"r": [lost]}}
    assert status[lost] == "not_found"
    assert (overview["lost"], overview["to_collect"]) == ([lost, lost_results], True)
    assert (forgot.forgotten, forgot.failures) == ([lost, lost_results], 8)
    assert len(failed) == 2
    assert all(e.startswith("batch_lost: the provider does not know batch ") for e in failed)
    assert all("HTTP 404" in e and "--retry-failed" in e for e in failed)
    assert again == 8
    assert paid == 12 + 8  # the lost batches' requests ran on the server, then again
    session.expire_all()
    calls = session.exec(select(Call)).all()
    assert len(calls) == 12
    assert all(c.ok for c in calls)
    replaced = {r.call_id for r in session.exec(select(ReplacedCall)).all()}
    assert len(replaced) == 8
    assert {c.id: c.created_at for c in calls if c.id not in replaced} == first_answers
    assert get_run("r", session=session).status == "finished"


@pytest.mark.db  # `pcf` commands on PCF_DATABASE_URL
def test_the_commands_say_which_batch_is_lost_and_forget_gets_the_run_out(monkeypatch, tmp_path):
    """`pcf batch collect`, `status` and `cancel` name the batch the provider answers 404 for
    and the way out, in one line each; `pcf batch forget` takes it, and `pcf judge
    --retry-failed` asks its calls again call by call."""
    use_environment(monkeypatch, OPENAI)
    import_dataset(tmp_path, 2)

    def invoke(*args: str):
        return CliRunner().invoke(app, list(args))

    with WireServer(answer) as server:
        judge = [
            *("judge", "ds", "--name", "r", "--backend", "openai", "--model", "gpt-test"),
            *("--base-url", server.openai_base_url, "--k", "2"),
        ]
        submitted = invoke(*judge, "--batch")
        (batch_id,) = json.loads(submitted.stdout)["batches"]
        server.batches.lose(batch_id)
        collected = invoke("batch", "collect", "r", "--wait", "--poll", "0")
        status = invoke("batch", "status", "r")
        cancelled = invoke("batch", "cancel", "r")
        stuck = invoke(*judge, "--batch", "--retry-failed")
        refused = invoke(*judge)
        forgotten = invoke("batch", "forget", "r")
        nothing_left = invoke("batch", "forget", "r")
        retried = invoke(*judge, "--retry-failed")
    lost = (
        f"run 'r': the provider answers 404 (not found) for batch {batch_id}; if it lost the "
        "batch, `pcf batch forget 'r'` makes its calls failed calls that "
        "`pcf judge ... --retry-failed` asks again"
    )
    assert (collected.exit_code, collected.stderr.splitlines()[-1]) == (1, f"error: {lost}")
    assert json.loads(collected.stdout)["r"]["lost"] == [batch_id]
    assert (status.exit_code, status.stderr) == (0, f"note: {lost}\n")
    assert json.loads(status.stdout)["r"][0]["provider_status"] == "not_found"
    assert (cancelled.exit_code, cancelled.stderr) == (1, f"error: {lost}\n")
    assert json.loads(stuck.stdout)["submitted"] == 0
    assert f"note: {lost}\n" in stuck.stderr
    assert refused.exit_code == 2
    assert "`pcf batch forget` those the provider lost" in refused.stderr
    assert forgotten.exit_code == 0, forgotten.output
    assert json.loads(forgotten.stdout)["r"]["forgotten"] == [batch_id]
    assert forgotten.stderr == (
        "run 'r': 1 lost batch(es) forgotten, 4 calls stored as failed; "
        "`pcf judge ... --retry-failed` asks them again\n"
    )
    assert nothing_left.stderr == "run 'r': no lost batch to forget\n"
    assert retried.exit_code == 0, retried.output
    done = json.loads(retried.stdout)
    assert (done["this_invocation"]["retried_failed"], done["failures"]) == (4, 0)
    assert all("Traceback" not in r.output for r in (collected, status, cancelled, forgotten))
