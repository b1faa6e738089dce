"""A run's decisions a page at a time, for clients that read them over a network. A cursor
names where a page starts: a chunk of :data:`CHUNK` items (by its first position) and how many
of that chunk's records earlier pages took, so pages of any size follow each other."""

from __future__ import annotations

import re
from typing import Any

from sqlmodel import Session

from pcf.analysis.results import decision_chunks
from pcf.flags import FLAGS
from pcf.processes import gc_paused
from pcf.store import Run

MAX_PAGE = 1000
CHUNK = 500
CURSOR = re.compile(r"(\d{1,12})\.(\d{1,4})")


def decision_page(
    run: Run,
    *,
    session: Session,
    cursor: str | None = None,
    limit: int = 100,
    flag: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Up to ``limit`` of the run's decision records (those raising ``flag`` alone, when
    given) from ``cursor`` on (None: the first), as ``pcf export --what decisions`` writes
    them, and the next page's cursor (None after the last page).

    Raises:
        ValueError: an unknown flag, a limit out of range, or a cursor no page gave.
    """
    if flag is not None and flag not in FLAGS:
        raise ValueError(f"unknown flag {flag!r}; choose one of {', '.join(FLAGS)}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit is 1 to {MAX_PAGE}, not {limit}")
    found = CURSOR.fullmatch(cursor or "0.0")
    if found is None or int(found[1]) % CHUNK or int(found[2]) > CHUNK:
        raise ValueError(f"cursor {cursor!r} is not one a page gave")
    start, skip = int(found[1]), int(found[2])
    with gc_paused():  # a page is thousands of small dicts and lists, none in a cycle
        return _page(run, session=session, start=start, skip=skip, limit=limit, flag=flag)


def _page(
    run: Run, *, session: Session, start: int, skip: int, limit: int, flag: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """:func:`decision_page` from the chunk at ``start``, its first ``skip`` records taken."""
    page: list[dict[str, Any]] = []
    for first, records in zip(
        range(start, 2**63, CHUNK),
        decision_chunks(run, session=session, size=CHUNK, start=start),
        strict=False,
    ):
        for taken, record in enumerate(records[skip:], start=skip + 1):
            if flag is None or flag in record["flags"]:
                page.append(record)
            if len(page) == limit:  # a chunk taken whole: the next page starts at the next
                return page, f"{first + CHUNK}.0" if taken == CHUNK else f"{first}.{taken}"
        skip = 0
    return page, None
