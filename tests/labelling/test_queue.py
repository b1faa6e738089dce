"""Queues that split the work: reservations, labels wanted per item, concurrent annotators."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta

import pytest
from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Role, operator
from pcf.labelling.labels import ItemFullError, save_label
from pcf.labelling.plan import Plan, calibration_order, human_calibration_items, set_plan
from pcf.labelling.queue import (
    RESERVATION,
    assign,
    assignment_progress,
    claim_next,
    labels_wanted,
    release,
    unassign,
)
from pcf.store import (
    Dataset,
    adjudication_records,
    audit_events,
    current_labels,
    delete_member,
    get_dataset,
    import_items,
    load_items,
    utc_now,
)
from tests.factories import enrol, make_item

ALICE, BOB, CAROL = (Actor(f"{n}@example.com", Role.ANNOTATOR) for n in ("alice", "bob", "carol"))
REVIEWER = Actor("rita@example.com", Role.REVIEWER)


def dataset(session: Session, n: int) -> tuple[int, list[tuple[str, int]]]:
    enrol(session, ALICE, BOB, CAROL, REVIEWER)
    found = import_items(
        [make_item(f"q{i:02d}") for i in range(n)], session=session, name="team", fmt="jsonl"
    )
    session.commit()
    items = load_items(found.id, session=session)
    return found.id, [(i.item_id, i.metadata["db_id"]) for i in items]


def claim(session, dataset_id, order, actor, wanted, **kw):
    return claim_next(dataset_id, order, session=session, actor=actor, wanted=wanted, **kw)


def label(session, claimed, actor, wanted=None):
    return save_label(
        claimed.item_db_id, session=session, actor=actor, choice="c0", seen=None, wanted=wanted
    )


def test_people_labelling_at_once_get_different_items_until_each_has_n(session):
    dataset_id, order = dataset(session, 3)
    wanted = dict.fromkeys((k for k, _ in order), 2)
    first = claim(session, dataset_id, order, ALICE, wanted)
    again = claim(session, dataset_id, order, ALICE, wanted)
    assert first.item_key == again.item_key == "q00"  # a hold stays its holder's item
    assert claim(session, dataset_id, order, BOB, wanted).item_key == "q00"  # N=2: room for two
    assert claim(session, dataset_id, order, CAROL, wanted).item_key == "q01"
    label(session, first, ALICE, wanted=2)
    assert claim(session, dataset_id, order, ALICE, wanted).item_key == "q01"


def test_the_plans_seeded_random_calibration_share_is_served_first_in_its_random_order(session):
    dataset_id, order = dataset(session, 20)
    set_plan(dataset_id, session=session, actor=operator(), calibration_share=0.25)
    reserved = human_calibration_items(dataset_id, session=session)
    assert len(reserved) == 5
    assert reserved != {key for key, _ in order[:5]}  # a random share, not the first items
    assert human_calibration_items(dataset_id, session=session) == reserved  # the same seed
    wanted = dict.fromkeys((k for k, _ in order), 1)
    served = []
    for _ in range(5):
        claimed = claim(session, dataset_id, order, ALICE, wanted)
        label(session, claimed, ALICE)
        served.append(claimed.item_key)
    # in the share's own random order, not the queue's (most doubtful first): any part of the
    # share labelled so far is a random sample too
    assert served == calibration_order(dataset_id, session=session)
    assert served != [key for key, _ in order if key in reserved]
    session.get(Dataset, dataset_id).seed = 1
    assert human_calibration_items(dataset_id, session=session) != reserved


def test_a_lapsed_hold_returns_the_item(session):
    dataset_id, order = dataset(session, 2)
    wanted = dict.fromkeys((k for k, _ in order), 1)
    held = claim(session, dataset_id, order, ALICE, wanted)
    assert claim(session, dataset_id, order, BOB, wanted).item_key == "q01"
    later = utc_now() + RESERVATION + timedelta(seconds=1)
    assert claim(session, dataset_id, order, CAROL, wanted, now=later).item_key == held.item_key


def test_a_skipped_item_goes_back_to_the_others(session):
    dataset_id, order = dataset(session, 2)
    wanted = dict.fromkeys((k for k, _ in order), 1)
    held = claim(session, dataset_id, order, ALICE, wanted)
    release(held.item_db_id, session=session, actor=ALICE)
    assert claim(session, dataset_id, order, BOB, wanted).item_key == held.item_key
    assert claim(session, dataset_id, order, ALICE, wanted, skip={"q00"}).item_key == "q01"


def test_a_save_beyond_the_labels_wanted_is_refused_and_a_correction_is_not(session):
    dataset_id, order = dataset(session, 1)
    wanted = {"q00": 1}
    held = claim(session, dataset_id, order, ALICE, wanted)
    first = label(session, held, ALICE, wanted=1)
    with pytest.raises(ItemFullError):
        label(session, held, BOB, wanted=1)
    save_label(held.item_db_id, session=session, actor=ALICE, choice="c1", seen=first.id, wanted=1)
    assert claim(session, dataset_id, order, BOB, wanted) is None
    labels = current_labels(dataset_id, session=session)
    assert list(labels["annotator"]) == [ALICE.identity]


def test_ten_assigned_items_go_to_their_assignee_first_and_to_nobody_else_until_labelled(
    session,
):
    dataset_id, order = dataset(session, 15)
    wanted = dict.fromkeys((k for k, _ in order), 2)
    given = assign(
        dataset_id,
        order,
        session=session,
        actor=REVIEWER,
        to=ALICE.identity,
        items=[f"q{i:02d}" for i in range(14, 4, -1)],
    )
    assert given == [f"q{i:02d}" for i in range(5, 15)]  # in queue order
    assert assignment_progress(dataset_id, session=session) == {ALICE.identity: (0, 10)}
    bob_got = []
    while held := claim(session, dataset_id, order, BOB, wanted):
        bob_got.append(held.item_key)
        label(session, held, BOB, wanted=2)
    assert bob_got == [f"q{i:02d}" for i in range(5)]  # none of hers while she holds them
    alice_got = []
    for _ in range(10):
        held = claim(session, dataset_id, order, ALICE, wanted)
        alice_got.append(held.item_key)
        label(session, held, ALICE, wanted=2)
        if len(alice_got) == 3:
            assert assignment_progress(dataset_id, session=session) == {ALICE.identity: (3, 10)}
    assert alice_got == given  # hers first, though q00-q04 still want a second label
    assert claim(session, dataset_id, order, ALICE, wanted).item_key == "q00"
    assert claim(session, dataset_id, order, BOB, wanted).item_key == "q05"  # labelled: N=2
    assert assignment_progress(dataset_id, session=session) == {ALICE.identity: (10, 10)}


def test_items_of_an_assignee_who_left_go_back_to_everyone(session):
    dataset_id, order = dataset(session, 2)
    wanted = dict.fromkeys((k for k, _ in order), 1)
    assign(dataset_id, order, session=session, actor=REVIEWER, to=ALICE.identity, first=1)
    assert claim(session, dataset_id, order, BOB, wanted).item_key == "q01"
    delete_member(ALICE.identity, session=session)
    assert claim(session, dataset_id, order, CAROL, wanted).item_key == "q00"
    assert assignment_progress(dataset_id, session=session) == {}


def test_assigning_a_share_takes_free_items_and_unassigning_returns_them(session):
    dataset_id, order = dataset(session, 10)
    wanted = dict.fromkeys((k for k, _ in order), 1)
    label(session, claim(session, dataset_id, order, CAROL, wanted), CAROL, wanted=1)
    with pytest.raises(AccessDeniedError):
        assign(dataset_id, order, session=session, actor=BOB, to=BOB.identity, first=1)
    with pytest.raises(ValueError, match="no member who may label"):
        assign(dataset_id, order, session=session, actor=REVIEWER, to="nobody@example.com")
    mine = assign(dataset_id, order, session=session, actor=REVIEWER, to=ALICE.identity, share=0.3)
    assert mine == ["q01", "q02", "q03"]  # q00 is labelled
    bobs = assign(dataset_id, order, session=session, actor=REVIEWER, to=BOB.identity, first=2)
    assert bobs == ["q04", "q05"]
    assert claim(session, dataset_id, order, CAROL, wanted).item_key == "q06"
    assert unassign(dataset_id, ALICE.identity, session=session, actor=REVIEWER) == 3
    assert claim(session, dataset_id, order, BOB, wanted).item_key == "q04"  # his first
    assert claim(session, dataset_id, order, CAROL, wanted).item_key == "q06"  # her hold
    release(order[6][1], session=session, actor=CAROL)
    assert claim(session, dataset_id, order, CAROL, wanted).item_key == "q01"
    events = [e.action for e in audit_events(session=session)]
    assert events[:3] == ["assignments_removed", "items_assigned", "items_assigned"]


def test_viewers_have_no_queue(session):
    dataset_id, order = dataset(session, 1)
    with pytest.raises(AccessDeniedError):
        claim(session, dataset_id, order, Actor("v@example.com", Role.VIEWER), {"q00": 1})


def test_the_adaptive_plan_wants_n_labels_only_where_doubtful():
    plan = Plan(labels_per_item=3, adaptive=True)
    assert labels_wanted(plan, ["a", "b"], doubtful={"b"}) == {"a": 1, "b": 3}
    assert labels_wanted(Plan(labels_per_item=3), ["a", "b"], doubtful=()) == {"a": 3, "b": 3}


WORKER = (sys.executable, "-m", "tests.labelling.worker")


def test_three_annotators_at_once_give_every_item_exactly_two_labels(
    session, isolated_database, tmp_path
):
    """Three processes label 30 items with N=2 through the functions the page uses."""
    dataset(session, 30)
    env = {**os.environ, "PCF_DATABASE_URL": isolated_database}
    start = tmp_path / "start"
    annotators = ("alice@example.com", "bob@example.com", "carol@example.com")
    workers = [
        subprocess.Popen(
            [*WORKER, isolated_database, "team", who, "2", str(start), str(len(annotators))],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in annotators
    ]
    ready = [w.stdout.readline().strip() for w in workers]  # a slow start must not idle one
    start.touch()
    outputs = [w.communicate(timeout=600) for w in workers]
    assert ready == ["ready"] * 3, [err for _, err in outputs]
    assert [w.returncode for w in workers] == [0, 0, 0], [err for _, err in outputs]
    done = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    team = get_dataset("team", session=session)
    rows = current_labels(team.id, session=session)
    history = Counter(
        (a["item_id"], a["annotator"]) for a in adjudication_records(team.id, session=session)
    )
    per_item = rows.groupby("item_key")["annotator"].nunique()
    assert len(per_item) == 30
    assert set(per_item) == {2}
    assert max(history.values()) == 1  # nobody labelled an item twice
    assert sum(len(d["labelled"]) for d in done) == 60
    assert all(len(d["labelled"]) > 0 for d in done)  # the work was split
