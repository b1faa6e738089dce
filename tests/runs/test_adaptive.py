"""Adaptive runs (pcf/runs/adaptive.py): waves through the real engine, the same figures as
`pcf whatif` on the full run, resume after an interruption, and the call budget."""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from dataclasses import replace

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from pcf.access import operator
from pcf.analysis.results import run_decisions
from pcf.analysis.whatif import replay_runs, whatif
from pcf.cli import app
from pcf.items import load_dataset
from pcf.judges.base import JudgeReply, JudgeRequest
from pcf.judges.simulated import SimulatedJudge
from pcf.judgments import write_judgments
from pcf.orderings import schedule
from pcf.run_settings import parse_run_settings
from pcf.runs import adaptive
from pcf.runs.live import execute
from pcf.runs.manage import judge_run, open_run
from pcf.runs.spec import RunSpec
from pcf.runs.study import DEMO_ITEMS
from pcf.stopping import STOPPING_VERSION, StoppingPolicy
from pcf.store import get_run, import_items, item_db_ids, load_items, run_calls, run_judgments
from pcf.weights import PRESETS
from tests.factories import make_item, replay
from tests.recorded_judges import FAMILIES, record

FULL = "demo-pcf"  # the demo's K=7 x 3 simulated run
runner = CliRunner()


def calls_per_item(db: Session, name: str) -> Counter:
    run = get_run(name, session=db)
    return Counter(call.item_id for call in run_calls(run.id, session=db))


@pytest.mark.parametrize(("policy", "risk"), [("certain", 0.01), ("confident", 0.05)])
def test_an_adaptive_run_makes_what_whatif_predicts(db: Session, policy: str, risk: float):
    spec = RunSpec("demo", f"adaptive-{policy}", k=7, executions=3, adaptive=policy, risk=risk)
    run, report = judge_run(spec, session=db, actor=operator())
    predicted = whatif(get_run(FULL, session=db), StoppingPolicy(policy, risk=risk), session=db)
    made = calls_per_item(db, spec.run_name)
    assert sum(made.values()) / len(made) == pytest.approx(predicted["calls_per_item"])
    assert report.calls_made == 0  # the full run's calls answer every wave from the cache
    stops = run.settings.stored()["stops"]
    assert Counter(stop["reason"] for stop in stops.values()) == predicted["stop_reasons"]
    winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=db)}
    full = {d["item_id"]: d["winner"] for d in run_decisions(get_run(FULL, session=db), session=db)}
    compared = [key for key in full if stops[key]["reason"] != "calibration"]
    same = sum(winners[key] == full[key] for key in compared) / len(compared)
    assert same == pytest.approx(predicted["same_winner"])  # on the items its promise is about
    assert predicted["compared_items"] == len(compared)
    assert predicted.get("calibration") == run.settings.stored()["stopping"]["calibration"]
    if policy == "confident":  # 47 of the 52 items calibrate the threshold for the other 5
        assert adaptive.calibration_items(run) == stops.keys() - set(compared)
        assert (predicted["calibration"]["items"], len(compared)) == (47, 5)
    if policy == "certain":
        assert winners == full
        assert predicted["calls_per_item"] < 0.8 * predicted["full_calls_per_item"]


class Interrupted(BaseException):
    """Stands for the process being killed in the middle of a run."""


class InterruptingJudge:
    """The simulated judge, interrupted after ``answers`` answers."""

    def __init__(self, answers: int) -> None:
        self.inner = SimulatedJudge("sim-fresh")
        self.backend, self.model = self.inner.backend, self.inner.model
        self.left = answers

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        if self.left == 0:
            raise Interrupted
        self.left -= 1
        return await self.inner.complete(request)


