"""Adaptive runs (pcf/runs/adaptive.py): waves through the real engine, the same figures as
`pcf whatif` on the full run, resume after an interruption, and the call budget."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sqlmodel import Session

from pcf.access import operator
from pcf.analysis.results import run_decisions
from pcf.analysis.whatif import whatif
from pcf.judges.base import JudgeReply, JudgeRequest
from pcf.judges.simulated import SimulatedJudge
from pcf.runs.engine import execute
from pcf.runs.manage import judge_run, open_run
from pcf.runs.spec import RunSpec
from pcf.stopping import StoppingPolicy
from pcf.store import get_run, item_db_ids, load_items, run_calls

FULL = "demo-pcf"  # the demo's K=7 x 3 simulated run


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
    stops = run.settings["stops"]
    assert Counter(stop["reason"] for stop in stops.values()) == predicted["stop_reasons"]
    winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=db)}
    full = {d["item_id"]: d["winner"] for d in run_decisions(get_run(FULL, session=db), session=db)}
    same = sum(winners[key] == full[key] for key in full) / len(full)
    assert same == pytest.approx(predicted["same_winner"])
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
    ids = item_db_ids(run.dataset_id, session=db)

    def execute_with(judge) -> None:
        asyncio.run(execute(run, items, judge, resumed, session=db, db_ids=ids, prices={}))

    with pytest.raises(Interrupted):
        execute_with(InterruptingJudge(answers=20))
    assert 0 < sum(calls_per_item(db, "resumed").values()) < 12 * 10
    execute_with(SimulatedJudge("sim-fresh"))
    judge_run(spec("uninterrupted"), session=db, actor=operator())
    assert calls_per_item(db, "resumed") == calls_per_item(db, "uninterrupted")
    assert (
        get_run("resumed", session=db).settings["stops"]
        == (get_run("uninterrupted", session=db).settings["stops"])
    )


def test_max_calls_bounds_every_item_and_may_exceed_the_plan(db: Session):
    planned = RunSpec("demo", "capped", k=3, executions=1, adaptive="confident", risk=0.001)
    judge_run(planned, session=db, actor=operator())
    assert max(calls_per_item(db, "capped").values()) <= 3
    more = RunSpec("demo", "more", k=3, executions=1, adaptive="confident", risk=0.001, max_calls=8)
    run, _ = judge_run(more, session=db, actor=operator())
    made = calls_per_item(db, "more")
    assert max(made.values()) <= 8
    assert max(made.values()) > 3  # unsettled items went on past the plan
    reasons = Counter(stop["reason"] for stop in run.settings["stops"].values())
    assert set(reasons) <= {"confident", "max_calls"}


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
