"""Guarantees calibrated on data (pcf/guarantees.py), measured over random calibration samples
(simulations: recorded judges of our own making and the simulated judge; they show whether
the promises hold, not how any real judge behaves).

Calibrated stopping: ``--cases`` items of every recorded judge made to break the score model
(``tests/recorded_judges.py``: integer ties, rankings against the scores, slot outliers, failed
calls, executions that disagree, Cauchy score noise, 20% garbage answers), decided on the
proposed weights, each replayed once under every threshold and under ``certain``; then for
R = 0.05 and 0.2, the uncalibrated rule's change rate on all items, and over ``--splits`` random
calibration samples (as a run draws them) the calibrated rule's change rate on the other items
(mean; ``standard_error`` is one run's binomial sampling error on that many other items at that
rate; and the share of samples above R), the share of samples whose chosen threshold changes
more than R of all the judge's items (its risk: the guarantee keeps this at most delta), and
its calls per item against the full run's.

Trust or escalate: the demo's simulated PCF run and, when ``../shared/data`` has it, a simulated
K=7 run of RewardBench 2's 120 Factuality rows; for each signal and alpha (delta 0.1), over
``--splits`` random halves of the gold as calibration: the share of the other half the judge
decides, how often its agreement there is >= 1 - alpha, and the same for the direct call's
confidence. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import numpy as np

from pcf.access import operator
from pcf.analysis.escalate import SIGNALS, escalate
from pcf.items import load_dataset
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.runs.study import build_demo
from pcf.stopping import (
    DELTA,
    THRESHOLDS,
    ItemCalls,
    StoppingPolicy,
    calibration_sample,
    current_winner,
    replay_all,
    thresholds_passed,
)
from pcf.store import get_engine, get_run, import_items, session_scope
from tests.recorded_judges import BREAKING, FAMILIES, recorded_item

ROOT = Path(__file__).resolve().parents[1]
RB2 = ROOT.parent / "shared" / "data" / "rewardbench2" / "factuality-first120.jsonl"
RISKS = (0.05, 0.2)
ALPHAS = (0.1, 0.2)


def stopping_rows(cases: int, splits: int) -> list[dict]:
    policies = [StoppingPolicy("confident", risk=t) for t in THRESHOLDS]
    policies.append(StoppingPolicy("certain"))
    rows = []
    for family in FAMILIES + BREAKING:
        items = [recorded_item(family, number)[:2] for number in range(cases)]
        keys = [calls[0].item_id for _, calls in items]
        changed, calls = [], []
        for key, (ids, made) in zip(keys, items, strict=True):
            full = current_winner(ItemCalls(key, ids, tuple(made)))
            stops = replay_all(policies, key, ids, made)
            changed.append([stop.winner != full for stop in stops])
            calls.append([stop.calls for stop in stops] + [len(made)])
        changed_array, calls_array = np.array(changed), np.array(calls)
        for risk in RISKS:
            rates, risks, made = [], [], []
            for seed in range(splits):
                inside = np.isin(keys, list(calibration_sample(keys, risk, seed)))
                column = (thresholds_passed(risk, changed_array[inside, :-1]) or len(policies)) - 1
                rates.append(changed_array[~inside, column].mean())
                risks.append(changed_array[:, column].mean())
                made.append(np.where(inside, calls_array[:, -1], calls_array[:, column]).mean())
            calibration_items = len(calibration_sample(keys, risk, 0))
            mean = float(np.mean(rates))
            rows.append(
                {
                    "family": family,
                    "risk": risk,
                    "delta": DELTA,
                    "items": cases,
                    "calibration_items": calibration_items,
                    "uncalibrated_change_rate": round(
                        changed_array[:, THRESHOLDS.index(risk)].mean(), 4
                    ),
                    "calibrated_change_rate": round(mean, 4),
                    "standard_error": round(
                        math.sqrt(mean * (1 - mean) / (cases - calibration_items)), 4
                    ),
                    "others_above_risk": round(float(np.mean(np.array(rates) > risk)), 3),
                    "threshold_risk_above": round(float(np.mean(np.array(risks) > risk)), 3),
                    "calls_per_item": round(float(np.mean(made)), 2),
                    "full_calls_per_item": round(float(calls_array[:, -1].mean()), 2),
                }
            )
    return rows


def escalate_rows(splits: int, folder: Path) -> list[dict]:
    engine = get_engine(f"sqlite:///{folder / 'guarantees.db'}")
    rows = []
    with session_scope(engine) as session:
        build_demo(session=session, actor=operator())
        runs = [get_run("demo-pcf", session=session)]
        if RB2.exists():
            import_items(
                load_dataset("rewardbench2", RB2, subset="Factuality"),
                session=session,
                name="rb2",
                fmt="jsonl",
            )
            runs.append(
                judge_run(RunSpec("rb2", "rb2-pcf", k=7), session=session, actor=operator())[0]
            )
        for run in runs:
            for alpha in ALPHAS:
                for signal in SIGNALS:
                    draws = [
                        escalate(
                            run, session=session, alpha=alpha, delta=DELTA, signal=signal, seed=s
                        )
                        for s in range(splits)
                    ]
                    held = [d["held_out_agreement"] for d in draws]
                    rows.append(
                        {
                            "run": run.name,
                            "alpha": alpha,
                            "signal": signal,
                            "calibration_items": draws[0]["calibration"]["items"],
                            "decided_share": round(
                                float(np.mean([d["decided_share"] for d in draws])), 3
                            ),
                            "held": round(
                                float(np.mean([h is None or h >= 1 - alpha for h in held])), 3
                            ),
                            "direct_decided_share": round(
                                float(np.mean([d["baseline"]["decided_share"] for d in draws])), 3
                            ),
                        }
                    )
    engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="items per breaking judge")
    parser.add_argument("--splits", type=int, default=200, help="random calibration samples")
    arguments = parser.parse_args()
    stopping = stopping_rows(arguments.cases, arguments.splits)
    for row in stopping:
        print(row)
    with tempfile.TemporaryDirectory() as folder:
        escalation = escalate_rows(arguments.splits, Path(folder))
    for row in escalation:
        print(row)
    print(json.dumps({"simulated": True, "stopping": stopping, "escalate": escalation}))


if __name__ == "__main__":
    main()