def test_a_resumed_adaptive_run_decides_as_an_uninterrupted_one(db: Session):
    def spec(name: str) -> RunSpec:
        return RunSpec(
            "demo", name, model="sim-fresh", k=5, executions=2, adaptive="confident", limit=12
        )

    resumed = spec("resumed")
    run = open_run(resumed, session=db)
    db.commit()
    items = load_items(run.dataset_id, session=db)[:12]

    def execute_with(judge) -> None:
        asyncio.run(execute(run, items, judge, resumed, session=db, prices={}))

    with pytest.raises(Interrupted):
        execute_with(InterruptingJudge(answers=20))
    assert 0 < sum(calls_per_item(db, "resumed").values()) < 12 * 10
    execute_with(SimulatedJudge("sim-fresh"))
    judge_run(spec("uninterrupted"), session=db, actor=operator())
    assert calls_per_item(db, "resumed") == calls_per_item(db, "uninterrupted")
    assert (
        get_run("resumed", session=db).settings.stored()["stops"]
        == (get_run("uninterrupted", session=db).settings.stored()["stops"])
    )


def test_max_calls_bounds_every_item_and_may_exceed_the_plan(db: Session):
    planned = RunSpec("demo", "capped", k=3, executions=1, adaptive="confident", risk=0.001)
    judge_run(planned, session=db, actor=operator())
    assert max(calls_per_item(db, "capped").values()) <= 3
    more = RunSpec("demo", "more", k=3, executions=1, adaptive="confident", risk=0.2, max_calls=8)
    run, _ = judge_run(more, session=db, actor=operator())
    made = calls_per_item(db, "more")
    assert sorted(made.values())[-11:] == [8] * 11  # calibration items make every allowed call
    reasons = Counter(stop["reason"] for stop in run.settings.stored()["stops"].values())
    assert reasons["calibration"] == run.settings.stored()["stopping"]["calibration"]["items"] == 11
    assert set(reasons) <= {"calibration", "confident", "certain", "max_calls"}


def test_adaptive_settings_are_part_of_the_runs_identity(db: Session):
    judge_run(
        RunSpec("demo", "ident", k=3, adaptive="certain", limit=2), session=db, actor=operator()
    )
    with pytest.raises(ValueError, match="adaptive"):
        judge_run(
            RunSpec("demo", "ident", k=3, adaptive="confident", limit=2),
            session=db,
            actor=operator(),
        )


SCHEDULE_RUNS = (
    # schedule, K, executions, items judged, presets of the certain and the confident run
    ("balanced", 5, 2, 6, ("proposed", "rank-only")),
    ("random", 2, 3, 6, ("vote-only", "uniform")),
    ("exhaustive", 1, 2, 3, ("score-only", "no-uncertainty")),
    ("repeated", 4, 2, 6, ("uniform", "proposed")),
)


def _recorded_dataset(session: Session) -> list:
    """Items of 2 to 6 candidates (and one more of 4), each answered by a recorded judge family."""
    items = [make_item(f"r{n}", n) for n in (2, 3, 4, 5, 6)] + [make_item("r4b", 4)]
    import_items(items, session=session, name="recorded", fmt="jsonl")
    session.commit()
    return items


def _recording(
    items: list, kind: str, k: int, executions: int, folder, families: tuple = FAMILIES
) -> object:
    """The judgments.jsonl a replay judge answers every planned call of ``kind`` from, item
    ``n`` by the recorded judge ``families[n % len(families)]``."""
    path = folder / f"{kind}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for number, item in enumerate(items):
            ids = item.candidate_ids
            orders = schedule(kind, ids, k, dataset_seed=0, item_id=item.item_id)
            family = families[number % len(families)]
            write_judgments(record(family, item.item_id, ids, orders, executions, number), out)
    return path


