"""Labels saved by several processes at once: none is lost and each annotator's history of an
item stays a line (one first label, one successor per label), on SQLite and on PostgreSQL.

Each process saves through :func:`pcf.store.write_with_retry`, as the Adjudicate page does.
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from pcf.store import (
    Adjudication,
    LostRaceError,
    add_adjudication,
    get_engine,
    import_items,
    is_transient,
    load_items,
    write_with_retry,
)
from tests.factories import make_item

SPAWN = multiprocessing.get_context("forkserver")
"""Each worker a fresh process forked from a server that has imported this module once (none of
the pytest process's threads or connections), instead of a new interpreter importing it again:
about a second of CPU a worker."""
SPAWN.set_forkserver_preload([__name__])


def save_labels(
    url: str, worker: int, saves: int, targets: list[tuple[int, str]], start: SPAWN.Barrier
) -> None:
    """A process's body: ``saves`` labels, cycling over ``(item id, annotator)`` targets; each
    label's notes say who saved it and when (``worker:index``)."""
    engine = get_engine(url)
    start.wait()
    for index in range(saves):
        item_db_id, annotator = targets[index % len(targets)]
        write_with_retry(
            engine,
            lambda s, item_db_id=item_db_id, annotator=annotator, index=index: add_adjudication(
                item_db_id,
                session=s,
                annotator=annotator,
                choice="c0" if index % 2 else "c1",
                notes=f"{worker}:{index}",
            ),
        )
    engine.dispose()


def run_workers(url: str, plans: list[list[tuple[int, str]]], saves: int) -> None:
    """Start one process per plan at once and wait for all; each must end cleanly."""
    start = SPAWN.Barrier(len(plans))
    workers = [
        SPAWN.Process(target=save_labels, args=(url, worker, saves, plan, start))
        for worker, plan in enumerate(plans)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [w.exitcode for w in workers] == [0] * len(workers)


def assert_linear_histories(labels: list[Adjudication]) -> None:
    """Per (item, annotator): one first label, and following ``supersedes`` from it reaches
    every label once, newest last."""
    chains: dict[tuple[int, str], list[Adjudication]] = defaultdict(list)
    for label in labels:
        chains[(label.item_id, label.annotator)].append(label)
    for chain in chains.values():
        successor = {label.supersedes: label for label in chain}
        assert len(successor) == len(chain), "two labels supersede the same one"
        assert None in successor, "no first label"
        walked, current = [], successor[None]
        while current is not None:
            walked.append(current.id)
            current = successor.get(current.id)
        assert sorted(walked) == sorted(label.id for label in chain)


@pytest.fixture
def item_ids(session: Session) -> list[int]:
    """Three items of candidates c0 and c1."""
    items = [make_item(f"q{i}", n=2) for i in range(3)]
    dataset = import_items(items, session=session, name="ds", fmt="jsonl")
    session.commit()
    return [item.metadata["db_id"] for item in load_items(dataset.id, session=session)]


def test_eight_processes_saving_500_labels_each_lose_none(isolated_database, session, item_ids):
    """8 x 500 saves; two processes share each annotator, and each annotator labels the same
    three items over and over, so saves of one history race all the time."""
    plans = [[(item, f"ann{worker % 4}") for item in item_ids] for worker in range(8)]
    run_workers(isolated_database, plans, saves=500)
    labels = list(session.exec(select(Adjudication)).all())
    assert len(labels) == 8 * 500
    assert sorted(label.notes for label in labels) == sorted(
        f"{worker}:{index}" for worker in range(8) for index in range(500)
    )
    assert_linear_histories(labels)


def test_one_annotator_saving_one_item_from_two_processes_keeps_a_line(
    isolated_database, session, item_ids
):
    plan = [(item_ids[0], "ana")]
    run_workers(isolated_database, [plan, plan], saves=300)
    labels = list(session.exec(select(Adjudication)).all())
    assert len(labels) == 600
    assert_linear_histories(labels)


def test_a_second_first_label_loses_the_race_and_is_saved_on_top(engine, new_session, item_ids):
    """Two sessions both see no label yet: the later save is refused by the chain index, and
    tried again it supersedes the first."""
    with new_session() as first, new_session() as second:
        first_id = add_adjudication(item_ids[0], session=first, annotator="ana", choice="c0").id
        first.commit()
        # the second session read "no previous label" before the first committed
        theirs = Adjudication(item_id=item_ids[0], annotator="ana", choice="c1")
        second.add(theirs)
        with pytest.raises(IntegrityError):
            second.flush()
        second.rollback()
    saved = write_with_retry(
        engine, lambda s: add_adjudication(item_ids[0], session=s, annotator="ana", choice="c1")
    )
    assert saved.supersedes == first_id


def test_write_with_retry_gives_up_on_errors_that_are_not_races(engine, item_ids):
    calls = []

    def work(s: Session) -> None:
        calls.append(1)
        add_adjudication(item_ids[0], session=s, annotator="ana", choice="no-such-candidate")

    with pytest.raises(ValueError, match="no-such-candidate"):
        write_with_retry(engine, work)
    assert len(calls) == 1
    assert not is_transient(ValueError("x"))
    assert is_transient(LostRaceError("x"))
