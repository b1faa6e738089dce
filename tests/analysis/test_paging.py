"""A run's decisions a page at a time (pcf/analysis/paging.py): every page size and flag gives
``pcf export``'s records in order, and each chunk of items is decided once when the pages are
as large as the chunks."""

from __future__ import annotations

import pytest

from pcf.analysis import paging
from pcf.analysis.paging import decision_page
from pcf.analysis.results import decision_chunks
from pcf.store import get_run


def all_pages(run, session, limit: int, flag: str | None = None) -> tuple[list, list]:
    records, cursors, cursor = [], [], None
    while True:
        page, cursor = decision_page(run, session=session, cursor=cursor, limit=limit, flag=flag)
        records += page
        if cursor is None:
            return records, cursors
        cursors.append(cursor)


def test_pages_of_any_size_are_the_export_and_whole_chunks_are_decided_once(db, monkeypatch):
    monkeypatch.setattr(paging, "CHUNK", 10)
    decided = []
    chunks = paging.decision_chunks

    def counted(run, **options):
        for records in chunks(run, **options):
            decided.append(records[0]["item_id"])
            yield records

    monkeypatch.setattr(paging, "decision_chunks", counted)
    run = get_run("demo-pcf", session=db)
    exported = [record for chunk in decision_chunks(run, session=db) for record in chunk]
    assert len(exported) > 30
    for limit in (1, 7, 10, 1000):
        assert all_pages(run, db, limit)[0] == exported, limit
    flagged = [r for r in exported if "order_unstable" in r["flags"]]
    assert all_pages(run, db, 3, "order_unstable")[0] == flagged

    decided.clear()
    _, cursors = all_pages(run, db, 10)
    assert cursors == [f"{n}.0" for n in range(10, len(exported), 10)]
    assert len(decided) == len(set(decided)) == -(-len(exported) // 10)
    assert decision_page(run, session=db, cursor="0.10", limit=2)[0] == exported[10:12]
    with pytest.raises(ValueError, match="not one a page gave"):
        decision_page(run, session=db, cursor="5.0")