@pytest.mark.parametrize(("kind", "k", "executions", "judged", "presets"), SCHEDULE_RUNS)
def test_whatif_equals_a_real_adaptive_run_on_every_schedule(
    session: Session, tmp_path, kind, k, executions, judged, presets
):
    """Recorded judges made to break the score model, replayed through the engine: per item,
    the calls, stop reason and winner of a real adaptive run are what `pcf whatif` predicts
    on the full run, and `certain` keeps the full run's winners."""
    items = _recorded_dataset(session)
    path = _recording(items, kind, k, executions, tmp_path)

    def spec(name: str, **adaptive) -> RunSpec:
        return RunSpec(
            "recorded",
            name,
            backend="replay",
            replay=path,
            k=k,
            schedule=kind,
            executions=executions,
            limit=judged,
            **adaptive,
        )

    full, _ = judge_run(spec("full"), session=session, actor=operator())
    judged_items = items[:judged]
    for policy, preset in zip(("certain", "confident"), presets, strict=True):
        weights = PRESETS[preset]
        stopping = StoppingPolicy(policy, risk=0.05, weights=weights)
        run, report = judge_run(
            spec(policy, adaptive=policy, risk=0.05, stop_on=weights),
            session=session,
            actor=operator(),
        )
        # Every answer comes from the full run's cache; only recorded failures are asked again.
        assert report.calls_made == report.failures
        full_calls = run_judgments(full.id, session=session)
        ((predicted, _),) = replay_runs(full_calls, judged_items, [stopping])
        made = calls_per_item(session, run.name)
        stops = run.settings.stored()["stops"]
        winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=session)}
        for item in judged_items:
            stop, whole = predicted[item.item_id]
            assert made[item_db_ids(run.dataset_id, session=session)[item.item_id]] == stop.calls
            assert stops[item.item_id]["reason"] == stop.reason
            assert winners[item.item_id] == item.candidate_ids[stop.winner]
            if policy == "certain":
                assert stop.winner == whole.winner
        figures = whatif(full, stopping, session=session)
        assert figures["calls_per_item"] == pytest.approx(sum(made.values()) / judged)


def test_calibrated_confident_keeps_its_risk_on_a_recorded_judge_through_the_cli(
    session: Session, tmp_path
):
    """A judge with Cauchy score noise (uncalibrated `confident` at R=0.2 changes about 23% of
    its winners, docs/figures.md), recorded for 60 items and replayed by `pcf judge --backend
    replay`: the run records its calibration (12 items judged in full, a threshold whose bound
    on the other items is at most R), and changes at most R of the other 48 items' winners
    against the full replay (the finite-set promise: so in at least 90% of calibration draws;
    this one is seeded), where the score model's own rule at R, uncalibrated, changes more."""
    risk = 0.2
    items = [make_item(f"c{n}", 2 + n % 3) for n in range(60)]
    import_items(items, session=session, name="cauchy", fmt="jsonl")
    session.commit()
    path = _recording(items, "balanced", 5, 1, tmp_path, families=("cauchy_noise",))
    replayed = ["judge", "cauchy", "--backend", "replay", "--replay", str(path), "--k", "5"]
    calibrated = ["--name", "calibrated", "--adaptive", "confident", "--risk", str(risk)]
    for extra in (["--name", "full"], calibrated):
        result = runner.invoke(app, [*replayed, *extra])
        assert result.exit_code == 0, result.output
    run = get_run("calibrated", session=session)
    calibration = run.settings.stored()["stopping"]["calibration"]
    assert (calibration["risk"], calibration["items"], calibration["delta"]) == (risk, 12, 0.1)
    assert calibration["threshold"] is None or calibration["bound"] <= risk
    reasons = {key: stop["reason"] for key, stop in run.settings.stored()["stops"].items()}
    others = [key for key, reason in reasons.items() if reason != "calibration"]
    assert len(others) == 48
    winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=session)}
    full_run = get_run("full", session=session)
    full = {d["item_id"]: d["winner"] for d in run_decisions(full_run, session=session)}
    changed = sum(winners[key] != full[key] for key in others)
    assert changed / len(others) <= risk
    by_item = defaultdict(list)
    for call in run_judgments(full_run.id, session=session):
        by_item[call.item_id].append(call)
    ids = {item.item_id: item.candidate_ids for item in items}
    trusted = StoppingPolicy("confident", risk=risk)
    uncalibrated = sum(
        ids[key][replay(trusted, key, ids[key], by_item[key]).winner] != full[key] for key in others
    )
    assert uncalibrated / len(others) > risk


