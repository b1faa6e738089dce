"""The cost guard (pcf/runs/budget.py) and key claims, through `pcf judge` with the real OpenAI
SDK (and google-genai and openai's Azure client) against the wire server billing 100,000
prompt tokens per call, far more than any request's bytes: the live cap holds at any
concurrency, a batch over its cap sends nothing, a model without a price is refused under a
cap, and two runs started at once pay each request once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest
from sqlmodel import Session, select
from typer.testing import CliRunner

from pcf.access import operator
from pcf.cli import app
from pcf.judges.openai_judge import OpenAIJudge
from pcf.prices import price_table
from pcf.runs.live import execute
from pcf.runs.manage import MAX_COST_ENV, judge_run, open_run
from pcf.runs.spec import RunSpec
from pcf.store import Call, DatasetItems, KeyClaim, Run, get_engine, get_run, run_spend
from tests.judge_providers import AZURE, GOOGLE, OPENAI, use_environment
from tests.runs.processes import environment, import_dataset, judge_command
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer

PROMPT_TOKENS = 100_000
PRICE = (0.15, 0.60)  # gpt-4o-mini's list price, USD per million tokens
CAP = 0.05
HANG_S = 300
"""Bounds only a hang: a loaded machine may take long to start and finish a process."""


def answer(request: WireRequest) -> Scripted:
    return Scripted.answer(listwise_text(request.last_user_text), output_tokens=100)


CALL_PRICE = (PROMPT_TOKENS * PRICE[0] + 100 * PRICE[1]) / 1e6
"""What the server bills each call: $0.01506."""


@pytest.fixture
def priced(tmp_path, monkeypatch, isolated_database) -> None:
    """Model ``m`` at :data:`PRICE` and the server's OpenAI key set."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": list(PRICE)}), encoding="utf-8")
    for name, value in environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PCF_PRICES", str(prices))
    monkeypatch.delenv(MAX_COST_ENV, raising=False)


def pcf_judge(server: WireServer, *extra: str, concurrency: int = 16) -> list[str]:
    """`pcf judge ds --name r ...` at ``server``, as CLI arguments."""
    return judge_command(server, *extra, k=4, concurrency=concurrency)[3:]


@pytest.mark.parametrize("concurrency", [16, 84])
def test_the_live_cap_holds_at_any_concurrency_when_the_provider_bills_more_than_the_bound(
    priced, session, tmp_path, concurrency
):
    """84 calls; the first request is reserved at its bytes' bound and billed 100,000 tokens;
    the guard learns, and never lets the spend pass the cap by more than one call's price."""
    import_dataset(tmp_path, 21)
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        result = CliRunner().invoke(
            app, pcf_judge(server, "--max-cost", str(CAP), concurrency=concurrency)
        )
        sent = server.request_count
    assert result.exit_code == 1, result.output
    assert "stopped at its cost cap" in result.stderr
    run = get_run("r", session=session)
    print(f"concurrency {concurrency}: {sent} requests, ${run.cost_usd:.5f} spent, cap ${CAP}")
    assert run.status == "capped"
    assert run.cost_usd == pytest.approx(sent * CALL_PRICE)
    assert run.cost_usd <= CAP + CALL_PRICE
    assert len(session.exec(select(Call)).all()) == sent  # every paid answer is stored


@pytest.mark.parametrize("provider", [OPENAI, GOOGLE, AZURE], ids=lambda p: p.backend)
def test_retried_requests_are_reserved_and_every_billed_attempt_is_spent(
    priced, session, tmp_path, monkeypatch, provider
):
    """Each call's first request gets a 503 (not billed) and its second an unparseable answer
    (billed), so every answer takes two retries. Each attempt goes through the guard: the spend
    is every billed attempt and stays within the cap plus one call's price, with each
    provider's SDK."""
    use_environment(monkeypatch, provider)

    def flaky(request: WireRequest) -> Scripted:
        attempt = server.counts[request.key]
        if attempt == 1:
            return Scripted.error(503)
        if attempt == 2:
            return Scripted.answer("no judgment here", output_tokens=100)
        return answer(request)

    import_dataset(tmp_path, 21)
    with WireServer(flaky, prompt_tokens=PROMPT_TOKENS) as server:
        spec = RunSpec(
            "ds",
            "r",
            backend=provider.backend,
            model="m",
            base_url=provider.base_url(server),
            k=4,
            backoff_s=0.001,
        )
        run, report = judge_run(spec, session=session, actor=operator(), max_cost=CAP)
        counts = server.counts
    billed = sum(n - 1 for n in counts.values())
    print(f"{sum(counts.values())} requests, {billed} billed, ${run.cost_usd:.5f}, cap ${CAP}")
    assert run.status == "capped"
    assert report.capped > 0
    # Only retries are billed; $0.05 holds three of them, not a fourth's reservation ($0.01623).
    assert billed == 3
    assert run.cost_usd == pytest.approx(billed * CALL_PRICE)
    assert run.cost_usd <= CAP + CALL_PRICE


