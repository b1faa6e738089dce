"""Resolutions are new rows, a revision included; an item's thread opens to an annotator only
once their own label of it is saved; the contested candidates are the two most voted."""

from __future__ import annotations

import pytest

from pcf.access import AccessDeniedError, Actor, Role
from pcf.items import CANNOT_TELL, NONE_CORRECT
from pcf.labelling.labels import save_label
from pcf.labelling.resolutions import comment, contested, resolve, thread
from pcf.store import get_dataset, resolutions
from tests.labelling.test_labels import ALICE, BOB, RITA, demo_item


def test_an_annotator_sees_and_joins_the_thread_only_after_saving_their_own_label(db):
    db_id, candidates = demo_item(db)
    save_label(db_id, session=db, actor=ALICE, choice=candidates[0], seen=None)
    comment(db_id, session=db, actor=ALICE, text="  A names the source  ")
    assert thread(db_id, session=db, actor=BOB) is None
    with pytest.raises(AccessDeniedError, match="only after saving their own label"):
        comment(db_id, session=db, actor=BOB, text="sway")
    save_label(db_id, session=db, actor=BOB, choice=candidates[1], seen=None)
    comment(db_id, session=db, actor=BOB, text="B is dated")
    comment(db_id, session=db, actor=RITA, text="checking")  # a reviewer needs no label
    said = [(c.author, c.text) for c in thread(db_id, session=db, actor=BOB)]
    assert said == [
        (ALICE.identity, "A names the source"),
        (BOB.identity, "B is dated"),
        (RITA.identity, "checking"),
    ]
    with pytest.raises(ValueError, match="empty"):
        comment(db_id, session=db, actor=RITA, text=" \n")
    viewer = Actor("vera@example.com", Role.VIEWER)
    with pytest.raises(AccessDeniedError):
        comment(db_id, session=db, actor=viewer, text="hi")


def test_a_revised_resolution_is_a_new_row_and_the_newest_counts(db):
    db_id, candidates = demo_item(db)
    resolve(db_id, session=db, actor=RITA, choice=candidates[0], reason="first look")
    resolve(db_id, session=db, actor=RITA, choice=candidates[1], reason="on second thought")
    rows = resolutions(get_dataset("demo", session=db).id, session=db)
    assert list(zip(rows["choice"], rows["reason"], strict=True)) == [
        (candidates[0], "first look"),
        (candidates[1], "on second thought"),
    ]


def test_the_contested_candidates_are_the_two_most_voted_candidates():
    votes = ["b", NONE_CORRECT, "a", "c", "a", CANNOT_TELL, NONE_CORRECT, NONE_CORRECT]
    assert contested(votes) == ["a", "b"]
    assert contested([NONE_CORRECT, "a"]) == ["a"]