def test_an_exhaustive_run_uses_every_planned_ordering(session: Session, tmp_path):
    """The audit's case: the demo's demo-005 alone, K=7 x 3, exhaustive (72 planned calls):
    `certain` stops on the full run's winner, past the 21 calls a K=7 budget would allow."""
    item = next(i for i in load_dataset("jsonl", DEMO_ITEMS) if i.item_id == "demo-005")
    import_items([item], session=session, name="one", fmt="jsonl")
    session.commit()

    def spec(**adaptive) -> RunSpec:
        return RunSpec("one", k=7, executions=3, schedule="exhaustive", seed=0, **adaptive)

    full, _ = judge_run(spec(), session=session, actor=operator())
    run, _ = judge_run(
        replace(spec(adaptive="certain"), name="adaptive"), session=session, actor=operator()
    )
    assert sum(calls_per_item(session, "adaptive").values()) > 21
    assert sum(calls_per_item(session, full.name).values()) == 72
    winner = {r.name: run_decisions(r, session=session)[0]["winner"] for r in (full, run)}
    assert winner[full.name] == winner["adaptive"] == item.gold


def _unversioned(stop: dict) -> dict:
    return {key: value for key, value in stop.items() if key != "version"}


FINISHED = ["judge", "demo", "--name", "finished", "--model", "sim-fresh", "--k", "7"]
FINISHED += ["--executions", "3", "--adaptive", "confident", "--risk", "0.05", "--limit", "20"]


def test_a_finished_adaptive_run_stays_as_it_was_across_a_policy_change(db: Session, monkeypatch):
    """A run finished by an earlier release is judged again by today's code: no call, the
    same stops and winners, and a note of what continuing would cost; continuing is the
    explicit --recheck-stops, which says the cost first and records today's version.

    The earlier release is today's code without calibration (it trusts the score model), and
    its records as releases before versions left them: no version."""
    with monkeypatch.context() as earlier:
        earlier.setattr(adaptive, "calibration_keys", lambda spec, keys: set())
        result = runner.invoke(app, FINISHED)
        assert result.exit_code == 0, result.output
    db.expire_all()
    run = get_run("finished", session=db)
    old_stops = {key: _unversioned(stop) for key, stop in run.settings.stored()["stops"].items()}
    stored = {k: v for k, v in run.settings.stored().items() if k != "stopping"}
    run.settings = parse_run_settings(stored | {"stops": old_stops})
    db.add(run)
    db.commit()
    before = calls_per_item(db, "finished")
    winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=db)}

    again = runner.invoke(app, FINISHED)
    assert again.exit_code == 0, again.output
    figures = json.loads(again.stdout)
    assert figures["this_invocation"]["attempts"] == 0
    assert figures["this_invocation"]["cache_hits"] == 0
    db.expire_all()
    run = get_run("finished", session=db)
    assert calls_per_item(db, "finished") == before
    assert run.settings.stored()["stops"] == old_stops
    assert {d["item_id"]: d["winner"] for d in run_decisions(run, session=db)} == winners
    recheck = figures["stopping"]["recheck"]
    assert (recheck["stopped_by_versions"], recheck["current_version"]) == ([1], STOPPING_VERSION)
    assert recheck["items_reopened"] > 0  # today's policy would not have stopped them there
    assert "--recheck-stops" in again.stderr

    continued = runner.invoke(app, [*FINISHED, "--recheck-stops"])
    assert continued.exit_code == 0, continued.output
    assert f"would continue {recheck['items_reopened']} of them" in continued.stderr
    made = json.loads(continued.stdout)["this_invocation"]["attempts"]
    assert recheck["calls_at_least"] <= made <= recheck["calls_at_most"]
    db.expire_all()
    run = get_run("finished", session=db)
    assert {stop["version"] for stop in run.settings.stored()["stops"].values()} == {
        STOPPING_VERSION
    }
    assert run.settings.stored()["stopping"]["versions"] == [STOPPING_VERSION]


