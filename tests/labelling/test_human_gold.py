"""Human gold: resolutions first, then the plan's rule (unanimous, majority, Dawid-Skene)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pcf.access import AccessDeniedError, Actor, Role
from pcf.labelling.adjudications import display_order
from pcf.labelling.human_gold import dataset_gold, disagreements, human_gold, rule_gold
from pcf.labelling.plan import set_plan
from pcf.labelling.resolutions import resolve
from pcf.labelling.team_figures import annotator_checks
from pcf.store import add_adjudication, get_dataset, load_items
from tests.factories import enrol, make_item

RITA = Actor("rita@example.com", Role.REVIEWER)
ADAM = Actor("adam@example.com", Role.ADMIN)


def labels(*rows: tuple[str, str, str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_key", "annotator", "choice"])


def resolved(*rows: tuple[str, str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["item_key", "choice"])


CURRENT = labels(
    ("i1", "ann", "a"),
    ("i1", "bob", "a"),
    ("i1", "cat", "b"),
    ("i2", "ann", "a"),
    ("i2", "bob", "b"),
    ("i3", "ann", "none_correct"),
    ("i3", "bob", "cannot_tell"),
    ("i4", "ann", "b"),
    ("i4", "bob", "none_correct"),
    ("i4", "cat", "none_correct"),
    ("i5", "ann", "c"),
    ("i5", "bob", "cannot_tell"),
)


@pytest.mark.parametrize(
    ("votes", "unanimous", "majority"),
    [
        (["a", "a"], "a", "a"),
        (["a", "a", "b"], None, "a"),
        (["a", "b"], None, None),
        (["none_correct", "none_correct"], None, None),
        (["b", "none_correct", "none_correct"], None, "b"),
        ([], None, None),
    ],
)
def test_the_rules_on_votes(votes, unanimous, majority):
    assert rule_gold(votes, "unanimous") == unanimous
    assert rule_gold(votes, "majority") == majority


def test_a_resolution_outranks_the_labels_and_the_newest_one_counts():
    gold = human_gold(CURRENT, resolved(("i2", "b"), ("i1", "c"), ("i2", "a")), rule="majority")
    assert gold.gold == {"i1": "c", "i2": "a", "i3": None, "i4": "b", "i5": "c"}
    assert gold.source == {
        "i1": "resolution",
        "i2": "resolution",
        "i3": None,
        "i4": "majority",
        "i5": "majority",
    }
    assert gold.source_counts() == {"resolution": 2, "majority": 2}
    unanimous = human_gold(CURRENT, resolved(), rule="unanimous")
    assert unanimous.known() == {"i5": "c"}  # cannot tell is no label


def test_disagreements_are_the_unresolved_items_whose_labels_differ():
    assert disagreements(CURRENT, resolved()) == ["i1", "i2", "i4"]
    assert disagreements(CURRENT, resolved(("i2", "a"))) == ["i1", "i4"]


def test_dawid_skene_trusts_the_annotator_who_agrees_with_the_others():
    """Ann and Bob agree on ten items; Cat disagrees with them on every one. On an eleventh item
    only Ann and Cat voted, and disagree: the model takes Ann's."""
    rows = []
    for i in range(10):
        agreed, other = ("c0", "c1") if i % 2 else ("c1", "c0")
        rows += [(f"q{i}", "ann", agreed), (f"q{i}", "bob", agreed), (f"q{i}", "cat", other)]
    rows += [("q10", "ann", "c1"), ("q10", "cat", "c0")]
    items = {f"q{i}": make_item(f"q{i}", n=2) for i in range(11)}
    gold = human_gold(labels(*rows), resolved(), rule="dawid_skene", items=items)
    assert gold.gold["q10"] == "c1"
    assert gold.skills["ann"] > 0.9
    assert gold.skills["cat"] < 0.1
    assert gold.source["q10"] == "dawid_skene"


def simulated_team(habit: str, seed: int = 0, n: int = 150, k: int = 4):
    """Two annotators right 70% of the time (else another candidate at random) and one who
    always answers the first candidate, as listed or as shown to them; and the true answers."""
    rng = np.random.default_rng(seed)
    items = {f"q{i}": make_item(f"q{i}", n=k) for i in range(n)}
    rows, truth = [], {}
    for key, item in items.items():
        ids = item.candidate_ids
        truth[key] = right = ids[rng.integers(k)]
        for person in ("good1", "good2"):
            wrong = rng.choice([c for c in ids if c != right])
            rows.append((key, person, right if rng.random() < 0.7 else wrong))
        first = ids[0] if habit == "listed" else display_order(item, "first")[0]
        rows.append((key, "first", first))
    return labels(*rows), items, truth