def test_a_batch_over_its_cap_sends_nothing_and_one_under_it_is_sent(
    priced, session, tmp_path, monkeypatch
):
    """The cap from --max-cost or PCF_MAX_COST_USD is checked against every request's upper
    bound (bytes and max_tokens, at the batch price) before any file is uploaded. The refused
    run stays capped: `pcf batch collect --wait` says it has nothing to collect and exits."""
    import_dataset(tmp_path, 21)
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        over = CliRunner().invoke(app, [*pcf_judge(server, "--max-cost", "0.01"), "--batch"])
        monkeypatch.setenv(MAX_COST_ENV, "0.01")
        over_env = CliRunner().invoke(app, [*pcf_judge(server), "--batch"])
        received, files = server.request_count, len(server.batches.files)
        collect = [sys.executable, "-m", "pcf", "batch", "collect", "r", "--wait", "--poll", "0"]
        idle = subprocess.run(collect, check=False, capture_output=True, text=True, timeout=HANG_S)
        assert idle.returncode == 1, idle.stderr
        assert idle.stderr.strip().splitlines()[-1] == (
            "error: run 'r' has nothing to collect: no batch of it is waiting and 84 of its "
            "calls are not stored (its status is capped); `pcf judge ... --batch` sends them"
        )
        session.expire_all()
        assert get_run("r", session=session).status == "capped"
        monkeypatch.setenv(MAX_COST_ENV, "1")
        under = CliRunner().invoke(app, [*pcf_judge(server), "--batch"])
    for refused in (over, over_env):
        assert refused.exit_code == 2, refused.output
        assert "over its cost cap of $0.0100; nothing was sent" in refused.stderr
    assert (received, files) == (0, 0)
    assert under.exit_code == 0, under.output
    assert json.loads(under.stdout)["submitted"] == 84
    assert server.batches.created == 1


def test_a_batch_billed_past_its_cap_is_collected_and_says_so(priced, session, tmp_path):
    """A batch is sent whole at its bound: bills above it cannot be stopped, but collect stores
    every call and exits 1 with the bill beside the cap, never a silent success."""
    import_dataset(tmp_path, 21)
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        submitted = CliRunner().invoke(app, [*pcf_judge(server, "--max-cost", "0.10"), "--batch"])
        collected = CliRunner().invoke(app, ["batch", "collect", "r", "--wait", "--poll", "0"])
    run = get_run("r", session=session)
    spent = run_spend(run.id, session=session)
    assert submitted.exit_code == 0, submitted.output
    assert collected.exit_code == 1, collected.output
    assert run.status == "finished"
    assert spent > 0.10
    assert collected.stderr.strip().splitlines()[-1] == (
        f"error: run 'r' was billed ${spent:.4f}, over its cost cap of $0.1000: a batch is sent "
        "whole, reserved at its bound, and the provider billed above it (docs/costs.md); every "
        "call is stored"
    )


def test_collect_holds_the_next_wave_to_the_cap_the_run_was_submitted_with(
    priced, session, tmp_path
):
    """An adaptive run by batch: its first wave (3 canonical calls) is reserved at its bytes'
    bound and billed 100,000 tokens each; collect, with no cap given, holds the next wave to
    the stored cap at the run's peaks, sends nothing and leaves the run capped; a submit with
    a higher cap sends that wave and collect finishes the run."""
    import_dataset(tmp_path, 3)
    batch_call = (PROMPT_TOKENS * PRICE[0] + 100 * PRICE[1]) / 2e6
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        judge = [*pcf_judge(server), "--batch", "--adaptive", "certain"]
        submitted = CliRunner().invoke(app, [*judge, "--max-cost", "0.03"])
        capped = CliRunner().invoke(app, ["batch", "collect", "r", "--wait", "--poll", "0"])
        created = server.batches.created
        run = get_run("r", session=session)
        status, spent = run.status, run.cost_usd
        raised = CliRunner().invoke(app, [*judge, "--max-cost", "1"])
        finished = CliRunner().invoke(app, ["batch", "collect", "r", "--wait", "--poll", "0"])
    assert submitted.exit_code == 0, submitted.output
    assert capped.exit_code == 1, capped.output
    error = capped.stderr.strip().splitlines()[-1]
    assert error.startswith("error: run 'r': its 3 batch requests")
    assert "over its cost cap of $0.0300; nothing was sent" in error
    assert (created, status) == (1, "capped")
    assert spent == pytest.approx(3 * batch_call)
    assert spent <= 0.03
    assert raised.exit_code == 0, raised.output
    assert finished.exit_code == 0, finished.output
    session.expire_all()
    assert get_run("r", session=session).status == "finished"
    assert server.batches.created > 1


