"""The Adjudicate page on the demo database: labels saved as the person signed in, blind for
annotators, a second tab's save never lost silently."""

from __future__ import annotations

import pytest
from sqlmodel import Session, col, select

from pcf.access import Actor, Role
from pcf.analysis.markdown import escape_markdown, inert_markdown
from pcf.analysis.results import analyse_run, run_decisions
from pcf.analysis.triage import calibrated_priority, known_answers, likely_errors_caught
from pcf.labelling.adjudications import adjudication_queue, display_order, item_index, with_priority
from pcf.labelling.human_gold import dataset_gold
from pcf.labelling.plan import set_plan
from pcf.labelling.queue import assign
from pcf.store import Adjudication, ItemRow, get_run, item_db_ids, load_items, save_member
from tests.app import LOCAL_NAME, markdown_texts, open_page, signed_in_app

ANNOTATOR = LOCAL_NAME
ADMIN = Actor(LOCAL_NAME, Role.ADMIN)
GRACE = "grace@example.com"


def labelling(app, **query_params: str):
    """The Adjudicate page for the local person (an admin)."""
    return open_page(app, "adjudicate", **query_params)


def grace(db: Session, role: str = "annotator", email: str = GRACE):
    """The Adjudicate page for Grace (or ``email``), signed in as an annotator."""
    return open_page(signed_in_app(db, email, role), "adjudicate")


def expected_queue(db: Session) -> list[str]:
    run = get_run("demo-pcf", session=db)
    items = with_priority(
        item_index(run.dataset_id, session=db), analyse_run(run, session=db).table
    )
    return adjudication_queue(items, done=set())


def item_on_screen(at) -> str:
    return (
        next(h.value for h in at.subheader if h.value.startswith("Item "))
        .removeprefix("Item ")
        .replace("\\", "")
    )


def visible_text(at) -> str:
    parts = [
        *markdown_texts(at),
        *(t.value for t in at.text),
        *(f"{m.label} {m.value}" for m in at.metric),
        *(s.value for s in at.success),
        *(b.label for b in at.button),
    ]
    parts += [str(d.value.to_dict()) for d in at.dataframe]
    return "\n".join(parts)


def choose(at, choice: str):
    """Press the button of ``choice`` (a position or ``none_correct``/``cannot_tell``) drawn for
    the item on screen, as its key would."""
    at.button(key=f"adjudicate_choose_{choice}_{item_on_screen(at)}").click()
    return at.run()


def open_saved_details(at):
    """Open the popover of the label just saved, as a click on it would (it reruns the page)."""
    at.session_state[f"adjudicate_details_{at.session_state['adjudicate_saved'].id}"] = True
    return at.run()


def labels_in_db(db: Session, item_key: str) -> list[Adjudication]:
    db.expire_all()
    return list(
        db.exec(
            select(Adjudication)
            .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
            .where(ItemRow.item_key == item_key)
            .order_by(col(Adjudication.id))
        ).all()
    )


def test_no_name_is_typed_and_the_address_names_nobody(app, db: Session):
    at = labelling(app, annotator="bob", label="demo-040")
    assert not at.exception
    assert not [t for t in at.text_input if t.key == "annotator"]
    choose(at, "1")
    assert [a.annotator for a in labels_in_db(db, "demo-040")] == [ANNOTATOR]


def test_a_viewer_has_no_adjudicate_page(db):
    at = signed_in_app(db, "vera@example.com", "viewer")
    assert not at.exception
    with pytest.raises(ValueError, match="navigation page"):
        open_page(at, "adjudicate")


def test_the_queue_starts_with_the_most_doubtful_item_in_a_seeded_order(app, db: Session):
    at = labelling(app)
    assert not at.exception
    first = expected_queue(db)[0]
    assert item_on_screen(at) == first
    item = next(i for i in load_items(1, session=db) if i.item_id == first)
    order = display_order(item, ANNOTATOR)
    texts = markdown_texts(at)
    shown = texts[texts.index(inert_markdown(item.prompt)) + 1 :]
    assert [t for t in shown if t in {inert_markdown(c.text) for c in item.candidates}] == [
        inert_markdown(item.text_of(cid)) for cid in order
    ]
    at.toggle(key="plain").set_value(True).run()
    assert [t.value for t in at.text] == [item.prompt, *(item.text_of(cid) for cid in order)]
    assert at.progress[0].proto.text == "0 of 52 items labelled by Ada"


