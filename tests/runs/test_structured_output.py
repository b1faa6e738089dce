"""What a small model behind an OpenAI-compatible server needs, through the real SDKs against
the local wire server: a parse retry that is never the identical request, answers that failed
to parse reused rather than paid for again, structured output that can be turned off, and
tokens a server did not report read as unknown while their reservation stays under a cap."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sqlmodel import Session, select

from pcf.analysis.results import run_summary
from pcf.judges._provider import ProviderJudge
from pcf.judges.anthropic_judge import AnthropicJudge
from pcf.judges.openai_judge import OpenAIJudge
from pcf.runs.budget import CostGuard
from pcf.runs.call_plan import plan
from pcf.runs.live import execute
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import Call, Run, import_items, item_db_ids, run_spend
from tests.factories import make_item, stored_run
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import JsonLiteral, Responder, Scripted, WireRequest, WireServer

PROSE = "Candidate B seems the most accurate to me, then A."
PRICE = {"m": (0.15, 0.60)}
ITEMS = [make_item("q0"), make_item("q1")]


@pytest.fixture
def dataset_id(session: Session) -> int:
    """Dataset ``ds``: two items of four candidates."""
    return import_items(ITEMS, session=session, name="ds", fmt="jsonl").id


def _judge(backend: str, server: WireServer) -> ProviderJudge:
    if backend == "openai":  # an OpenAI-compatible server: llama.cpp, Ollama, vLLM...
        return OpenAIJudge("m", base_url=server.openai_base_url, api_key="test-key")
    return AnthropicJudge("m", base_url=server.base_url, api_key="test-key")


def _run(
    session: Session,
    dataset_id: int,
    respond: Responder,
    spec: RunSpec,
    *,
    name: str,
    backend: str = "openai",
    prices: dict[str, tuple[float, float]] | None = None,
    max_cost: float | None = None,
) -> tuple[RunReport, list[Call], list[WireRequest]]:
    """Run ``name`` of dataset ``ds`` at a wire server answering with ``respond``; its
    report, stored calls and the requests the server received."""
    run = stored_run(
        session, dataset_id, name=name, protocol=spec.protocol, backend=backend, model="m", k=4
    )
    with WireServer(respond) as server:
        judge = _judge(backend, server)

        async def go() -> RunReport:
            try:
                return await execute(
                    run, ITEMS, judge, spec, session=session, prices=prices or {}, max_cost=max_cost
                )
            finally:
                await judge.aclose()

        report = asyncio.run(go())
        received = server.received
    calls = list(session.exec(select(Call).where(Call.run_id == run.id)).all())
    return report, calls, received


def _spec(**options: object) -> RunSpec:
    """A PCF run (K=4) of ``ds`` with model ``m`` (``options`` replace any of it)."""
    settings: dict[str, object] = {"protocol": "pcf", "k": 4, "backend": "openai", "model": "m"}
    return RunSpec("ds", **(settings | options))  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_server_answering_prose_is_asked_again_once_never_with_the_same_request(
    backend: str, session: Session, dataset_id: int
) -> None:
    """At temperature 0 the identical request would get the identical prose: the retry names
    the failure in the system message, counts as an attempt, and the row keeps the answer."""
    report, calls, received = _run(
        session,
        dataset_id,
        lambda _r: Scripted.answer(PROSE),
        _spec(parse_retries=1),
        name="r",
        backend=backend,
    )
    assert len(calls) == 8
    assert {(c.ok, c.error.split(":")[0], c.attempts) for c in calls} == {(False, "no_json", 2)}
    assert report.calls_made == len(received) == 16
    bodies = Counter(repr(sorted(r.body.items())) for r in received)
    assert max(bodies.values()) == 1  # no request was sent twice
    by_prompt = Counter(r.last_user_text for r in received)
    assert set(by_prompt.values()) == {2}  # the same question, asked differently
    retries = [r for r in received if "could not be read (no_json)" in r.system_text]
    assert len(retries) == 8


def test_the_direct_baseline_pays_nothing_for_the_canonical_calls_pcf_made_even_failed(
    session: Session, dataset_id: int
) -> None:
    _, pcf_calls, pcf_received = _run(
        session, dataset_id, lambda _r: Scripted.answer(PROSE), _spec(parse_retries=0), name="pcf"
    )
    assert len(pcf_received) == 8
    report, calls, received = _run(
        session,
        dataset_id,
        lambda _r: Scripted.answer(PROSE),
        _spec(protocol="direct"),
        name="direct",
    )
    assert received == []
    assert report.cache_hits == len(calls) == 2
    assert {(c.ok, c.error.split(":")[0], c.attempts) for c in calls} == {(False, "no_json", 0)}
    paid = {c.content_key: c.id for c in pcf_calls}
    assert {c.cached_from for c in calls} == {paid[c.content_key] for c in calls}


def test_structured_output_turned_off_sends_no_schema_and_is_another_request(
    session: Session, dataset_id: int
) -> None:
    """The schema is part of the request, so of its content key: a run without it does not
    reuse the answers given under it (nor the reverse), and asks for no format."""

    def answer(request: WireRequest) -> Scripted:
        return Scripted.answer(listwise_text(request.last_user_text))

    _, with_schema, sent = _run(session, dataset_id, answer, _spec(), name="on")
    assert all(r.body["response_format"]["type"] == "json_schema" for r in sent)
    _, without, sent = _run(session, dataset_id, answer, _spec(structured_output=False), name="off")
    assert len(sent) == 8
    assert all("response_format" not in r.body for r in sent)
    assert {c.content_key for c in with_schema}.isdisjoint(c.content_key for c in without)
    assert all(c.ok and c.cached_from is None for c in without)


def test_tokens_a_server_did_not_report_are_unknown_and_keep_their_reservation_under_a_cap(
    session: Session, dataset_id: int
) -> None:
    null = JsonLiteral("null")

    def answer(request: WireRequest) -> Scripted:
        text = listwise_text(request.last_user_text)
        return Scripted.answer(text, input_tokens=null, output_tokens=null)

    spec = _spec()
    report, calls, received = _run(
        session, dataset_id, answer, spec, name="r", prices=PRICE, max_cost=1.0
    )
    assert len(received) == len(calls) == 8
    assert all(c.ok for c in calls)
    summary = report.as_dict()
    assert summary["input_tokens"] == summary["output_tokens"] == "unknown"
    assert summary["cost_usd"] == "unknown"
    assert summary["answers_without_usage"] == 8
    guard = CostGuard(1.0, "m", PRICE)
    planned = plan(ITEMS, item_db_ids(dataset_id, session=session), spec)
    reserved = sum(
        guard.reservation(p.render().request(spec.temperature, spec.max_tokens)).usd or 0.0
        for p in planned
    )
    assert reserved > 0
    assert run_spend(calls[0].run_id, session=session) == pytest.approx(reserved)
    stored = run_summary(session.get_one(Run, calls[0].run_id), session=session)
    assert (stored["input_tokens"], stored["output_tokens"], stored["cost_usd"]) == (
        "unknown",
        "unknown",
        "unknown",
    )
    assert stored["answers_without_usage"] == 8
