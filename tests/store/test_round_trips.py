"""What the store keeps comes back as it was written (datasets, calls, runs, labels), and what
it refuses leaves nothing, on real SQLite files in tmp_path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, text
from sqlalchemy.exc import IntegrityError, StatementError
from sqlmodel import Session, col, select

from pcf.items import Candidate, Item
from pcf.judges.base import MAX_CALL_TOKENS
from pcf.judgments import Judgment
from pcf.run_settings import parse_run_settings
from pcf.store import (
    LABEL_COLUMNS,
    Adjudication,
    Call,
    CandidateRow,
    Dataset,
    ItemRow,
    ReplacedCall,
    RequestTemplate,
    Run,
    add_adjudication,
    adjudicated_item_keys,
    adjudication_history,
    cached_calls,
    call_request,
    create_run,
    current_labels,
    get_dataset,
    get_run,
    import_items,
    insert_calls,
    item_db_ids,
    keep_duplicate_answers,
    list_datasets,
    list_runs,
    load_items,
    replace_calls,
    request_digest,
    run_calls_by_slot,
    run_judgments,
    session_scope,
    update_run_totals,
)
from tests.demo_database import on_postgres
from tests.factories import REQUEST, call_row, stored_run

MISSING_ITEM_ID = 12345


def make_items(count: int, candidates: int = 4) -> list[Item]:
    return [
        Item(
            f"item-{i}",
            f"Question {i}?",
            tuple(Candidate(f"c{j}", f"Answer {j} to question {i}.") for j in range(candidates)),
            gold="c0",
            bucket="demo",
        )
        for i in range(count)
    ]


def import_demo(session: Session, items: list[Item]) -> Dataset:
    dataset = import_items(items, session=session, name="demo", fmt="jsonl")
    session.commit()
    return dataset


def row_counts(session: Session) -> dict[str, int]:
    return {
        model.__name__: session.exec(select(func.count()).select_from(model)).one()
        for model in (Dataset, ItemRow, CandidateRow)
    }


# ---------------------------------------------------------------- datasets and items


def test_items_round_trip_in_file_and_listing_order(
    session: Session, new_session: Callable[[], Session]
) -> None:
    items = [
        Item(
            "z-last-alphabetically",
            "Où est la tour Eiffel ?\nRéponds en une ligne. 東京? 🚀",
            (Candidate("b", "Paris.\n\nSource: « none »"), Candidate("a", "Lyon — ```x```")),
            gold="b",
            bucket="geo",
            metadata={"source": "handmade", "tags": ["ü"]},
        ),
        Item("a-first", "Plain", (Candidate("x", "one"), Candidate("y", "two"))),
    ]
    dataset = import_demo(session, items)
    with new_session() as fresh:
        loaded = load_items(dataset.id, session=fresh)
        ids = item_db_ids(dataset.id, session=fresh)
        assert get_dataset("demo", session=fresh).n_items == 2
        assert [d.name for d in list_datasets(session=fresh)] == ["demo"]
    assert loaded == items
    assert [item.candidate_ids for item in loaded] == [("b", "a"), ("x", "y")]
    assert loaded[0].metadata == {
        "source": "handmade",
        "tags": ["ü"],
        "db_id": ids[items[0].item_id],
    }
    assert loaded[1].metadata == {"db_id": ids["a-first"]}


def import_in_scope(engine: Engine, items: list[Item], name: str = "demo") -> None:
    """An import in its own transaction, as the commands and the app make one."""
    with session_scope(engine) as scope:
        import_items(items, session=scope, name=name, fmt="jsonl")


def test_duplicate_dataset_name_raises_and_changes_nothing(
    engine: Engine, session: Session
) -> None:
    import_demo(session, make_items(3))
    before = row_counts(session)
    with pytest.raises(ValueError, match="choose another name"):
        import_in_scope(engine, make_items(5))
    assert row_counts(session) == before


def test_import_failing_midway_leaves_nothing(engine: Engine, session: Session) -> None:
    twice = Candidate("c0", "same id twice")
    items = [*make_items(50), Item("bad", "p", (twice, twice))]
    with pytest.raises(ValueError, match="candidate ids unique"):
        import_in_scope(engine, items)
    assert row_counts(session) == {"Dataset": 0, "ItemRow": 0, "CandidateRow": 0}


def test_an_import_in_chunks_stores_every_item_in_order_and_fails_whole(
    engine: Engine, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 3 items: 10 items come back as they went; an id seen in an earlier chunk
    fails the import with nothing stored."""
    monkeypatch.setattr("pcf.store.datasets.ITEM_CHUNK", 3)
    items = make_items(10)
    dataset = import_demo(session, items)
    assert load_items(dataset.id, session=session) == items
    positions = session.exec(select(ItemRow.position).order_by(col(ItemRow.id))).all()
    assert positions == list(range(10))
    again = [*make_items(4), Item("item-1", "p", (Candidate("a", "x"), Candidate("b", "y")))]
    with pytest.raises(ValueError, match="item ids must be unique"):
        import_in_scope(engine, again, name="other")
    assert row_counts(session)["ItemRow"] == 10


