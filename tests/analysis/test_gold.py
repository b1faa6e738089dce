"""Human gold: resolutions first, then the plan's rule (unanimous, majority, Dawid-Skene)."""

from __future__ import annotations

import pandas as pd
import pytest

from pcf.access import AccessDeniedError, Actor, Role
from pcf.analysis.gold import dataset_gold, disagreements, human_gold, rule_gold
from pcf.labelling.gold import resolve
from pcf.labelling.plan import set_plan
from pcf.store import add_adjudication, get_dataset, load_items
from tests.factories import enrol

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
        rows += [(f"q{i}", "ann", "a"), (f"q{i}", "bob", "a"), (f"q{i}", "cat", "b")]
    rows += [("q10", "ann", "b"), ("q10", "cat", "a")]
    positions = {f"q{i}": {"a": "A", "b": "B"} for i in range(11)}
    gold = human_gold(labels(*rows), resolved(), rule="dawid_skene", positions=positions)
    assert gold.gold["q10"] == "b"
    assert gold.skills["ann"] > 0.9
    assert gold.skills["cat"] < 0.1
    assert gold.source["q10"] == "dawid_skene"


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
