"""Labels are saved as the actor, by the roles that label, and a stale page never overwrites."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Role
from pcf.labelling.labels import LabelChangedError, save_label, visible_history
from pcf.store import (
    adjudication_history,
    delete_member,
    get_dataset,
    item_db_ids,
    load_item,
    save_member,
)
from tests.factories import enrol

ALICE = Actor("alice@example.com", Role.ANNOTATOR)
BOB = Actor("bob@example.com", Role.ANNOTATOR)
RITA = Actor("rita@example.com", Role.REVIEWER)


def demo_item(db: Session) -> tuple[int, list[str]]:
    enrol(db, ALICE, BOB, RITA)
    db_id = item_db_ids(get_dataset("demo", session=db).id, session=db)["demo-001"]
    return db_id, load_item(db_id, session=db).candidate_ids


def test_a_label_carries_the_actors_identity(db):
    db_id, candidates = demo_item(db)
    label = save_label(db_id, session=db, actor=ALICE, choice=candidates[0], seen=None)
    assert label.annotator == ALICE.identity


def test_a_viewer_may_not_label(db):
    db_id, candidates = demo_item(db)
    viewer = Actor("vera@example.com", Role.VIEWER)
    enrol(db, viewer)
    with pytest.raises(AccessDeniedError):
        save_label(db_id, session=db, actor=viewer, choice=candidates[0], seen=None)


def test_a_member_removed_or_demoted_since_their_page_was_drawn_saves_nothing(db):
    db_id, candidates = demo_item(db)
    first = save_label(db_id, session=db, actor=ALICE, choice=candidates[0], seen=None)
    save_member(ALICE.identity, "viewer", session=db, added_by="adam")
    with pytest.raises(AccessDeniedError, match="is viewer and may not save labels"):
        save_label(db_id, session=db, actor=ALICE, choice=candidates[1], seen=first.id)
    delete_member(ALICE.identity, session=db)
    with pytest.raises(AccessDeniedError, match="no longer a member; nothing was saved"):
        save_label(db_id, session=db, actor=ALICE, choice=candidates[1], seen=first.id)
    assert [a.id for a in adjudication_history(db_id, session=db)] == [first.id]


def test_a_save_from_a_stale_page_is_refused_with_the_stored_label(db):
    db_id, candidates = demo_item(db)
    first = save_label(db_id, session=db, actor=ALICE, choice=candidates[0], seen=None)
    with pytest.raises(LabelChangedError) as refused:
        save_label(db_id, session=db, actor=ALICE, choice=candidates[1], seen=None)
    assert (refused.value.label_id, refused.value.choice) == (first.id, candidates[0])
    fixed = save_label(db_id, session=db, actor=ALICE, choice=candidates[1], seen=first.id)
    assert fixed.supersedes == first.id


def test_annotators_see_only_their_own_labels(db):
    db_id, candidates = demo_item(db)
    save_label(db_id, session=db, actor=ALICE, choice=candidates[0], seen=None)
    save_label(db_id, session=db, actor=BOB, choice=candidates[1], seen=None)
    assert [a.annotator for a in visible_history(db_id, session=db, actor=ALICE)] == [
        ALICE.identity
    ]
    assert {a.annotator for a in visible_history(db_id, session=db, actor=RITA)} == {
        ALICE.identity,
        BOB.identity,
    }