def import_then_fail(engine: Engine) -> None:
    with session_scope(engine) as scope:
        import_items(make_items(10), session=scope, name="demo", fmt="jsonl")
        raise RuntimeError("disk full")


def test_error_after_import_inside_the_scope_rolls_it_back(
    engine: Engine, session: Session
) -> None:
    with pytest.raises(RuntimeError, match="disk full"):
        import_then_fail(engine)
    assert row_counts(session) == {"Dataset": 0, "ItemRow": 0, "CandidateRow": 0}


# ---------------------------------------------------------------- runs and calls


def test_run_judgments_round_trip_in_item_execution_call_order(session: Session) -> None:
    items = make_items(2, candidates=2)
    dataset = import_demo(session, items)
    run = stored_run(session, dataset.id)
    ids = item_db_ids(dataset.id, session=session)
    first, second = ids["item-0"], ids["item-1"]
    for call in (
        call_row(run.id, second, 0),
        call_row(run.id, first, 1, ok=False, error="invalid JSON", judgment=None),
        call_row(run.id, first, 0, execution=1, repaired=["lowercase_keys"]),
        call_row(run.id, first, 0),
    ):
        insert_calls([call], session=session)
    judgments = run_judgments(run.id, session=session)
    good = {
        "order": ("c1", "c0"),
        "ok": True,
        "factuality": {"c1": 3.0, "c0": 8.0},
        "hallucination_risk": {"c1": 0.6, "c0": 0.1},
        "ranking": ("c0", "c1"),
        "confidence": 0.9,
    }
    assert judgments == [
        Judgment("item-0", 0, 0, **good),
        Judgment("item-0", 0, 1, ("c1", "c0"), False, "invalid JSON"),
        Judgment("item-0", 1, 0, **good, repaired=("lowercase_keys",)),
        Judgment("item-1", 0, 0, **good),
    ]


def test_a_call_is_recorded_once_per_slot(session: Session) -> None:
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    insert_calls([call_row(run.id, item_id, 0)], session=session)
    with pytest.raises(IntegrityError):
        insert_calls([call_row(run.id, item_id, 0)], session=session)


def test_cache_returns_the_newest_ok_call_of_any_run(session: Session) -> None:
    dataset = import_demo(session, make_items(1))
    old_run = stored_run(session, dataset.id, name="old")
    new = stored_run(session, dataset.id, name="new")
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for run_id, index, ok, minutes in (
        (old_run.id, 0, True, 0),
        (old_run.id, 1, True, 5),
        (new.id, 0, False, 9),
    ):
        call = call_row(
            run_id,
            item_id,
            index,
            ok=ok,
            content_key="same-request",
            created_at=start + timedelta(minutes=minutes),
        )
        insert_calls([call], session=session)
    hits = cached_calls(["same-request", "never-asked"], session=session)
    assert list(hits) == ["same-request"]
    hit = hits["same-request"]
    assert (hit.run_id, hit.call_index, hit.ok) == (old_run.id, 1, True)


def requests_by_index(session: Session) -> dict[int, dict]:
    """Each stored call's request (rebuilt from its template), by call index."""
    calls = session.exec(select(Call)).all()
    return {call.call_index: call_request(call, session=session) for call in calls}


