"""Datasets and their items: imports, and items read a chunk at a time. Functions flush,
never commit. Items read back hold their database id as ``metadata["db_id"]``."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import (
    CursorResult,
    Result,
    and_,
    insert,
    literal,
    or_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from pcf.items import Candidate, Item
from pcf.store.engine import LostRaceError
from pcf.store.models import CandidateRow, Dataset, ItemRow, saved

CACHE_QUERY_CHUNK = 500  # keys per IN query (SQLite allows 32766 parameters)


def rows_changed(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE changed (its result is a cursor's)."""
    assert isinstance(result, CursorResult)
    return result.rowcount


def import_items(
    items: Iterable[Item],
    *,
    session: Session,
    name: str,
    fmt: str,
    source_path: str | Path | None = None,
    seed: int = 0,
) -> Dataset:
    """Store dataset ``name`` (``items`` in file order, read from ``source_path`` in format
    ``fmt``; ``seed`` of the canonical orders) with bulk inserts, :data:`ITEM_CHUNK` items at
    a time: a stream of items (:func:`pcf.items.stream_dataset`) is never held whole. An error
    the stream raises midway leaves rows to roll back, as every error does.

    Raises:
        ValueError: the name is taken, no items, or an item or candidate id twice.
    """
    stream = iter(items)
    chunk = list(itertools.islice(stream, ITEM_CHUNK))
    if not chunk:
        raise ValueError(f"no items to import into dataset {name!r}")
    if get_dataset(name, session=session) is not None:
        raise ValueError(f"a dataset named {name!r} already exists; choose another name")
    dataset = Dataset(
        name=name,
        format=fmt,
        source_path=None if source_path is None else str(source_path),
        seed=seed,
        n_items=0,
    )
    saved(dataset, session=session)
    try:
        while chunk:
            _insert_items(dataset.id, dataset.n_items, chunk, session=session)
            dataset.n_items += len(chunk)
            chunk = list(itertools.islice(stream, ITEM_CHUNK))
    except IntegrityError as exc:
        raise ValueError(
            f"cannot import dataset {name!r}: item ids must be unique, and candidate ids unique "
            f"within each item ({exc.orig})"
        ) from exc
    return saved(dataset, session=session)


def create_dataset(name: str, *, session: Session, fmt: str, seed: int = 0) -> Dataset:
    """Store an empty dataset ``name`` whose items come later (:func:`append_items`).

    Raises:
        LostRaceError: the name is taken (by another session meanwhile, when the caller looked
            first: try again).
    """
    try:
        return saved(Dataset(name=name, format=fmt, seed=seed), session=session)
    except IntegrityError as exc:
        raise LostRaceError(f"a dataset named {name!r} exists already") from exc


def append_items(dataset_id: int, items: list[Item], *, session: Session) -> None:
    """Add ``items`` (none of whose ids the dataset has) after the dataset's last item; the
    dataset's row is updated first, so that two appends at once take turns.

    Raises:
        LostRaceError: another session added one of these items meanwhile (try again).
    """
    if not items:
        return
    grown = session.execute(
        update(Dataset)
        .where(col(Dataset.id) == dataset_id)
        .values(n_items=col(Dataset.n_items) + len(items))
        .returning(col(Dataset.n_items))
    ).scalar_one()
    start = grown - len(items)
    try:
        for offset in range(0, len(items), ITEM_CHUNK):
            chunk = items[offset : offset + ITEM_CHUNK]
            _insert_items(dataset_id, start + offset, chunk, session=session)
    except IntegrityError as exc:
        raise LostRaceError("another request added some of these items at once") from exc
    session.expire_all()


def _insert_items(dataset_id: int, start: int, items: list[Item], *, session: Session) -> None:
    """Insert ``items``, the dataset's from position ``start`` on, and their candidates (a chunk
    at a time: a whole large dataset's rows would take gigabytes)."""
    inserted = session.execute(
        insert(ItemRow).returning(col(ItemRow.item_key), col(ItemRow.id)),
        [
            {
                "dataset_id": dataset_id,
                "item_key": item.item_id,
                "position": start + offset,
                "prompt": item.prompt,
                "gold": item.gold,
                "bucket": item.bucket,
                "item_metadata": item.metadata,
            }
            for offset, item in enumerate(items)
        ],
    )
    db_ids = dict(inserted.all())
    session.execute(
        insert(CandidateRow),
        [
            {
                "item_id": db_ids[item.item_id],
                "candidate_key": candidate.id,
                "position": position,
                "text": candidate.text,
            }
            for item in items
            for position, candidate in enumerate(item.candidates)
        ],
    )


def get_dataset(name: str, *, session: Session) -> Dataset | None:
    """The dataset called ``name``, or None."""
    return session.exec(select(Dataset).where(Dataset.name == name)).first()


def list_datasets(*, session: Session) -> list[Dataset]:
    """Every dataset, oldest first."""
    return list(session.exec(select(Dataset).order_by(col(Dataset.id))).all())


ITEM_CHUNK = 500  # items read at once when a whole dataset is gone through


