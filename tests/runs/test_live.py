"""The run engine with the simulated judge and a real SQLite store: planning, the content-keyed
cache, resumption, malformed answers, APOCJudge, and all-or-nothing imports and resumes."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func
from sqlmodel import Session, col, select
from typer.testing import CliRunner

from pcf.access import operator
from pcf.analysis.results import run_decisions
from pcf.cli import app
from pcf.items import Candidate, Item
from pcf.judges.base import JudgeError, JudgeReply, JudgeRequest
from pcf.judges.simulated import SimulatedJudge
from pcf.judgments import read_judgments, write_judgments
from pcf.orderings import canonical_order, schedule
from pcf.pairwise import apoc_decide, is_ballpark_question, needs_confirmation
from pcf.prompts import NEUTRAL_PREFIX
from pcf.runs.call_plan import plan
from pcf.runs.live import execute
from pcf.runs.manage import judge_run
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import (
    Call,
    CandidateRow,
    Dataset,
    DatasetItems,
    ItemRow,
    Run,
    delete_run,
    import_items,
    item_db_ids,
    run_judgments,
)
from tests.factories import make_item, stored_run

cli = CliRunner()


class CountingJudge:
    """A simulated judge that counts the requests it answers (under another ``backend`` name,
    it stands for a provider's judge, whose answers do not follow the run seed)."""

    def __init__(self, inner: SimulatedJudge | None = None, *, backend: str | None = None) -> None:
        self.inner = inner or SimulatedJudge("sim-test")
        self.backend, self.model = backend or self.inner.backend, self.inner.model
        self.requests = 0

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.requests += 1
        return await self.inner.complete(request)


def _items(count: int, n: int = 4) -> list[Item]:
    return [make_item(f"q{i}", n=n, gold=f"c{i % n}") for i in range(count)]


def _dataset(session: Session, items: list[Item], name: str = "ds") -> Dataset:
    dataset = import_items(items, session=session, name=name, fmt="jsonl")
    session.commit()
    return dataset


def _run(
    session: Session,
    dataset: Dataset,
    items: list[Item],
    config: RunSpec,
    judge: CountingJudge,
    *,
    name: str | None = None,
    run: Run | None = None,
) -> tuple[Run, RunReport]:
    """Create the run (or take ``run``) and execute it; returns the run and the report."""
    if run is None:
        run = stored_run(
            session,
            dataset.id,
            name=name or config.protocol,
            protocol=config.protocol,
            backend=judge.backend,
            model=judge.model,
            k=config.k,
            schedule=config.schedule,
            executions=config.executions,
        )
    report = asyncio.run(execute(run, items, judge, config, session=session, prices={}))
    return run, report


def _calls(session: Session, run: Run) -> list[Call]:
    query = select(Call).where(Call.run_id == run.id)
    return list(session.exec(query.order_by(col(Call.item_id), col(Call.execution))).all())


def _row_counts(new_session: Callable[[], Session]) -> dict[str, int]:
    """Rows per table, read in a fresh session."""
    with new_session() as s:
        tables = (Dataset, ItemRow, CandidateRow, Run, Call)
        return {t.__name__: s.exec(select(func.count()).select_from(t)).one() for t in tables}


# ---------------------------------------------------------------- planning


def test_plan_makes_the_calls_each_protocol_needs():
    """direct: 1 canonical call; pcf: K per execution; repeated: K canonical copies; apoc: 2."""
    items = _items(3)
    db_ids = {item.item_id: 10 + i for i, item in enumerate(items)}

    direct = plan(items, db_ids, RunSpec("ds", protocol="direct", k=7))
    assert [(c.item.item_id, c.execution, c.call_index, c.repeat_index) for c in direct] == [
        ("q0", 0, 0, 0),
        ("q1", 0, 0, 0),
        ("q2", 0, 0, 0),
    ]
    for call in direct:
        assert call.order == canonical_order(call.item.candidate_ids, 0, call.item.item_id)
        assert call.item_db_id == db_ids[call.item.item_id]

    pcf = plan(items, db_ids, RunSpec("ds", protocol="pcf", k=5, executions=2))
    assert len(pcf) == 3 * 5 * 2
    for item in items:
        mine = [c for c in pcf if c.item.item_id == item.item_id]
        orders = schedule("balanced", item.candidate_ids, 5, dataset_seed=0, item_id=item.item_id)
        for execution in (0, 1):
            runs = [c for c in mine if c.execution == execution]
            assert [c.call_index for c in runs] == [0, 1, 2, 3, 4]
            assert [c.order for c in runs] == orders
            # the same prompt again in a later execution is a distinct call in the cache
            assert {c.repeat_index for c in runs} == {execution}
        assert not any(c.pairwise for c in mine)

    repeated = plan(items, db_ids, RunSpec("ds", protocol="repeated", k=4))
    assert len(repeated) == 3 * 4
    for item in items:
        mine = [c for c in repeated if c.item.item_id == item.item_id]
        assert [c.repeat_index for c in mine] == [0, 1, 2, 3]
        assert [c.call_index for c in mine] == [0, 1, 2, 3]
        assert len({c.order for c in mine}) == 1
        assert mine[0].order == canonical_order(item.candidate_ids, 0, item.item_id)

    pairs = _items(2, n=2)
    apoc = plan(pairs, {p.item_id: i for i, p in enumerate(pairs)}, RunSpec("ds", protocol="apoc"))
    assert [(c.call_index, c.pairwise) for c in apoc] == [(0, True), (1, True)] * 2
    assert apoc[1].order == apoc[0].order[::-1]
    with pytest.raises(ValueError, match="apoc needs pairs"):
        plan(items, db_ids, RunSpec("ds", protocol="apoc"))


def test_canonical_orders_follow_the_dataset_seed_not_the_run_seed():
    """Every protocol's call 0 is the canonical order of (dataset seed, item id): equal across
    run seeds, different across dataset seeds; the run seed still draws random schedules."""
    items = _items(12)
    db_ids = {item.item_id: i for i, item in enumerate(items)}
    pairs = _items(12, n=2)
    pair_ids = {item.item_id: i for i, item in enumerate(pairs)}

    def first_orders(protocol: str, run_seed: int, dataset_seed: int) -> dict:
        chosen, ids = (pairs, pair_ids) if protocol == "apoc" else (items, db_ids)
        spec = RunSpec("ds", protocol=protocol, seed=run_seed, k=3)
        calls = plan(chosen, ids, spec, dataset_seed=dataset_seed)
        return {c.item.item_id: c.order for c in calls if (c.execution, c.call_index) == (0, 0)}

    for protocol in ("direct", "pcf", "repeated", "apoc"):
        shared = first_orders(protocol, 0, 3)
        assert first_orders(protocol, 1, 3) == shared
        assert first_orders(protocol, 99, 3) == shared
        assert first_orders(protocol, 0, 4) != shared
        chosen = pairs if protocol == "apoc" else items
        assert shared == {i.item_id: canonical_order(i.candidate_ids, 3, i.item_id) for i in chosen}

    def random_orders(run_seed: int) -> list:
        spec = RunSpec("ds", schedule="random", seed=run_seed, k=5)
        return [c.order for c in plan(items, db_ids, spec, dataset_seed=3)]

    assert random_orders(1) != random_orders(2)


def test_runs_of_a_dataset_share_the_direct_baseline_and_its_calls(session):
    """Runs with different run seeds on one dataset make the same canonical calls (a
    provider's judge answers them once), and the dataset's import seed decides them."""
    items = _items(6)
    seeded = import_items(items, session=session, name="seeded", fmt="jsonl", seed=7)
    session.commit()
    judge = CountingJudge(backend="openai")
    first, _ = _run(session, seeded, items, RunSpec("seeded", protocol="direct"), judge, name="a")
    second, report = _run(
        session, seeded, items, RunSpec("seeded", protocol="direct", seed=5), judge, name="b"
    )
    assert report.cache_hits == len(items)
    assert judge.requests == len(items)
    orders = {c.item_id: c.order for c in _calls(session, first)}
    assert orders == {c.item_id: c.order for c in _calls(session, second)}
    by_key = {i.item_id: i for i in items}
    ids = item_db_ids(seeded.id, session=session)
    for key, item in by_key.items():
        assert orders[ids[key]] == list(canonical_order(item.candidate_ids, 7, key))


def test_runs_store_one_row_per_planned_call(session):
    """Each protocol stores exactly its planned calls, with totals that add up."""
    items = _items(4)
    dataset = _dataset(session, items)
    for config, per_item in (
        (RunSpec("ds", protocol="direct"), 1),
        (RunSpec("ds", protocol="pcf", k=3, executions=2), 6),
        (RunSpec("ds", protocol="repeated", k=3), 3),
    ):
        judge = CountingJudge()
        run, report = _run(session, dataset, items, config, judge)
        calls = _calls(session, run)
        assert len(calls) == report.planned == per_item * len(items)
        assert len({(c.item_id, c.execution, c.call_index) for c in calls}) == len(calls)
        assert run.status == "finished"
        assert run.finished_at is not None
        assert run.calls_made == sum(c.attempts for c in calls if c.cached_from is None)
        assert run.cache_hits == report.cache_hits == sum(c.cached_from is not None for c in calls)
        assert judge.requests == report.calls_made
        assert run.input_tokens == sum(c.input_tokens for c in calls if c.cached_from is None)


# ---------------------------------------------------------------- the content-keyed cache


def test_a_pcf_run_reuses_the_direct_runs_canonical_calls(session):
    """The canonical call has the same content key in both runs: answered once, paid once."""
    items = _items(5)
    dataset = _dataset(session, items)
    judge = CountingJudge()
    direct, _ = _run(session, dataset, items, RunSpec("ds", protocol="direct"), judge)
    assert judge.requests == 5
    direct_calls = {c.item_id: c for c in _calls(session, direct)}

    judge = CountingJudge()
    pcf, report = _run(session, dataset, items, RunSpec("ds", protocol="pcf", k=4), judge)
    assert report.cache_hits == 5
    assert judge.requests == report.calls_made == 5 * 3
    assert (pcf.cache_hits, pcf.calls_made) == (5, 15)
    for call in _calls(session, pcf):
        if call.call_index == 0:
            source = direct_calls[call.item_id]
            assert call.cached_from == source.id
            assert call.attempts == 0
            assert (call.input_tokens, call.cost_usd) == (0, 0.0)
            assert call.content_key == source.content_key
            assert call.judgment == source.judgment
            assert call.response_text == source.response_text
        else:
            assert call.cached_from is None
            assert call.attempts == 1
    # a repeated run's first copy is the canonical call too; later copies are new calls
    judge = CountingJudge()
    repeated, report = _run(session, dataset, items, RunSpec("ds", protocol="repeated", k=3), judge)
    assert (report.cache_hits, judge.requests) == (5, 10)
    assert all(
        (c.cached_from is not None) == (c.repeat_index == 0) for c in _calls(session, repeated)
    )


def test_a_simulated_judge_of_another_seed_answers_for_itself(session):
    """The simulated judge's noise follows the run seed: another seed is another judge (no
    cache hit, other answers); the same seed again is answered from the cache."""
    items = _items(4)
    dataset = _dataset(session, items)

    def simulated(seed: int, name: str) -> tuple[Run, RunReport]:
        spec = RunSpec("ds", protocol="pcf", k=4, seed=seed)
        return _run(session, dataset, items, spec, SimulatedJudge(seed=seed), name=name)

    first, _ = simulated(0, "seed-0")
    other, report = simulated(1, "seed-1")
    assert (report.cache_hits, report.calls_made) == (0, 16)
    assert run_judgments(first.id, session=session) != run_judgments(other.id, session=session)
    again, report = simulated(1, "seed-1-again")
    assert (report.cache_hits, report.calls_made) == (16, 0)
    assert run_judgments(again.id, session=session) == run_judgments(other.id, session=session)


def test_a_replay_of_another_recording_answers_from_its_own_file(session, tmp_path):
    """Two recordings replayed under one model name are two judges: the second replay makes
    its own calls and stores its own file's judgments; the same file again is all cache hits."""
    items = _items(4)
    dataset = _dataset(session, items)
    recordings = []
    for seed in (0, 1):
        run, _ = _run(
            session,
            dataset,
            items,
            RunSpec("ds", k=3, seed=seed),
            SimulatedJudge(seed=seed),
            name=f"recorded-{seed}",
        )
        path = tmp_path / f"judgments-{seed}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            write_judgments(run_judgments(run.id, session=session), out)
        recordings.append(path)

    def replayed(path: Path, name: str) -> tuple[Run, RunReport]:
        return judge_run(
            RunSpec("ds", name, k=3, backend="replay", replay=path),
            session=session,
            actor=operator(),
        )

    def scores(run: Run) -> dict:
        return {
            (j.item_id, j.call_index): j.factuality for j in run_judgments(run.id, session=session)
        }

    first, _ = replayed(recordings[0], "replay-0")
    second, report = replayed(recordings[1], "replay-1")
    assert (report.cache_hits, report.calls_made) == (0, 12)
    assert scores(second) == {
        (j.item_id, j.call_index): j.factuality for j in read_judgments(recordings[1])
    }
    assert scores(second) != scores(first)
    _, report = replayed(recordings[1], "replay-1-again")
    assert (report.cache_hits, report.calls_made) == (12, 0)


def test_a_cached_answer_is_mapped_to_the_items_own_candidate_ids(session):
    """Same texts under other ids (another dataset) hit the cache, in this item's ids."""
    texts = ("Paris.", "Lyon.", "Nice.")

    def items(prefix: str) -> list[Item]:
        candidates = tuple(Candidate(f"{prefix}{i}", t) for i, t in enumerate(texts))
        return [Item("q1", "What is the capital of France?", candidates, f"{prefix}0")]

    config = RunSpec("ds", protocol="pcf", k=6, schedule="exhaustive")
    first_items, second_items = items("a"), items("b")
    first, _ = _run(
        session, _dataset(session, first_items, "A"), first_items, config, CountingJudge(), name="A"
    )
    judge = CountingJudge()
    second, report = _run(
        session, _dataset(session, second_items, "B"), second_items, config, judge, name="B"
    )
    assert (report.cache_hits, judge.requests) == (6, 0)
    for one, two in zip(
        run_judgments(first.id, session=session),
        run_judgments(second.id, session=session),
        strict=True,
    ):
        assert set(two.ranking) == {"b0", "b1", "b2"}
        assert two.ranking == tuple(r.replace("a", "b") for r in one.ranking)
        assert two.factuality == {k.replace("a", "b"): v for k, v in one.factuality.items()}
    [decision] = run_decisions(second, session=session)
    assert decision["winner"] in {"b0", "b1", "b2"}


# ---------------------------------------------------------------- resumption


def test_running_a_finished_run_again_makes_no_judge_call(session, new_session):
    """Every stored call, answered or failed, is skipped on the next invocation."""
    items = _items(4)
    dataset = _dataset(session, items)
    flaky = SimulatedJudge("sim-test", malformed_rate=0.3)
    run, first = _run(
        session, dataset, items, RunSpec("ds", protocol="pcf", k=5), CountingJudge(flaky)
    )
    assert first.failures > 0
    before = _row_counts(new_session)
    judge = CountingJudge(flaky)
    run, again = _run(session, dataset, items, RunSpec("ds", protocol="pcf", k=5), judge, run=run)
    assert judge.requests == 0
    assert (again.planned, again.already_done, again.calls_made) == (20, 20, 0)
    assert (again.cache_hits, again.failures) == (0, 0)
    assert _row_counts(new_session) == before
    assert run.status == "finished"
    assert run.failures == first.failures


def test_a_run_that_grows_asks_only_for_the_new_items(session):
    """Judging more items of the dataset under the same run resumes it: old calls stay."""
    items = _items(5)
    dataset = _dataset(session, items)
    run, _ = _run(session, dataset, items[:2], RunSpec("ds", protocol="pcf", k=3), CountingJudge())
    judge = CountingJudge()
    run, report = _run(session, dataset, items, RunSpec("ds", protocol="pcf", k=3), judge, run=run)
    assert (report.already_done, judge.requests, len(_calls(session, run))) == (6, 9, 15)


def test_resuming_with_other_settings_is_refused_by_the_cli(tmp_path: Path, new_session):
    """`pcf judge` with the name of a run made with another K stops with exit code 2."""
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(i.to_dict()) + "\n" for i in _items(3)), encoding="utf-8")
    assert cli.invoke(app, ["import", "jsonl", str(path), "--name", "ds"]).exit_code == 0
    first = cli.invoke(app, ["judge", "ds", "--name", "r", "--k", "3"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["attempts"] == 9

    refused = cli.invoke(app, ["judge", "ds", "--name", "r", "--k", "5"])
    assert refused.exit_code == 2
    assert "'r' exists with other settings" in refused.stderr
    assert "k: 3 -> 5" in refused.stderr
    assert _row_counts(new_session)["Call"] == 9

    again = cli.invoke(app, ["judge", "ds", "--name", "r", "--k", "3"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["this_invocation"]["attempts"] == 0


# ---------------------------------------------------------------- malformed answers


def test_malformed_answers_are_recorded_failures_and_decisions_still_come(session):
    """Unrepairable answers fail with their reason after a parse retry; repairs are kept."""
    items = _items(12)
    dataset = _dataset(session, items)
    judge = CountingJudge(SimulatedJudge("sim-test", malformed_rate=0.5))
    run, report = _run(session, dataset, items, RunSpec("ds", protocol="pcf", k=5), judge)
    calls = _calls(session, run)
    failed = [c for c in calls if not c.ok]
    assert len(calls) == 60
    assert failed
    assert run.failures == report.failures == len(failed)
    reasons = Counter(c.error.split(":")[0] for c in failed)
    assert set(reasons) <= {"invalid_json", "bad_ranking", "no_json"}
    assert report.errors == reasons
    for call in failed:
        # the simulated judge answers the same request the same way: one parse retry, no luck
        assert call.attempts == 2
        assert call.judgment is None
        assert call.response_text
    repaired = Counter(r for c in calls if c.ok for r in c.repaired)
    assert set(repaired) <= {"code_fence", "key_case"}
    assert repaired
    assert judge.requests == run.calls_made == sum(c.attempts for c in calls)

    decisions = {d["item_id"]: d for d in run_decisions(run, session=session)}
    assert set(decisions) == {i.item_id for i in items}
    by_item = Counter(c.item_id for c in failed)
    db_ids = item_db_ids(dataset.id, session=session)
    for item in items:
        decision = decisions[item.item_id]
        failures = by_item[db_ids[item.item_id]]
        assert ("incomplete" in decision["flags"]) == (failures > 0)
        assert (decision["winner"] is None) == (failures == 5)


# ---------------------------------------------------------------- APOCJudge


def test_apoc_asks_for_a_keyed_confirmation_only_where_it_can_change_the_verdict(session):
    """Pairs: both orders, then call 3 with neutral keys exactly where the orders disagree."""
    pairs = _items(16, n=2)
    pairs[0] = Item("q0", "Roughly how many people live in Paris?", pairs[0].candidates, "c0")
    dataset = _dataset(session, pairs)
    judge = CountingJudge(SimulatedJudge("sim-test", noise=1.5))
    run, report = _run(session, dataset, pairs, RunSpec("ds", protocol="apoc"), judge)
    calls = _calls(session, run)
    db_ids = item_db_ids(dataset.id, session=session)
    confirmed = 0
    for item in pairs:
        mine = {c.call_index: c for c in calls if c.item_id == db_ids[item.item_id]}
        d1, d2 = (mine[i].judgment["verdict"] if mine[i].ok else None for i in (0, 1))
        assert mine[1].order == mine[0].order[::-1]
        wanted = needs_confirmation(d1, d2, ballpark=is_ballpark_question(item.prompt), guard=True)
        assert (2 in mine) == wanted
        if wanted:
            confirmed += 1
            assert mine[2].order == mine[0].order
            assert all(k.startswith(NEUTRAL_PREFIX) for k in mine[2].keys)
            assert mine[2].keys != mine[0].keys
    assert 0 < confirmed < len(pairs)
    assert len(calls) == report.planned + confirmed == 2 * len(pairs) + confirmed
    assert judge.requests == run.calls_made == len(calls)

    decisions = {d["item_id"]: d for d in run_decisions(run, session=session)}
    for item in pairs:
        mine = {c.call_index: c for c in calls if c.item_id == db_ids[item.item_id]}
        expected = apoc_decide(
            *(mine[i].verdict() if i in mine else None for i in range(3)),
            ballpark=is_ballpark_question(item.prompt),
            guard=True,
        )
        assert decisions[item.item_id]["metrics"]["reason"] == expected.reason

    judge = CountingJudge()
    _, again = _run(session, dataset, pairs, RunSpec("ds", protocol="apoc"), judge, run=run)
    assert judge.requests == 0
    assert again.already_done == 2 * len(pairs)


# ---------------------------------------------------------------- imports are all or nothing


def test_importing_a_malformed_file_leaves_the_database_unchanged(tmp_path: Path, new_session):
    """Every problem is reported with file, line and field; no row is written."""
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(i.to_dict()) + "\n" for i in _items(2)), encoding="utf-8")
    assert cli.invoke(app, ["import", "jsonl", str(good), "--name", "ds"]).exit_code == 0
    before = _row_counts(new_session)
    assert before["Dataset"] == 1
    assert before["ItemRow"] == 2

    rows = [i.to_dict() for i in _items(4)]
    del rows[1]["prompt"]
    rows[2]["gold"] = "c9"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{oops\n", encoding="utf-8")
    result = cli.invoke(app, ["import", "jsonl", str(bad), "--name", "other"])
    assert result.exit_code == 1
    assert "nothing imported: 3 problem(s)" in result.stderr
    assert f"{bad}:2: prompt: missing" in result.stderr
    assert f"{bad}:3: gold: 'c9' is not one of the candidate ids" in result.stderr
    assert f"{bad}:5: invalid JSON" in result.stderr
    assert _row_counts(new_session) == before

    taken = cli.invoke(app, ["import", "jsonl", str(good), "--name", "ds"])
    assert taken.exit_code == 1
    assert "nothing imported: a dataset named 'ds' already exists" in taken.stderr
    assert _row_counts(new_session) == before


# ---------------------------------------------------------------- chunks of items


class FlakyJudge(CountingJudge):
    """A counting judge that fails (for good) every call whose prompt hashes to 0 mod 3."""

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        if sum(request.user.encode()) % 3 == 0:
            raise JudgeError("server_error", "down for this prompt", retryable=False)
        return await super().complete(request)


def _fingerprint(session: Session, run: Run) -> dict:
    """What a run stored: each call's key, ordering, slot keys, answer and how it was made."""
    keys = {db_id: key for key, db_id in item_db_ids(run.dataset_id, session=session).items()}
    return {
        (keys[c.item_id], c.execution, c.call_index): (
            c.content_key,
            c.order,
            c.keys,
            c.ok,
            c.judgment,
            c.attempts,
        )
        for c in _calls(session, run)
    }


@pytest.mark.parametrize(
    ("pairs", "spec"),
    [
        (False, RunSpec("ds", "r", k=3, executions=2)),
        (False, RunSpec("ds", "r", protocol="repeated", k=3)),
        (False, RunSpec("ds", "r", k=4, adaptive="confident", risk=0.05, max_calls=6)),
        (True, RunSpec("ds", "r", protocol="apoc")),
    ],
    ids=["pcf", "repeated", "adaptive", "apoc"],
)
def test_a_run_made_a_few_items_at_a_time_stores_what_a_whole_run_does(
    session, monkeypatch, pairs, spec
):
    """Items read from the database in chunks of 3 (chunk boundaries everywhere), failed calls
    asked again in a second invocation: the same calls, answers, stops and report."""
    items = _items(20, n=2 if pairs else 4)
    if pairs:
        items[4] = Item("q4", "Roughly how many people live in Paris?", items[4].candidates, "c0")
    dataset = _dataset(session, items)

    def made(chunk: int) -> tuple[dict, list, dict]:
        monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", chunk)
        run = stored_run(
            session,
            dataset.id,
            protocol=spec.protocol,
            model="sim-test",
            k=spec.k,
            schedule=spec.schedule,
            executions=spec.executions,
        )
        reports = []
        for judge, retry in ((FlakyJudge(), False), (CountingJudge(), True)):
            report = asyncio.run(
                execute(
                    run,
                    DatasetItems(dataset.id, session=session),
                    judge,
                    spec,
                    session=session,
                    prices={},
                    retry_failed=retry,
                )
            )
            reports.append(report.as_dict() | {"to_do": report.to_do, "requests": judge.requests})
        stored = _fingerprint(session, run), reports, run.settings.stored().get("stops", {})
        delete_run("r", session=session)
        session.commit()
        return stored

    whole = made(500)
    assert made(3) == whole
    calls, reports, _ = whole
    assert reports[0]["failures"] > 0  # the second invocation had failed calls to ask again
    assert reports[1]["retried_failed"] == reports[0]["failures"]
    if spec.adaptive == "off":  # an adaptive run counts a failed call as made
        assert all(ok for _, _, _, ok, _, _ in calls.values())
