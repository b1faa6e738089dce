"""Pages read results stored per revision, and never show stale ones: a call that fails, a
failed call asked again, a corrected label, and the page shows the new figures at once."""

from __future__ import annotations

from sqlmodel import Session, col, select
from streamlit.testing.v1 import AppTest

from pcf.analysis.results import analyse_run, flag_counts
from pcf.analysis.weight_playground import pack_run, preset_records
from pcf.store import (
    Call,
    RunResult,
    add_adjudication,
    get_run,
    item_db_ids,
    load_items,
    replace_calls,
)
from tests.app import open_page

FAILED = {"ok": False, "error": "no_json", "judgment": None}


def shown_run(at: AppTest) -> str:
    return at.selectbox(key="run").value


def flags_shown(at: AppTest) -> dict[str, int]:
    frame = next(d.value for d in at.dataframe if "meaning" in d.value.columns)
    return dict(zip(frame["flag"], frame["items"], strict=True))


def fail_first_item(db: Session, name: str) -> dict[int, dict]:
    """Store every call of the run's first item as failed; returns its answers, to give back."""
    run = get_run(name, session=db)
    first = db.exec(select(Call.item_id).where(Call.run_id == run.id)).first()
    calls = db.exec(select(Call).where(Call.run_id == run.id, Call.item_id == first)).all()
    answers = {c.id: {"ok": c.ok, "error": c.error, "judgment": c.judgment} for c in calls}
    replace_calls(dict.fromkeys(answers, FAILED), session=db)
    db.commit()
    return answers


def expected_flags(db: Session, name: str) -> dict[str, int]:
    table = analyse_run(get_run(name, session=db), session=db).table
    counts = flag_counts(table)
    return dict(zip(counts["flag"], counts["items"], strict=True))


def test_overview_shows_a_failed_call_and_its_retry_at_once(app: AppTest, db: Session):
    at = open_page(app, "overview")
    name = shown_run(at)
    before = flags_shown(at)
    stored = db.exec(select(RunResult.name).where(col(RunResult.run_id).is_not(None))).all()
    assert {"analysis", "overview"} <= set(stored)

    answers = fail_first_item(db, name)
    at = open_page(at, "overview")
    failed = flags_shown(at)
    assert failed == expected_flags(db, name)
    assert failed["incomplete"] == before["incomplete"] + 1

    replace_calls(answers, session=db)  # the failed calls asked again, answered as before
    db.commit()
    at = open_page(at, "overview")
    assert flags_shown(at) == before


def test_overview_shows_a_corrected_label_at_once(app: AppTest, db: Session):
    items = load_items(1, session=db)[:4]
    ids = item_db_ids(1, session=db)
    for item in items:
        add_adjudication(ids[item.item_id], session=db, annotator="ann", choice=item.gold)
    db.commit()
    at = open_page(app, "overview")
    assert any(m.value.startswith("**Against human labels** (4 items)") for m in at.markdown)
    direct = [m.value for m in at.metric if m.label == "Direct accuracy"]

    wrong = next(c for c in items[0].candidate_ids if c != items[0].gold)
    # a correction: the first item's label is now wrong
    add_adjudication(ids[items[0].item_id], session=db, annotator="ann", choice=wrong)
    db.commit()
    at = open_page(at, "overview")
    corrected = [m.value for m in at.metric if m.label == "Direct accuracy"]
    assert corrected[0] == direct[0]  # against gold: unchanged
    assert corrected[1] != direct[1]  # against human labels: the correction counts


def weight_rows(at: AppTest, name: str) -> list[float]:
    frame = next(d.value for d in at.dataframe if f"{name} accuracy %" in d.value.columns)
    return list(frame[f"{name} accuracy %"])


def test_weights_shows_a_failed_call_at_once(app: AppTest, db: Session):
    at = open_page(app, "weights")
    name = "demo-pcf"
    before = weight_rows(at, name)
    fail_first_item(db, name)
    at = open_page(at, "weights")
    expected = preset_records(pack_run(get_run(name, session=db), session=db))
    assert weight_rows(at, name) == list(expected["accuracy %"])
    assert weight_rows(at, name) != before
