"""API fixtures: members with tokens, and the API in-process (``TestClient``) on the test's
database; the journey serves the real app instead (tests/api/test_journey.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from pcf.access import operator
from pcf.labelling.tokens import create_token
from pcf.store import save_member

Token = Callable[..., dict[str, str]]


@pytest.fixture
def token(new_session) -> Token:
    """``token(email, role, scope)``: the member (added if new, else given ``role``) and the
    Authorization header of a new token of theirs."""

    def make(email: str, role: str = "admin", scope: str = "admin", **options) -> dict[str, str]:
        with new_session() as session:
            save_member(email, role, session=session, added_by="test")
            made = create_token(email, scope, session=session, actor=operator(), **options)
            session.commit()
        return {"Authorization": f"Bearer {made.secret}"}

    return make


@pytest.fixture
def client(isolated_database) -> Iterator[TestClient]:
    """The API alone, in this process, on the test's database."""
    from pcf.api import standalone

    with TestClient(standalone(), base_url="http://127.0.0.1") as served:
        yield served