def test_a_template_stored_by_a_rolled_back_transaction_is_stored_again(
    session: Session, new_session: Callable[[], Session]
) -> None:
    """The session that stored a template remembers its id only once committed: after a
    rollback the id may name another template (or none)."""
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    first, other = REQUEST | {"model": "first"}, REQUEST | {"model": "other"}
    with new_session() as writer:  # one session for the whole run, as the engine's
        insert_calls([call_row(run.id, item_id, 0, request=first)], session=writer)
        writer.rollback()
        insert_calls([call_row(run.id, item_id, 1, request=other)], session=writer)
        insert_calls([call_row(run.id, item_id, 0, request=first)], session=writer)
        writer.commit()
        insert_calls([call_row(run.id, item_id, 2, request=first)], session=writer)
        writer.commit()
    assert requests_by_index(session) == {0: first, 1: other, 2: first}
    assert len(session.exec(select(RequestTemplate)).all()) == 2


def waits_for_a_lock(watcher: Session, thread_id: int) -> bool:
    """Whether a writer waits for another's lock: on PostgreSQL a lock not granted, on SQLite
    the writer's thread sleeping in SQLite's busy handler (Linux's /proc)."""
    if on_postgres():
        query = text("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return watcher.connection().execute(query).scalar_one() > 0
    return "nanosleep" in Path(f"/proc/self/task/{thread_id}/wchan").read_text()


def wait_until(condition: Callable[[], bool], hang_s: float = 300) -> None:
    """Poll ``condition`` until true; a hang bound, not a speed test."""
    deadline = time.monotonic() + hang_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_two_writers_storing_one_new_template_at_once_share_its_row(
    session: Session, new_session: Callable[[], Session]
) -> None:
    """The second writer's insert waits for the first's transaction (PostgreSQL: the
    conflicting row; SQLite: the write lock), then finds the template it committed."""
    dataset = import_demo(session, make_items(1))
    runs = [stored_run(session, dataset.id, name=name) for name in ("first", "second")]
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    new = REQUEST | {"system": "A system message no call used yet."}
    rows = [call_row(run.id, item_id, 0, request=new) for run in runs]
    stored: list[int] = []
    thread_ids: list[int] = []

    def second_writer() -> None:
        thread_ids.append(threading.get_native_id())
        with new_session() as writer:
            insert_calls([rows[1]], session=writer)
            writer.commit()
            stored.append(
                writer.exec(select(Call.template_id).where(Call.run_id == runs[1].id)).one()
            )

    with new_session() as first:
        insert_calls([rows[0]], session=first)
        thread = threading.Thread(target=second_writer)
        thread.start()
        with new_session() as watcher:  # the second writer waits for the first: the event
            wait_until(lambda: thread_ids and waits_for_a_lock(watcher, thread_ids[0]))
        assert thread.is_alive()
        first.commit()
        thread.join(timeout=30)
        template_id = first.exec(select(Call.template_id).where(Call.run_id == runs[0].id)).one()
    assert stored == [template_id]
    assert len(session.exec(select(RequestTemplate)).all()) == 1
    for call in session.exec(select(Call)).all():
        assert call_request(call, session=session) == new


def test_a_replaced_answer_keeps_the_request_it_was_asked_with(session: Session) -> None:
    """A retried answer's old values and a second writer's duplicate keep their request as
    a template id and digest, like a call's."""
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    asked = {
        name: REQUEST | {"user": f"Question 0? ({name})"} for name in ("old", "new", "duplicate")
    }
    texts = ("Question 0?", [f"Answer {j} to question 0." for j in (1, 0)])
    insert_calls([call_row(run.id, item_id, 0, request=asked["old"])], session=session)
    (call,) = session.exec(select(Call)).all()
    retried = call_row(run.id, item_id, 0, request=asked["new"], request_texts=texts)
    replace_calls({call.id: retried}, session=session)
    duplicate = call_row(
        run.id, item_id, 0, execution=0, request=asked["duplicate"], request_texts=texts
    )
    keep_duplicate_answers([duplicate], session=session)
    session.commit()
    (call,) = session.exec(select(Call)).all()
    assert call_request(call, session=session) == asked["new"]
    kept = session.exec(select(ReplacedCall).order_by(col(ReplacedCall.id))).all()
    assert [r.reason for r in kept] == ["retried", "duplicate"]
    for replaced, name in zip(kept, ("old", "duplicate"), strict=True):
        values = replaced.values
        assert not {"request", "request_texts"} & values.keys()
        stand_in = Call(item_id=item_id, order=values["order"], template_id=values["template_id"])
        request = call_request(stand_in, session=session)
        assert request == asked[name]
        assert request_digest(request) == values["request_digest"]


def test_run_totals_count_paid_calls_cache_hits_and_failures(
    session: Session, new_session: Callable[[], Session]
) -> None:
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    insert_calls([call_row(run.id, item_id, 0, attempts=2)], session=session)
    paid = run_calls_by_slot(run.id, session=session, item_ids=[item_id])[(item_id, 0, 0)]
    insert_calls(
        [
            call_row(run.id, item_id, 1, ok=False, judgment=None),
            call_row(run.id, item_id, 2, cached_from=paid.id),
        ],
        session=session,
    )
    totals = update_run_totals(run.id, session=session)
    session.commit()
    assert (totals.calls_made, totals.cache_hits, totals.failures) == (3, 1, 1)
    assert (totals.input_tokens, totals.output_tokens) == (200, 40)
    assert totals.cost_usd == pytest.approx(0.02)
    with new_session() as fresh:
        assert get_run(run.name, session=fresh).calls_made == 3


def test_run_totals_beyond_32_bits_are_stored(
    session: Session, new_session: Callable[[], Session]
) -> None:
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    most = MAX_CALL_TOKENS
    calls = [
        call_row(run.id, item_id, i, input_tokens=most, output_tokens=most) for i in range(300)
    ]
    insert_calls(calls, session=session)
    update_run_totals(run.id, session=session)
    session.commit()
    with new_session() as fresh:
        stored = get_run(run.name, session=fresh)
        assert (stored.input_tokens, stored.output_tokens) == (300 * most, 300 * most)
        assert stored.input_tokens > 2**31


def test_runs_are_listed_and_validated(
    session: Session, new_session: Callable[[], Session]
) -> None:
    dataset = import_demo(session, make_items(1))
    keys = parse_run_settings({"keys": ["A", "B"]})  # a key of a newer release: kept
    stored_run(session, dataset.id, name="run-1", k=7, settings=keys)
    with new_session() as fresh:
        assert [r.name for r in list_runs(session=fresh, dataset_id=dataset.id)] == ["run-1"]
        assert list_runs(session=fresh, dataset_id=dataset.id + 1) == []
        run = get_run("run-1", session=fresh)
        assert (run.status, run.k, run.settings.stored()) == ("pending", 7, {"keys": ["A", "B"]})
    for name, settings, refused in (
        ("run-1", None, "choose another name"),
        (
            "leaky",
            parse_run_settings({"auth": {"OPENAI_API_KEY": "sk-x"}}),
            "keys come from the environment",
        ),
    ):
        with pytest.raises(ValueError, match=refused):
            create_run(
                name,
                session=session,
                dataset_id=dataset.id,
                protocol="pcf",
                backend="openai",
                model="m",
                k=3,
                schedule="balanced",
                settings=settings,
            )


# ---------------------------------------------------------------- datetimes


def finish_run_at(session: Session, run: Run, when: datetime) -> None:
    run.finished_at = when
    session.add(run)
    session.commit()


def test_datetimes_are_timezone_aware_after_a_round_trip(
    session: Session, new_session: Callable[[], Session]
) -> None:
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    paris_evening = datetime(2025, 6, 1, 20, 0, tzinfo=timezone(timedelta(hours=2)))
    finish_run_at(session, run, paris_evening)
    with new_session() as fresh:
        loaded = fresh.get(Run, run.id)
        created = get_dataset("demo", session=fresh).created_at
    assert created.utcoffset() == timedelta(0)
    assert loaded.finished_at == paris_evening
    assert loaded.finished_at.tzinfo == UTC


def test_naive_datetimes_are_refused(session: Session) -> None:
    dataset = import_demo(session, make_items(1))
    run = stored_run(session, dataset.id)
    with pytest.raises(StatementError, match="must have timezone information"):
        finish_run_at(session, run, datetime(2025, 6, 1, 20, 0))


# ---------------------------------------------------------------- adjudications


def test_corrections_are_new_rows_and_the_newest_is_current(
    session: Session, new_session: Callable[[], Session]
) -> None:
    dataset = import_demo(session, make_items(3))
    ids = item_db_ids(dataset.id, session=session)
    first = add_adjudication(
        ids["item-0"],
        session=session,
        annotator="ana",
        choice="c1",
        confidence=0.4,
        tags=["unsure"],
    )
    add_adjudication(ids["item-0"], session=session, annotator="ben", choice="cannot_tell")
    add_adjudication(ids["item-2"], session=session, annotator="ana", choice="none_correct")
    session.commit()
    correction = add_adjudication(
        ids["item-0"],
        session=session,
        annotator="ana",
        choice="c0",
        confidence=0.9,
        notes="checked the source",
    )
    session.commit()
    assert correction.supersedes == first.id
    with new_session() as fresh:
        history = adjudication_history(ids["item-0"], session=fresh)
        labels = current_labels(dataset.id, session=fresh)
        ana_done = adjudicated_item_keys(dataset.id, "ana", session=fresh)
        total_rows = fresh.exec(select(func.count()).select_from(Adjudication)).one()
    assert total_rows == 4
    assert [(a.annotator, a.choice, a.supersedes) for a in history] == [
        ("ana", "c1", None),
        ("ben", "cannot_tell", None),
        ("ana", "c0", first.id),
    ]
    assert list(labels.columns) == list(LABEL_COLUMNS)
    assert labels[["item_key", "annotator", "choice"]].values.tolist() == [
        ["item-0", "ana", "c0"],
        ["item-0", "ben", "cannot_tell"],
        ["item-2", "ana", "none_correct"],
    ]
    assert labels["confidence"].fillna(-1).tolist() == [0.9, -1, -1]
    assert labels["notes"].tolist() == ["checked the source", "", ""]
    assert labels["tags"].tolist() == [[], [], []]
    assert str(labels["created_at"].dt.tz) == "UTC"
    assert ana_done == {"item-0", "item-2"}


def test_no_labels_give_an_empty_frame_with_the_columns(session: Session) -> None:
    dataset = import_demo(session, make_items(1))
    labels = current_labels(dataset.id, session=session)
    assert labels.empty
    assert list(labels.columns) == list(LABEL_COLUMNS)


@pytest.mark.parametrize(
    ("item_key", "annotator", "choice", "confidence", "message"),
    [
        ("item-0", "ana", "c9", None, "not one of: c0, c1, none_correct, cannot_tell"),
        ("item-0", "ana", "c0", 1.5, "between 0 and 1"),
        ("item-0", " ", "c0", None, "annotator name is empty"),
        (None, "ana", "c0", None, "no item"),
    ],
)
def test_bad_adjudications_are_refused(
    session: Session,
    item_key: str | None,
    annotator: str,
    choice: str,
    confidence: float | None,
    message: str,
) -> None:
    dataset = import_demo(session, make_items(1, candidates=2))
    item_id = item_db_ids(dataset.id, session=session).get(item_key, MISSING_ITEM_ID)
    with pytest.raises(ValueError, match=message):
        add_adjudication(
            item_id, session=session, annotator=annotator, choice=choice, confidence=confidence
        )


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("annotator", {"annotator": "a\x00na"}),
        ("notes", {"notes": "see\x00"}),
        ("tags", {"tags": ["x\x00"]}),
    ],
)
def test_a_nul_in_typed_text_is_refused_on_every_database(
    session: Session, field: str, text: dict[str, object]
) -> None:
    dataset = import_demo(session, make_items(1, candidates=2))
    item_id = item_db_ids(dataset.id, session=session)["item-0"]
    fields: dict[str, object] = {"annotator": "ana", **text}
    with pytest.raises(ValueError, match=f"the {field} must not hold a NUL"):
        add_adjudication(item_id, session=session, choice="c0", **fields)  # type: ignore[arg-type]
    add_adjudication(item_id, session=session, choice="c0", annotator="ana", notes="fine")
    assert [row.notes for row in adjudication_history(item_id, session=session)] == ["fine"]
