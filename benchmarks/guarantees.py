"""Guarantees calibrated on data (pcf/guarantees.py), measured over random calibration samples
(simulations: recorded judges of our own making and the simulated judge; they show whether
the promises hold, not how any real judge behaves).

Calibrated stopping: ``--cases`` items of each judge family the guarantee is held to
(``tests/recorded_judges.GUARANTEE_FAMILIES``: Cauchy score noise, random answers on a fifth of
the calls, slot outliers, execution shifts, integer ties, stated risk and confidence against the
truth), decided on the proposed weights, each replayed once under every threshold and under
``certain``; then for R = 0.05 and 0.2 the uncalibrated rule's change rate on all items, and over
``--splits`` calibration draws (runs of seed 0, 1, ...) the realized change rate on the items
outside the sample: its mean, the share of draws above R (the finite-set promise keeps it at most
delta) with its standard error over the draws, the share of draws where no threshold passed, and
the calls per item against the full run's.

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
from pcf.stopping import DELTA, RISK_LEVELS
from pcf.store import get_engine, get_run, import_items, session_scope
from tests.recorded_judges import GUARANTEE_FAMILIES, Replayed

ROOT = Path(__file__).resolve().parents[1]
RB2 = ROOT.parent / "shared" / "data" / "rewardbench2" / "factuality-first120.jsonl"
RISKS = (0.05, 0.2)
ALPHAS = (0.1, 0.2)


def stopping_rows(cases: int, splits: int) -> list[dict]:
    rows = []
    for family in GUARANTEE_FAMILIES:
        items = Replayed.of(family, cases)
        for risk in RISKS:
            runs = [items.calibrated(risk, seed) for seed in range(splits)]
            rates = np.array([run.rate for run in runs])
            above = float(np.mean(rates > risk))
            rows.append(
                {
                    "family": family,
                    "risk": risk,
                    "delta": DELTA,
                    "items": cases,
                    "calibration_items": runs[0].calibration.items,
                    "uncalibrated_change_rate": round(
                        float(items.changed[:, RISK_LEVELS.index(risk)].mean()), 4
                    ),
                    "calibrated_change_rate": round(float(rates.mean()), 4),
                    "others_above_risk": round(above, 3),
                    "others_above_risk_se": round(math.sqrt(above * (1 - above) / splits), 3),
                    "no_threshold": round(
                        float(np.mean([run.calibration.threshold is None for run in runs])), 3
                    ),
                    "calls_per_item": round(float(np.mean([r.calls_per_item for r in runs])), 2),
                    "full_calls_per_item": round(float(items.calls[:, -1].mean()), 2),
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
    parser.add_argument("--only", choices=("stopping", "escalate"), help="one guarantee only")
    arguments = parser.parse_args()
    stopping, escalation = [], []
    if arguments.only != "escalate":
        stopping = stopping_rows(arguments.cases, arguments.splits)
        for row in stopping:
            print(row)
    if arguments.only != "stopping":
        with tempfile.TemporaryDirectory() as folder:
            escalation = escalate_rows(arguments.splits, Path(folder))
        for row in escalation:
            print(row)
    print(json.dumps({"simulated": True, "stopping": stopping, "escalate": escalation}))


if __name__ == "__main__":
    main()