def test_blind_mode_hides_decisions_until_the_label_is_saved(app, db: Session):
    at = labelling(app)
    current = item_on_screen(at)
    item = next(i for i in load_items(1, session=db) if i.item_id == current)
    decision = next(
        d
        for d in run_decisions(get_run("demo-pcf", session=db), session=db)
        if d["item_id"] == current
    )
    revealing = ("PCF winner", "Direct winner", "Gold", f"({item.gold})")
    assert decision["winner"] in item.candidate_ids
    before = visible_text(at)
    assert not [word for word in revealing if word in before]

    shown = display_order(item, ANNOTATOR)
    choose(at, f"{shown.index(item.gold) + 1}")
    assert not at.exception
    assert not [word for word in revealing if word in visible_text(at)]  # until it is opened
    open_saved_details(at)
    after = visible_text(at)
    assert all(word in after for word in revealing)
    assert {m.label: m.value for m in at.metric}[
        "Gold"
    ] == f"Candidate {shown.index(item.gold) + 1}"
    assert item_on_screen(at) != current


def test_the_unblind_toggle_shows_the_decisions(app):
    at = labelling(app)
    at.toggle(key="adjudicate_unblind").set_value(True).run()
    assert {"PCF winner", "Direct winner", "Gold"} <= {m.label for m in at.metric}


def test_a_saved_label_is_a_row_and_the_queue_moves_on(app, db: Session):
    queue = expected_queue(db)
    at = labelling(app)
    item = next(i for i in load_items(1, session=db) if i.item_id == queue[0])
    shown = display_order(item, ANNOTATOR)
    at.radio(key=f"adjudicate_confidence_{queue[0]}").set_value(1.0).run()
    at.multiselect(key=f"adjudicate_tags_{queue[0]}").set_value(["near-tie", "my own tag"]).run()
    at.text_area(key=f"adjudicate_notes_{queue[0]}").input("  close call  ").run()
    assert labels_in_db(db, queue[0]) == []  # details alone save nothing
    choose(at, "3")

    (label,) = labels_in_db(db, queue[0])
    assert (label.annotator, label.choice, label.confidence) == (ANNOTATOR, shown[2], 1.0)
    assert (label.tags, label.notes, label.supersedes) == (
        ["near-tie", "my own tag"],
        "close call",
        None,
    )
    assert item_on_screen(at) == queue[1]
    assert at.progress[0].proto.text == "1 of 52 items labelled by Ada"

    choose(at, "none_correct")  # no confidence chosen: none saved, not an invented 0.5
    assert [(a.choice, a.confidence) for a in labels_in_db(db, queue[1])] == [
        ("none_correct", None)
    ]
    assert item_on_screen(at) == queue[2]


def test_the_item_read_ahead_is_shown_only_if_the_queue_holds_it_for_me(app, db: Session):
    queue = expected_queue(db)
    at = labelling(app)
    assert at.session_state["adjudicate_ahead"][0] == queue[1]  # read while queue[0] is shown
    assert item_on_screen(grace(db)) == queue[1]  # then Grace takes it
    choose(at, "1")
    assert item_on_screen(at) == queue[2]
    item = next(i for i in load_items(1, session=db) if i.item_id == queue[2])
    texts = markdown_texts(at)
    assert inert_markdown(item.prompt) in texts
    assert {inert_markdown(c.text) for c in item.candidates} <= set(texts)
    assert at.session_state["adjudicate_ahead"][0] == queue[3]


def two_labels_per_item(db: Session) -> None:
    set_plan(1, session=db, actor=ADMIN, labels_per_item=2)
    db.commit()


def test_an_item_stays_in_the_others_queues_until_it_has_its_labels(app, db):
    queue = expected_queue(db)
    at = labelling(app)
    choose(at, "cannot_tell")
    assert item_on_screen(at) == queue[1]
    assert item_on_screen(grace(db)) == queue[2]  # one label per item by default
    two_labels_per_item(db)
    assert item_on_screen(grace(db, email="gus@example.com")) == queue[0]


def test_an_annotator_stays_blind_after_saving(db: Session):
    at = grace(db)
    revealing = ("PCF winner", "Direct winner", "Gold")
    assert not [t for t in at.toggle if t.key == "adjudicate_unblind"]
    choose(at, "1")
    open_saved_details(at)
    assert not at.exception
    assert not [word for word in revealing if word in visible_text(at)]
    assert not [t for t in at.toggle if t.key == "adjudicate_unblind"]