def test_two_runs_started_at_once_send_each_request_once(priced, session, tmp_path):
    """Two processes judge runs ``a`` and ``b`` of one dataset with the same settings. The
    server holds every answer until both runs are running and one of them has claimed its
    requests: the other waits for those answers and stores them from the cache."""
    import_dataset(tmp_path, 6)  # 24 requests
    watcher = get_engine()

    def both_running() -> bool:
        with Session(watcher) as watch:
            statuses = watch.exec(select(Run.status)).all()
            claimed = watch.exec(select(KeyClaim)).first() is not None
        return statuses == ["running", "running"] and claimed

    def held(request: WireRequest) -> Scripted:
        deadline = time.monotonic() + HANG_S
        while not both_running():
            assert time.monotonic() < deadline, "the second run never started"
            time.sleep(0.05)
        return answer(request)

    with WireServer(held) as server:
        processes = []
        for name in ("a", "b"):
            command = judge_command(server, k=4, concurrency=4)
            command[command.index("--name") + 1] = name
            processes.append(
                subprocess.Popen(
                    command,
                    env=environment() | {"OPENAI_API_KEY": f"sk-{name}"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        outputs = [p.communicate(timeout=HANG_S) for p in processes]
        counts = server.counts
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode()
    assert len(counts) == 24
    assert set(counts.values()) == {1}
    made = [json.loads(out)["this_invocation"]["attempts"] for out, _ in outputs]
    assert sum(made) == 24
    assert [r.status for r in session.exec(select(Run)).all()] == ["finished"] * 2
    assert len(session.exec(select(Call)).all()) == 2 * 24
    assert session.exec(select(KeyClaim)).all() == []


def test_a_provider_model_without_a_price_is_refused_under_a_cap_until_it_has_one(
    priced, session, tmp_path, monkeypatch
):
    """`pcf judge --model google/...` under PCF_MAX_COST_USD: an unpriced model is refused
    before any request or run exists, live or by batch; Gemini has no batches here; once
    PCF_PRICES gives the price the run is held to the cap; a simulated run pays nothing and
    needs no price."""
    use_environment(monkeypatch, GOOGLE)
    monkeypatch.setenv(MAX_COST_ENV, str(CAP))
    import_dataset(tmp_path, 21)
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        judge = ["judge", "ds", "--name", "r", "--base-url", server.base_url, "--k", "4"]
        unpriced = CliRunner().invoke(app, [*judge, "--model", "google/gemini-unpriced"])
        batch = CliRunner().invoke(app, [*judge, "--model", "google/m", "--batch"])
        sent_before, run_before = server.request_count, get_run("r", session=session)
        priced_run = CliRunner().invoke(app, [*judge, "--model", "google/m"])
        simulated = CliRunner().invoke(app, ["judge", "ds", "--name", "s", "--k", "2"])
    assert unpriced.exit_code == 2, unpriced.output
    assert "model 'gemini-unpriced' has no price" in unpriced.stderr
    assert '{"gemini-unpriced": [input, output]} in USD' in unpriced.stderr
    assert "PCF_PRICES" in unpriced.stderr
    assert batch.exit_code == 2, batch.output
    assert "google/ models are judged call by call: leave out --batch" in batch.stderr
    assert (sent_before, run_before) == (0, None)
    assert priced_run.exit_code == 1, priced_run.output
    run = get_run("r", session=session)
    assert (run.status, run.model) == ("capped", "m")
    assert CALL_PRICE <= run.cost_usd <= CAP + CALL_PRICE
    assert simulated.exit_code == 0, simulated.output


@pytest.mark.parametrize("value", ["nan", "inf", "-0.5"])
def test_a_cost_cap_that_is_not_a_finite_number_at_least_0_is_refused_before_any_request(
    priced, session, tmp_path, value
):
    """`--max-cost nan` once let every request wait for a reservation that never fit: a
    non-finite or negative cap, from the option or from PCF_MAX_COST_USD, is refused with a
    line that names where it came from, before the run or any request exists."""
    import_dataset(tmp_path, 2)
    with WireServer(answer, prompt_tokens=PROMPT_TOKENS) as server:
        command = judge_command(server, k=4, concurrency=4)
        option = subprocess.run(
            [*command, "--max-cost", value],
            check=False,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        variable = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env=environment() | {MAX_COST_ENV: value},
        )
        sent = server.request_count
    assert option.returncode == 2, option.stderr
    assert "Invalid value for '--max-cost'" in option.stderr
    assert f"{value}: give a cost cap in USD, a finite number >= 0" in option.stderr
    assert variable.returncode == 2, variable.stderr
    assert variable.stderr.strip() == (
        f"error: {MAX_COST_ENV}={value!r}: give a cost cap in USD, a finite number >= 0"
    )
    assert sent == 0
    assert get_run("r", session=session) is None


def test_answers_after_the_client_timeout_stay_counted_until_the_run_is_capped(
    priced, session, tmp_path
):
    """The first two requests answer in time (the run learns the 100,000-token bill); the server
    holds every later answer until the test ends, past the client's short timeout. Each timed-out
    attempt stays counted in the ledger at its reservation, so the run ends capped, not finished,
    and the requests the server received stay within the cap plus one call."""
    import_dataset(tmp_path, 21)
    release = threading.Event()

    def late(request: WireRequest) -> Scripted:
        if request.index >= 2:
            release.wait(HANG_S)  # held until the client gave up on it
        return answer(request)

    with WireServer(late, prompt_tokens=PROMPT_TOKENS) as server:
        spec = RunSpec(
            "ds",
            "r",
            backend="openai",
            model="m",
            base_url=server.openai_base_url,
            k=4,
            concurrency=16,
            backoff_s=0.001,
        )
        run = open_run(spec, session=session)
        session.commit()
        judge = OpenAIJudge("m", base_url=server.openai_base_url, timeout=0.2)

        async def judged() -> None:
            try:
                await execute(
                    run,
                    DatasetItems(run.dataset_id, session=session),
                    judge,
                    spec,
                    session=session,
                    prices=price_table(),
                    max_cost=CAP,
                )
            finally:
                await judge.aclose()

        try:
            asyncio.run(judged())
        finally:
            release.set()
        sent = server.request_count
    spend = run_spend(run.id, session=session)
    print(f"timeouts: {sent} requests, billed ${sent * CALL_PRICE:.5f}, ledger ${spend:.5f}")
    assert run.status == "capped"
    assert sent > 2
    assert sent * CALL_PRICE <= CAP + CALL_PRICE
    assert CAP - CALL_PRICE < spend <= CAP + CALL_PRICE  # the timed-out attempts count


@pytest.mark.parametrize(("cap", "jump_at"), [(0.30, 4), (3.0, 40)])
def test_a_price_that_jumps_tenfold_mid_run_passes_the_cap_by_one_call_at_most(
    priced, session, tmp_path, cap, jump_at
):
    """From request ``jump_at`` on, the server bills ten times the tokens: near a small cap the
    guard keeps one or two requests in flight; under a larger one, up to 16 are in flight when the
    price jumps. Either way the bills stay within the cap plus one call at the new price."""

    def jumping(request: WireRequest) -> Scripted:
        tokens = PROMPT_TOKENS * (10 if request.index >= jump_at else 1)
        text = listwise_text(request.last_user_text)
        return Scripted.answer(text, input_tokens=tokens, output_tokens=100)

    import_dataset(tmp_path, 21)
    with WireServer(jumping) as server:
        result = CliRunner().invoke(app, pcf_judge(server, "--max-cost", str(cap)))
        sent = server.request_count
    new_call = (10 * PROMPT_TOKENS * PRICE[0] + 100 * PRICE[1]) / 1e6
    billed = min(sent, jump_at) * CALL_PRICE + max(0, sent - jump_at) * new_call
    spend = run_spend(get_run("r", session=session).id, session=session)
    print(f"price jump at {jump_at}: {sent} requests, billed ${billed:.4f}, ledger ${spend:.4f}")
    assert sent > jump_at
    assert result.exit_code == 1, result.output
    assert get_run("r", session=session).status == "capped"
    assert billed <= cap + new_call
