"""Human labels where they matter: the adaptive labelling plan against a fixed two labels per
item, with simulated annotators on the demo (a simulation of people; the judge is the demo's
simulated judge too).

Two simulated annotators pick the gold answer with probability ``--accuracy`` (else another
candidate at random), seeded per annotator, item and seed. With a fixed plan both label every
item; with the adaptive plan the second labels only where Adjudicate would ask for it
(:func:`pcf.labelling.human_gold.needs_more_labels`: the first label disagrees with the PCF
winner of ``demo-pcf``, or the item carries an instability flag). Human gold is unanimous (the
plan's default). Two judges: the demo's, and a confidently wrong one (``--wrong`` of the items
get a wrong PCF winner and no flag) whose mistake each annotator shares with probability
``--shared`` on those items. Per judge, averaged over seeds: labels given, the share saved,
items with human gold and wrong gold in each plan, each plan's gold accuracy on the SAME items
(gold in both plans), and Compare's PCF accuracy read against each plan's human gold beside the
true one (against the dataset's gold), each over that plan's own gold items (not the same items:
the adaptive plan keeps a single label as gold only where it agrees with the judge). Last line:
JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from pcf.access import operator
from pcf.analysis.results import analyse_run
from pcf.flags import FLAGS
from pcf.labelling.human_gold import human_gold, needs_more_labels
from pcf.labelling.plan import Plan
from pcf.labelling.queue import labels_wanted
from pcf.orderings import seeded_rng
from pcf.runs.study import build_demo
from pcf.store import get_engine, get_run, load_items, session_scope

NO_RESOLUTIONS = pd.DataFrame(columns=["item_key", "choice"])


def annotate(
    person: str, item, accuracy: float, seed: int, mistake: str | None = None, shared: float = 0
) -> str:
    """A simulated person's label: the judge's ``mistake`` (where it has one) with probability
    ``shared``, else the gold answer with probability ``accuracy``."""
    rng = seeded_rng("annotator", person, item.item_id, seed)
    if mistake is not None and shared and rng.random() < shared:
        return mistake
    if rng.random() < accuracy:
        return item.gold
    others = [c for c in item.candidate_ids if c != item.gold]
    return others[int(rng.integers(len(others)))]


def frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_key", "annotator", "choice"])


def confidently_wrong(items, table: pd.DataFrame, share: float, seed: int) -> pd.DataFrame:
    """The decision table of a judge wrong on ``share`` of the items, with no flag there."""
    rng = np.random.default_rng(seed)
    out = table.copy()
    for row, item in enumerate(items):
        if rng.random() < share:
            others = [c for c in item.candidate_ids if c != item.gold]
            out.loc[row, "winner"] = others[int(rng.integers(len(others)))]
            out.loc[row, list(FLAGS)] = False
    return out


def one_seed(items, table: pd.DataFrame, accuracy: float, seed: int, shared: float) -> dict:
    winners = dict(zip(table["item_id"], table["winner"], strict=True))
    gold = {i.item_id: i.gold for i in items}
    keys = [i.item_id for i in items]
    mistakes = {k: w for k, w in winners.items() if w != gold[k]}

    def labels_of(person: str) -> dict[str, str]:
        return {
            i.item_id: annotate(person, i, accuracy, seed, mistakes.get(i.item_id), shared)
            for i in items
        }

    first, second = labels_of("first"), labels_of("second")
    first_frame = frame([(k, "first", first[k]) for k in keys])
    wanted = labels_wanted(
        Plan(labels_per_item=2, adaptive=True), keys, needs_more_labels(table, first_frame)
    )
    plans = {
        "fixed": pd.concat([first_frame, frame([(k, "second", second[k]) for k in keys])]),
        "adaptive": pd.concat(
            [first_frame, frame([(k, "second", second[k]) for k in keys if wanted[k] == 2])]
        ),
    }
    known = {name: human_gold(labels, NO_RESOLUTIONS).known() for name, labels in plans.items()}
    same = known["fixed"].keys() & known["adaptive"].keys()
    out: dict = {"seed": seed, "same_items": len(same)}
    for name, labels in plans.items():
        mine = known[name]
        out[f"{name}_labels"] = len(labels)
        out[f"{name}_gold_items"] = len(mine)
        out[f"{name}_wrong_gold"] = sum(mine[k] != gold[k] for k in mine)
        out[f"{name}_accuracy_same_items"] = (
            float(np.mean([mine[k] == gold[k] for k in same])) if same else None
        )
        out[f"pcf_read_{name}"] = float(np.mean([winners[k] == mine[k] for k in mine]))
        out[f"pcf_true_{name}"] = float(np.mean([winners[k] == gold[k] for k in mine]))
    out["saved_share"] = 1 - out["adaptive_labels"] / out["fixed_labels"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--accuracy", type=float, default=0.8)
    parser.add_argument("--wrong", type=float, default=0.25, help="share confidently wrong")
    parser.add_argument("--shared", type=float, default=0.5, help="chance a person shares it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        engine = get_engine(f"sqlite:///{Path(folder) / 'overlap.db'}")
        with session_scope(engine) as session:
            build_demo(session=session, actor=operator())
            run = get_run("demo-pcf", session=session)
            table = analyse_run(run, session=session).table
            items = load_items(run.dataset_id, session=session)
        engine.dispose()
    judges = {"demo": (table, 0.0)}
    judges["confidently_wrong"] = (confidently_wrong(items, table, args.wrong, 0), args.shared)
    summary: dict = {
        "simulated": True,
        "items": len(items),
        "annotator_accuracy": args.accuracy,
        "seeds": args.seeds,
    }
    for name, (decisions, shared) in judges.items():
        rows = [one_seed(items, decisions, args.accuracy, s, shared) for s in range(args.seeds)]
        for row in rows:
            print(name, row)
        summary[name] = {
            key: round(float(np.mean([r[key] for r in rows if r[key] is not None])), 4)
            for key in rows[0]
            if key != "seed"
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