def test_a_correction_is_a_new_row_and_the_history_stays_visible(app, db: Session):
    queue = expected_queue(db)
    at = labelling(app)
    choose(at, "1")
    at.button(key="adjudicate_correct").click().run()
    assert item_on_screen(at) == queue[0]
    assert any("labelled this item before" in i.value for i in at.info)
    choose(at, "2")

    first, second = labels_in_db(db, queue[0])
    assert second.supersedes == first.id
    open_saved_details(at)
    history = next(d.value for d in at.dataframe if "corrects label" in d.value.columns)
    assert list(history["label"]) == [first.id, second.id]
    assert list(history["corrects label"].fillna(0)) == [0, first.id]


def test_others_labels_show_to_admins_and_never_to_annotators(app, db: Session):
    queue = expected_queue(db)
    two_labels_per_item(db)
    at = labelling(app)
    choose(at, "1")
    at = grace(db)
    assert item_on_screen(at) == queue[0]
    assert not [d for d in at.dataframe if "annotator" in d.value.columns]
    choose(at, "1")
    open_saved_details(at)
    (history,) = [d.value for d in at.dataframe if "annotator" in d.value.columns]
    assert list(history["annotator"]) == [GRACE]

    at = labelling(app, label=queue[0])
    history = next(d.value for d in at.dataframe if "corrects label" in d.value.columns)
    assert list(history["annotator"]) == [ANNOTATOR, GRACE]


def test_a_second_tab_saving_the_same_item_is_told_and_loses_nothing(db):
    first, second = (
        open_page(signed_in_app(db, GRACE, role), "adjudicate", label="demo-040")
        for role in ("annotator", None)
    )
    item = next(i for i in load_items(1, session=db) if i.item_id == "demo-040")
    shown = display_order(item, GRACE)
    choose(first, "1")
    choose(second, "2")
    assert not second.exception
    (warning,) = [w.value for w in second.warning if "another tab" in w.value]
    assert "Candidate 1" in warning
    assert item_on_screen(second) == "demo-040"
    assert [a.choice for a in labels_in_db(db, "demo-040")] == [shown[0]]

    choose(second, "2")
    earlier, correction = labels_in_db(db, "demo-040")
    assert (correction.choice, correction.supersedes) == (shown[1], earlier.id)


def test_a_label_link_opens_that_item_and_keys_choose_candidates(app):
    at = labelling(app, label="demo-040")
    assert not at.exception
    assert item_on_screen(at) == "demo-040"
    shortcuts = {b.key: (b.label, b.proto.shortcut) for b in at.button if b.proto.shortcut}
    assert shortcuts == {
        "adjudicate_choose_1_demo-040": ("Candidate 1", "1"),
        "adjudicate_choose_2_demo-040": ("Candidate 2", "2"),
        "adjudicate_choose_3_demo-040": ("Candidate 3", "3"),
        "adjudicate_choose_4_demo-040": ("Candidate 4", "4"),
        "adjudicate_choose_none_correct_demo-040": ("None is correct", "0"),
        "adjudicate_choose_cannot_tell_demo-040": ("Cannot tell", "x"),
    }


def test_the_calibrated_order_puts_the_likeliest_judge_error_first(app, db: Session):
    at = labelling(app)
    at.radio(key="adjudicate_order").set_value("calibrated").run()
    assert not at.exception
    run = get_run("demo-pcf", session=db)
    table = analyse_run(run, session=db).table
    p_wrong = calibrated_priority(table, known_answers(table, dataset_gold(1, session=db).gold))
    assert item_on_screen(at) == p_wrong.idxmax()
    caught, expected = likely_errors_caught(p_wrong, set())
    assert any(
        f"likely cover {caught:.1f} of the judge's ~{expected:.1f} errors" in c.value
        for c in at.caption
    )


def test_an_annotator_with_ten_assigned_items_gets_them_first_and_reads_x_of_10(app, db):
    queue = expected_queue(db)
    save_member(GRACE, "annotator", session=db, added_by="test")
    order = list(item_db_ids(1, session=db).items())
    given = assign(1, order, session=db, actor=ADMIN, to=GRACE, items=queue[-10:])
    db.commit()
    at = grace(db, role=None)
    assert (
        at.progress[0].proto.text == f"0 of 10 assigned items labelled by {escape_markdown(GRACE)}"
    )
    assert item_on_screen(at) == queue[-10]  # hers first, most doubtful of them first
    choose(at, "1")
    assert (
        at.progress[0].proto.text == f"1 of 10 assigned items labelled by {escape_markdown(GRACE)}"
    )
    assert item_on_screen(at) in given
    mine = labelling(app)
    mine.text_input(key="adjudicate_find").input(queue[-1]).run()  # Grace's: not in my queue
    assert item_on_screen(mine) == queue[0]
    mine.text_input(key="adjudicate_find").input(queue[5].upper()).run()
    assert item_on_screen(mine) == queue[5]
