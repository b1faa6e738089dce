"""Adaptive ordering budget on the simulated judge and on recorded judges made to break the
stopping policies (both simulations: they show the saving and whether `confident` keeps its
risk, not the method's accuracy).

Simulated judge: for the demo items and the 120 RewardBench 2 Factuality rows in
``../shared/data`` (when present), a full PCF run (K=7 x 3 executions, 21 calls per item) is
made with the simulated judge, then each stopping policy is replayed on it (`pcf whatif`, which
a test shows equal to an adaptive run made for real, `confident` calibrated as a run of that
seed calibrates it): calls per item, the share of winners equal to the full run's, and accuracy
against gold. Target: `certain` at least 25% fewer calls with identical winners. A calibrated
`confident` first judges its calibration items in full (at least 45 at R=0.05, 230 at R=0.01,
2302 at R=0.001), so on the demo's 52 items it saves little at R=0.05 (about 19 calls per item)
and on both datasets R=0.01 and 0.001 judge every item in full (21). ``--seeds N`` repeats it
for the judge's seeds 0..N-1 and adds a summary over them.

Recorded judges (``tests/recorded_judges.py``: integer ties, rankings against the scores, slot
outliers, failed calls, executions that disagree): per family, ``--cases`` seeded items of 2 to
6 candidates over every schedule and preset, the score model's own `confident` rule at R = 0.05
and 0.01 (uncalibrated: the rule each calibration threshold applies; `benchmarks/guarantees.py`
measures the calibrated one on these judges) replayed on each: calls per item (of the full
run's), and the realized change rate (items whose winner differs from the full run's) with its
Monte Carlo standard error. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from pcf.access import operator
from pcf.analysis.whatif import whatif
from pcf.items import load_dataset
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.runs.study import DEMO_ITEMS
from pcf.stopping import ItemCalls, StoppingPolicy, current_winner, replay_all
from pcf.store import get_engine, get_run, import_items, session_scope
from tests.recorded_judges import FAMILIES, recorded_item

ROOT = Path(__file__).resolve().parents[1]
RB2 = ROOT.parent / "shared" / "data" / "rewardbench2" / "factuality-first120.jsonl"
POLICIES = (("certain", None), ("confident", 0.05), ("confident", 0.01), ("confident", 0.001))
FAMILY_RISKS = (0.05, 0.01)


def datasets() -> dict[str, list]:
    found = {"demo": load_dataset("jsonl", DEMO_ITEMS)}
    if RB2.exists():
        found["rb2"] = load_dataset("rewardbench2", RB2, subset="Factuality")
    return found


def replayed(name: str, seed: int, items: list, folder: Path) -> list[dict]:
    """One full simulated run of ``items`` under judge seed ``seed``, each policy replayed."""
    rows = []
    engine = get_engine(f"sqlite:///{folder / f'adaptive-{name}-{seed}.db'}")
    with session_scope(engine) as session:
        import_items(items, session=session, name=name, fmt="jsonl")
        spec = RunSpec(name, f"{name}-full", k=7, executions=3, seed=seed)
        judge_run(spec, session=session, actor=operator())
        full = get_run(spec.run_name, session=session)
        for policy, risk in POLICIES:
            started = time.perf_counter()
            figures = whatif(full, StoppingPolicy(policy, risk=risk or 0.01), session=session)
            gold = figures["against_gold"]
            rows.append(
                {
                    "dataset": name,
                    "seed": seed,
                    "items": figures["items"],
                    "policy": policy if risk is None else f"{policy} R={risk}",
                    "calls_per_item": round(figures["calls_per_item"], 2),
                    "saving": round(1 - figures["calls_per_item"] / 21, 3),
                    "same_winner": round(figures["same_winner"], 4),
                    "accuracy": round(gold["adaptive"], 4),
                    "full_accuracy": round(gold["full"], 4),
                    "replay_s": round(time.perf_counter() - started, 1),
                }
            )
    engine.dispose()
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per dataset and policy, over the seeds: mean and range of calls per item, winners changed."""
    out = []
    for key in dict.fromkeys((r["dataset"], r["policy"]) for r in rows):
        group = [r for r in rows if (r["dataset"], r["policy"]) == key]
        calls = [r["calls_per_item"] for r in group]
        changed = sum(round((1 - r["same_winner"]) * r["items"]) for r in group)
        items = sum(r["items"] for r in group)
        out.append(
            {
                "dataset": key[0],
                "policy": key[1],
                "seeds": len(group),
                "calls_per_item": round(sum(calls) / len(calls), 2),
                "calls_range": [min(calls), max(calls)],
                "changed": changed,
                "items": items,
                "same_winner": round(1 - changed / items, 4),
            }
        )
    return out