@pytest.mark.parametrize("habit", ["listed", "shown"])
def test_dawid_skene_is_not_fooled_by_an_annotator_who_always_answers_first(habit):
    """One-coin Dawid-Skene took the always-first-listed annotator for the expert: 32 of 150
    right where majority has 84 (of the 112 it decides); the spammer-aware model has 103
    (listed first) and 105 (shown first). The always-first annotator is flagged."""
    current, items, truth = simulated_team(habit)
    model = human_gold(current, resolved(), rule="dawid_skene", items=items)
    majority = human_gold(current, resolved(), rule="majority")
    right = {
        name: sum(gold.gold.get(key) == answer for key, answer in truth.items())
        for name, gold in (("dawid_skene", model), ("majority", majority))
    }
    assert right["dawid_skene"] >= right["majority"]
    assert model.skills["first"] < min(model.skills["good1"], model.skills["good2"])
    checks = annotator_checks(current, items).set_index("annotator")
    assert checks.loc["first", "flag"] == "answers one position"
    assert list(checks.loc[["good1", "good2"], "flag"]) == ["", ""]
    assert checks.loc["first", "favourite_position_share"] == 1.0


def test_an_always_first_annotator_is_never_trusted_over_one_good_one():
    """One good annotator (right 70%), one who always answers the first listed candidate and a
    spammer, 150 items of 3 candidates: fitted with everyone, the constant answer looked like the
    expert (skill 1.00, gold "always the first": 50 right, majority 65); fitted without the
    flagged habit, 101."""
    rng = np.random.default_rng(0)
    items = {f"q{i}": make_item(f"q{i}", n=3) for i in range(150)}
    rows, truth = [], {}
    for key, item in items.items():
        ids = item.candidate_ids
        truth[key] = right = ids[rng.integers(3)]
        wrong = rng.choice([c for c in ids if c != right])
        rows += [
            (key, "good", right if rng.random() < 0.7 else wrong),
            (key, "first", ids[0]),
            (key, "spammer", ids[rng.integers(3)]),
        ]
    current = labels(*rows)
    model = human_gold(current, resolved(), rule="dawid_skene", items=items)
    majority = human_gold(current, resolved(), rule="majority")
    right = {
        name: sum(gold.gold.get(key) == answer for key, answer in truth.items())
        for name, gold in (("dawid_skene", model), ("majority", majority))
    }
    assert right == {"dawid_skene": 101, "majority": 65}
    assert model.skills["first"] < model.skills["good"]
    assert sum(g == items[k].candidate_ids[0] for k, g in model.gold.items()) < 0.5 * 150
    checks = annotator_checks(current, items).set_index("annotator")
    assert checks.loc["first", "flag"] == "answers one position"


def test_a_reviewer_resolves_and_the_dataset_gold_follows(db):
    demo = get_dataset("demo", session=db)
    item = load_items(demo.id, session=db)[0]
    db_id, (first, second, *_) = item.metadata["db_id"], item.candidate_ids
    add_adjudication(db_id, session=db, annotator="ann", choice=first)
    add_adjudication(db_id, session=db, annotator="bob", choice=second)
    assert dataset_gold(demo.id, session=db).gold[item.item_id] is None
    annotator = Actor("a@example.com", Role.ANNOTATOR)
    enrol(db, RITA, ADAM, annotator)
    with pytest.raises(AccessDeniedError, match="is annotator"):
        resolve(db_id, session=db, actor=annotator, choice=first)
    with pytest.raises(ValueError, match="is not one of"):
        resolve(db_id, session=db, actor=RITA, choice="cannot_tell")
    resolve(db_id, session=db, actor=RITA, choice=second, reason="the source says so")
    gold = dataset_gold(demo.id, session=db)
    assert (gold.gold[item.item_id], gold.source[item.item_id]) == (second, "resolution")
    set_plan(demo.id, session=db, actor=ADAM, gold_rule="majority")
    assert dataset_gold(demo.id, session=db).rule == "majority"
