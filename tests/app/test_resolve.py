"""Resolve: the reviewers' queue most doubtful first, the two contested candidates side by side
with their difference marked and the votes in words, the item's thread, and a resolution that
is revised as a new row."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from pcf.access import Actor, Role
from pcf.analysis.results import run_decisions
from pcf.store import add_adjudication, get_run, load_items, resolutions
from tests.app import difference_sides, markdown_texts, open_page, signed_in_app

ANN = Actor("ann@x.org", Role.ANNOTATOR)


@pytest.fixture
def disagreeing(db: Session) -> list[str]:
    """Ann and Bob disagree on the demo's first four items; Ann is sure and says why, and
    comments on each."""
    items = load_items(1, session=db)[:4]
    for item in items:
        db_id, ids = item.metadata["db_id"], item.candidate_ids
        add_adjudication(
            db_id,
            session=db,
            annotator=ANN.identity,
            choice=ids[0],
            confidence=0.75,
            notes="names the source",
        )
        add_adjudication(db_id, session=db, annotator="bob@x.org", choice=ids[1])
    db.commit()
    return [i.item_id for i in items]


def test_a_reviewer_reads_the_dispute_comments_resolves_and_revises(disagreeing, db: Session):
    run = get_run("demo-pcf", session=db)
    priority = {d["item_id"]: d["metrics"]["priority"] for d in run_decisions(run, session=db)}
    at = open_page(signed_in_app(db, "rita@x.org", "reviewer"), "resolve")
    assert not at.exception
    queue = at.selectbox[0].options
    assert sorted(queue) == sorted(disagreeing)
    assert [priority[key] for key in queue] == sorted(priority[key] for key in queue)[::-1]
    item = next(i for i in load_items(1, session=db) if i.item_id == queue[0])
    texts = markdown_texts(at)
    assert "`ann@x.org` · confidence 0.75 · sure · names the source" in texts
    assert "`bob@x.org` · confidence —" in texts
    assert not any(cid in text for cid in item.candidate_ids for text in at.caption.values)
    *_, difference = difference_sides(at)
    assert "<mark>" in difference or "pcf-unpaired" in difference

    at.text_area[0].input("B leaves out the year")
    next(b for b in at.button if b.label == "Add comment").click().run()
    assert not at.exception
    assert "B leaves out the year" in markdown_texts(at)

    at.radio[0].set_value(item.candidate_ids[1])
    next(t for t in at.text_input if t.label == "Reason").input("the source agrees with B")
    next(b for b in at.button if b.label == "Set gold").click().run()
    assert queue[0] not in at.selectbox[0].options
    at.toggle[0].set_value(True).run()
    assert at.selectbox[0].options == [queue[0]]
    at.radio[0].set_value(item.candidate_ids[0])
    next(b for b in at.button if b.label == "Revise gold").click().run()
    assert not at.exception
    history = next(d.value for d in at.dataframe if "resolved_by" in d.value.columns)
    assert list(history["reason"]) == ["the source agrees with B", ""]
    stored = resolutions(1, session=db)
    assert list(stored["choice"]) == [item.candidate_ids[1], item.candidate_ids[0]]