def family_rows(cases: int) -> list[dict]:
    """Per recorded judge family and risk: calls per item and the realized change rate of the
    uncalibrated rule."""
    rows = []
    for family in FAMILIES:
        items = [recorded_item(family, number) for number in range(cases)]
        full_calls = sum(len(calls) for _, calls, _ in items) / cases
        for risk in FAMILY_RISKS:
            started = time.perf_counter()
            changed = made = 0
            for ids, calls, weights in items:
                key = calls[0].item_id
                policy = StoppingPolicy("confident", risk=risk, weights=weights)
                [stop] = replay_all([policy], key, ids, calls)
                full = current_winner(ItemCalls(key, ids, tuple(calls)), weights)
                changed += stop.winner != full
                made += stop.calls
            rate = changed / cases
            rows.append(
                {
                    "family": family,
                    "risk": risk,
                    "items": cases,
                    "calls_per_item": round(made / cases, 2),
                    "full_calls_per_item": round(full_calls, 2),
                    "changed": changed,
                    "change_rate": round(rate, 4),
                    "standard_error": round(math.sqrt(risk * (1 - risk) / cases), 4),
                    "replay_s": round(time.perf_counter() - started, 1),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="simulated judge seeds 0..N-1")
    parser.add_argument("--cases", type=int, default=300, help="items per recorded judge family")
    arguments = parser.parse_args()
    seeds = range(arguments.seeds)
    with tempfile.TemporaryDirectory() as folder:
        rows = [
            row
            for seed in seeds
            for name, items in datasets().items()
            for row in replayed(name, seed, items, Path(folder))
        ]
    print("simulated judge (a simulation, not evidence of accuracy); full run = 21 calls/item")
    header = f"{'dataset':8} {'seed':>4} {'policy':18} {'calls/item':>10} {'saving':>7}"
    print(header + f" {'same':>6} {'acc':>6} {'full acc':>8}")
    for r in rows:
        print(
            f"{r['dataset']:8} {r['seed']:>4} {r['policy']:18} {r['calls_per_item']:>10} "
            f"{r['saving']:>7} {r['same_winner']:>6} {r['accuracy']:>6} {r['full_accuracy']:>8}"
        )
    summaries = summary(rows) if len(seeds) > 1 else []
    if summaries:
        print(f"over the judge's seeds 0..{len(seeds) - 1}:")
        for s in summaries:
            low, high = s["calls_range"]
            print(
                f"{s['dataset']:8} {s['policy']:18} calls/item {s['calls_per_item']} "
                f"({low}-{high}), winners changed {s['changed']} of {s['items']} "
                f"(same {s['same_winner']})"
            )
    families = family_rows(arguments.cases)
    print(f"recorded judges ({arguments.cases} items each, every schedule and preset):", end=" ")
    print("confident, uncalibrated")
    print(f"{'family':25} {'R':>5} {'calls/item':>10} {'of full':>8} {'changed':>8} {'rate':>7}")
    for f in families:
        print(
            f"{f['family']:25} {f['risk']:>5} {f['calls_per_item']:>10} "
            f"{f['full_calls_per_item']:>8} {f['changed']:>8} {f['change_rate']:>7} "
            f"(R + 3 s.e. = {f['risk'] + 3 * f['standard_error']:.3f})"
        )
    print(
        json.dumps({"simulated": True, "rows": rows, "over_seeds": summaries, "families": families})
    )


if __name__ == "__main__":
    main()
