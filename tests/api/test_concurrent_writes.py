"""The same write sent several times at once (a client's retries racing): one dataset, one
copy of each item, one label per label_id, and every answer a success."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from pcf.store import Adjudication, Dataset, ItemRow

AT_ONCE = 6
pytestmark = pytest.mark.db


def all_at_once(send) -> list:
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(lambda _: send(), range(AT_ONCE)))


def count(session, table) -> int:
    return session.scalar(select(func.count()).select_from(table))


def test_racing_retries_store_each_thing_once(client, token, new_session):
    headers = token("ci@example.org", "admin", "run")
    created = all_at_once(lambda: client.put("/api/v1/datasets/raced", headers=headers))
    assert sorted(a.status_code for a in created) == [200] * (AT_ONCE - 1) + [201]
    items = [
        {
            "item_id": f"i{n}",
            "prompt": f"q{n}",
            "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}],
        }
        for n in range(50)
    ]
    added = all_at_once(
        lambda: client.post("/api/v1/datasets/raced/items", headers=headers, json={"items": items})
    )
    assert all(a.status_code == 200 for a in added), [a.text for a in added]
    assert sum(a.json()["added"] for a in added) == 50
    labels = {"labels": [{"label_id": "once", "item_id": "i0", "answer": "a"}]}
    posted = all_at_once(
        lambda: client.post("/api/v1/datasets/raced/labels", headers=headers, json=labels)
    )
    assert all(a.status_code == 200 for a in posted), [a.text for a in posted]
    assert sorted(a.json()["labels"][0]["saved"] for a in posted) == [False] * (AT_ONCE - 1) + [
        True
    ]
    with new_session() as session:
        assert (count(session, Dataset), count(session, ItemRow)) == (1, 50)
        assert count(session, Adjudication) == 1
        assert session.scalar(select(Dataset.n_items)) == 50