def _items_where(condition: Any, *, session: Session, texts: bool = True) -> list[Item]:
    """The items matching ``condition`` in file order (texts left empty without ``texts``).

    The items are read before their candidates: outside a write, each statement sees the
    database as it is then, and an item is committed with its candidates, so every item read
    finds them (read the other way round, items committed in between came without any).
    """
    item_rows = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.id,
            ItemRow.item_key,
            ItemRow.prompt,
            ItemRow.gold,
            ItemRow.bucket,
            ItemRow.item_metadata,
        )
        .where(condition)
        .order_by(col(ItemRow.position))
    ).all()
    candidates: dict[int, list[Candidate]] = defaultdict(list)
    text = CandidateRow.text if texts else literal("")
    candidate_rows = session.exec(
        select(CandidateRow.item_id, CandidateRow.candidate_key, text)
        .join(ItemRow, col(ItemRow.id) == CandidateRow.item_id)
        .where(condition)
        .order_by(col(CandidateRow.item_id), col(CandidateRow.position))
    )
    for item_id, key, text in candidate_rows:
        candidates[item_id].append(Candidate(key, text))
    return [
        Item(key, prompt, tuple(candidates[db_id]), gold, bucket, {**metadata, "db_id": db_id})
        for db_id, key, prompt, gold, bucket, metadata in item_rows
    ]


def load_items(dataset_id: int, *, session: Session) -> list[Item]:
    """The dataset's items in file order, candidates in listing order."""
    return _items_where(ItemRow.dataset_id == dataset_id, session=session)


def items_at(
    dataset_id: int, start: int, stop: int, *, session: Session, texts: bool = True
) -> list[Item]:
    """The dataset's items at positions ``start`` to ``stop`` (excluded), in file order;
    without ``texts`` the candidates' texts are left empty (decisions need only their ids)."""
    condition = and_(
        col(ItemRow.dataset_id) == dataset_id,
        col(ItemRow.position) >= start,
        col(ItemRow.position) < stop,
    )
    return _items_where(condition, session=session, texts=texts)


def items_named(
    dataset_id: int, item_keys: Iterable[str], *, session: Session, texts: bool = True
) -> list[Item]:
    """The dataset's items with these keys, in file order (without ``texts``, as above)."""
    found: list[Item] = []
    for keys in _chunks(item_keys):
        condition = and_(col(ItemRow.dataset_id) == dataset_id, col(ItemRow.item_key).in_(keys))
        found += _items_where(condition, session=session, texts=texts)
    return sorted(found, key=lambda item: item.metadata["db_id"])


class DatasetItems:
    """A dataset's items in file order (its first ``limit`` only), read :data:`ITEM_CHUNK` at
    a time whenever they are gone through: work over any size holds one chunk in memory."""

    def __init__(self, dataset_id: int, *, session: Session, limit: int | None = None) -> None:
        self.dataset_id, self.session, self.limit = dataset_id, session, limit

    def __iter__(self) -> Iterator[Item]:
        for chunk in self.chunks():
            yield from chunk

    def chunks(self) -> Iterator[list[Item]]:
        """The items, :data:`ITEM_CHUNK` at a time."""
        size = self.session.get_one(Dataset, self.dataset_id).n_items
        end = size if self.limit is None else min(size, self.limit)
        for start in range(0, end, ITEM_CHUNK):
            stop = min(start + ITEM_CHUNK, end)
            yield items_at(self.dataset_id, start, stop, session=self.session)


def items_by_ids(item_db_ids: Iterable[int], *, session: Session) -> list[Item]:
    """The items with these database ids (at most :data:`ITEM_CHUNK`), in file order."""
    return _items_where(col(ItemRow.id).in_(list(item_db_ids)), session=session)


def load_item(item_db_id: int, *, session: Session) -> Item | None:
    """One item by database id, or None."""
    return next(iter(items_by_ids([item_db_id], session=session)), None)


def item_positions(dataset_id: int, *, session: Session) -> list[tuple[str, int, int]]:
    """``(item key, database id, position)`` of the dataset's items, in file order."""
    rows = session.exec(
        select(ItemRow.item_key, ItemRow.id, ItemRow.position)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(ItemRow.position))
    )
    return [(key, db_id, position) for key, db_id, position in rows]


def matching_item_keys(dataset_id: int, text: str, *, session: Session) -> set[str]:
    """Keys of the items whose id, prompt or any candidate contains ``text`` (any case)."""
    rows = session.exec(
        select(ItemRow.item_key)
        .join(CandidateRow, col(CandidateRow.item_id) == ItemRow.id)
        .where(
            ItemRow.dataset_id == dataset_id,
            or_(
                col(ItemRow.item_key).icontains(text, autoescape=True),
                col(ItemRow.prompt).icontains(text, autoescape=True),
                col(CandidateRow.text).icontains(text, autoescape=True),
            ),
        )
        .distinct()
    )
    return set(rows.all())


def item_db_ids(dataset_id: int, *, session: Session) -> dict[str, int]:
    """``{item_key: database id}`` for the dataset's items."""
    return {key: db_id for key, db_id, _ in item_positions(dataset_id, session=session)}


def item_ids_named(dataset_id: int, item_keys: Iterable[str], *, session: Session) -> list[int]:
    """The database ids of the dataset's items with these keys, ascending (one lock order)."""
    found: list[int] = []
    for keys in _chunks(item_keys):
        found += session.exec(
            select(ItemRow.id).where(
                col(ItemRow.dataset_id) == dataset_id, col(ItemRow.item_key).in_(keys)
            )
        ).all()
    return sorted(found)


def _chunks(keys: Iterable[str]) -> Iterator[list[str]]:
    """Distinct keys in chunks of :data:`CACHE_QUERY_CHUNK`, for ``IN`` queries of any size."""
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), CACHE_QUERY_CHUNK):
        yield unique[start : start + CACHE_QUERY_CHUNK]
