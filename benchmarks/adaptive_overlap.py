"""Human labels where they matter: the adaptive labelling plan against a fixed two labels per
item, with simulated annotators on the demo (a simulation of people; the judge is the demo's
simulated judge too).

Two simulated annotators pick the gold answer with probability ``--accuracy`` (else another
candidate at random), seeded per annotator, item and seed. With a fixed plan both label every
item; with the adaptive plan the second labels only where Adjudicate would ask for it
(:func:`pcf.labelling.human_gold.needs_more_labels`: the first label disagrees with the PCF
winner of ``demo-pcf``, or the item carries an instability flag). Human gold is unanimous (the
plan's default). Printed per seed and on average: labels given, the share saved, items with human
gold, the accuracy of that gold against the dataset's gold, and the items whose gold differs
between the two plans. Last line: JSON.
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
from pcf.labelling.human_gold import human_gold, needs_more_labels
from pcf.labelling.plan import Plan
from pcf.labelling.queue import labels_wanted
from pcf.orderings import seeded_rng
from pcf.runs.study import build_demo
from pcf.store import get_engine, get_run, load_items, session_scope

NO_RESOLUTIONS = pd.DataFrame(columns=["item_key", "choice"])


def annotate(person: str, item, accuracy: float, seed: int) -> str:
    """A simulated person's label: the gold answer with probability ``accuracy``."""
    rng = seeded_rng("annotator", person, item.item_id, seed)
    if rng.random() < accuracy:
        return item.gold
    others = [c for c in item.candidate_ids if c != item.gold]
    return others[int(rng.integers(len(others)))]


def frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_key", "annotator", "choice"])


def one_seed(items, table: pd.DataFrame, accuracy: float, seed: int) -> dict:
    first = frame([(i.item_id, "first", annotate("first", i, accuracy, seed)) for i in items])
    keys = [i.item_id for i in items]
    wanted = labels_wanted(
        Plan(labels_per_item=2, adaptive=True), keys, needs_more_labels(table, first)
    )
    second = {i.item_id: annotate("second", i, accuracy, seed) for i in items}
    fixed = pd.concat([first, frame([(k, "second", second[k]) for k in keys])])
    adaptive = pd.concat([first, frame([(k, "second", second[k]) for k in keys if wanted[k] == 2])])
    gold = {i.item_id: i.gold for i in items}
    out = {"seed": seed}
    results = {}
    for name, labels in (("fixed", fixed), ("adaptive", adaptive)):
        known = human_gold(labels, NO_RESOLUTIONS).known()
        results[name] = known
        out[f"{name}_labels"] = len(labels)
        out[f"{name}_gold_items"] = len(known)
        out[f"{name}_gold_accuracy"] = (
            sum(known[k] == gold[k] for k in known) / len(known) if known else None
        )
    out["saved_share"] = 1 - out["adaptive_labels"] / out["fixed_labels"]
    both = results["fixed"].keys() | results["adaptive"].keys()
    out["gold_changed"] = sum(results["fixed"].get(k) != results["adaptive"].get(k) for k in both)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--accuracy", type=float, default=0.8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        engine = get_engine(f"sqlite:///{Path(folder) / 'overlap.db'}")
        with session_scope(engine) as session:
            build_demo(session=session, actor=operator())
            run = get_run("demo-pcf", session=session)
            table = analyse_run(run, session=session).table
            items = load_items(run.dataset_id, session=session)
        engine.dispose()
    rows = [one_seed(items, table, args.accuracy, seed) for seed in range(args.seeds)]
    for row in rows:
        print(row)
    summary = {
        "simulated": True,
        "items": len(items),
        "annotator_accuracy": args.accuracy,
        "seeds": args.seeds,
        **{
            key: float(np.mean([r[key] for r in rows if r[key] is not None]))
            for key in rows[0]
            if key != "seed"
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