def test_whatif_replays_full_runs_on_the_weights_given_and_stop_on_is_checked(db: Session):
    judge_run(
        RunSpec("demo", "stopped", k=3, adaptive="certain", limit=4), session=db, actor=operator()
    )
    refused = runner.invoke(app, ["whatif", "stopped"])
    assert refused.exit_code == 2
    assert "is adaptive: its items stopped early" in refused.stderr
    replayed = runner.invoke(
        app, ["whatif", FULL, "--adaptive", "certain", "--stop-on", "vote-only"]
    )
    assert replayed.exit_code == 0, replayed.output
    figures = json.loads(replayed.stdout)
    assert (figures["stop_on"], figures["same_winner"]) == ("vote-only", 1.0)
    for extra, message in (
        (["--adaptive", "certain", "--stop-on", "bogus"], "unknown preset 'bogus'"),
        (["--stop-on", "rank-only"], "add --adaptive"),
        (["--adaptive", "certain", "--recheck-stops", "--batch"], "not with --batch"),
    ):
        result = runner.invoke(app, ["judge", "demo", "--limit", "2", *extra])
        assert result.exit_code == 2, extra
        assert message in result.stderr


def test_the_calibration_counts_the_changes_the_live_rule_makes_on_its_items(
    session: Session, tmp_path, monkeypatch
):
    """The calibration is the procedure: a judge answering at random on a fifth of its calls,
    replayed; a calibrated `confident` run counts, on its calibration items, exactly the changed
    winners that a live run stopping every item at the chosen threshold (waves, call order,
    settled test and winner of the engine) makes on those same items, item by item."""
    items = [make_item(f"q{n}", 2 + n % 3) for n in range(40)]
    import_items(items, session=session, name="noisy", fmt="jsonl")
    session.commit()
    path = _recording(items, "balanced", 5, 2, tmp_path, families=("random_answers",))

    def spec(name: str, risk: float) -> RunSpec:
        return RunSpec(
            "noisy", name, backend="replay", replay=path, k=5, executions=2,
            adaptive="confident", risk=risk, seed=3,
        )  # fmt: skip

    full, _ = judge_run(
        replace(spec("full", 0.2), adaptive="off"), session=session, actor=operator()
    )
    calibrated, _ = judge_run(spec("calibrated", 0.2), session=session, actor=operator())
    calibration = calibrated.settings.stored()["stopping"]["calibration"]
    assert calibration["threshold"] is not None, calibration  # seed 3 draws a passing sample
    sample = adaptive.calibration_items(calibrated)
    assert (len(sample), calibration["items"], calibration["population"]) == (12, 12, 40)
    with monkeypatch.context() as live_everywhere:
        live_everywhere.setattr(adaptive, "calibration_keys", lambda spec, keys: set())
        live, _ = judge_run(
            spec("live", calibration["threshold"]), session=session, actor=operator()
        )
    assert not adaptive.calibration_items(live)
    winners = {d["item_id"]: d["winner"] for d in run_decisions(live, session=session)}
    truth = {d["item_id"]: d["winner"] for d in run_decisions(full, session=session)}
    by_item = defaultdict(list)
    for call in run_judgments(full.id, session=session):
        by_item[call.item_id].append(call)
    ids = {item.item_id: item.candidate_ids for item in items}
    policy = StoppingPolicy("confident", risk=calibration["threshold"])
    for key in sample:
        stop = replay(policy, key, ids[key], by_item[key])
        assert (stop.calls, stop.winner) == (
            live.settings.stored()["stops"][key]["calls"],
            live.settings.stored()["stops"][key]["winner"],
        ), key
    assert sum(winners[key] != truth[key] for key in sample) == calibration["changed"]
