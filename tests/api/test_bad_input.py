"""Bad input is refused with a 4xx problem+json naming the field, and nothing is stored:
malformed JSON, a 20 MB body (declared or streamed), 10,000 items at once, unknown and
mistyped fields, items that contradict themselves or the stored ones, labels of no item."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from pcf.store import Adjudication, ItemRow

pytestmark = pytest.mark.db
ITEMS = "/api/v1/datasets/pushed/items"


def item(n: int, **changes) -> dict:
    return {
        "item_id": f"i{n}",
        "prompt": f"question {n}",
        "candidates": [{"id": "a", "text": "yes"}, {"id": "b", "text": "no"}],
    } | changes


@pytest.fixture
def pusher(client, token):
    headers = token("ci@example.org", "admin", "run")
    assert client.put("/api/v1/datasets/pushed", headers=headers).status_code == 201
    assert client.post(ITEMS, headers=headers, json={"items": [item(0)]}).status_code == 200
    return headers


def stored(session) -> int:
    return session.scalar(select(func.count()).select_from(ItemRow))


def refused(answer, status: int, *fields: str) -> dict:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["status"] == status
    assert [e["field"] for e in body.get("errors", [])] == list(fields)
    return body


def test_each_bad_body_names_its_field_and_stores_nothing(client, pusher, session):
    post = lambda json: client.post(ITEMS, headers=pusher, json=json)  # noqa: E731
    malformed = client.post(
        ITEMS, headers=pusher | {"content-type": "application/json"}, content=b'{"items": ['
    )
    assert "not JSON" in refused(malformed, 400)["detail"]
    refused(post({"items": [item(1), item(2, prompt=7)]}), 422, "items[1].prompt")
    refused(post({"items": [item(1, colour="red")]}), 422, "items[0].colour")
    refused(post({"items": [item(1)], "dataset": "x"}), 422, "dataset")
    refused(
        post({"items": [item(1, candidates=[{"id": "a"}])]}), 422, "items[0].candidates[0].text"
    )
    refused(post({"items": [item(n) for n in range(10_000)]}), 422, "items")
    refused(post({"items": []}), 422, "items")
    # Checks across fields and against the stored items name the row too.
    refused(post({"items": [item(1), item(1)]}), 422, "items[1].item_id")
    refused(post({"items": [item(1, gold="c")]}), 422, "items[0].gold")
    changed = item(0, prompt="another question")
    refused(post({"items": [item(1), changed]}), 422, "items[1].item_id")
    assert stored(session) == 1
    listed = client.get(ITEMS, headers=pusher).json()
    assert [i["item_id"] for i in listed["items"]] == ["i0"]


def test_a_body_past_the_limit_is_413_declared_or_streamed(client, pusher, session):
    big = b'{"items": [' + b" " * (20 * 1024 * 1024) + b"]}"
    headers = pusher | {"content-type": "application/json"}
    refused(client.post(ITEMS, headers=headers, content=big), 413)
    chunks = (big[i : i + 65536] for i in range(0, len(big), 65536))  # no Content-Length
    refused(client.post(ITEMS, headers=headers, content=chunks), 413)
    assert stored(session) == 1


def test_labels_of_no_item_or_choice_save_none_of_the_batch(client, pusher, token, session):
    annotator = token("ann@example.org", "annotator", "label")
    good = {"label_id": "l1", "item_id": "i0", "answer": "a"}
    batch = [good, {"label_id": "l2", "item_id": "nope", "answer": "a"}]
    batch.append({"label_id": "l3", "item_id": "i0", "answer": "zzz"})
    answer = client.post(
        "/api/v1/datasets/pushed/labels", headers=annotator, json={"labels": batch}
    )
    refused(answer, 422, "labels[1].item_id", "labels[2].answer")
    twice = {"labels": [good, good]}
    refused(
        client.post("/api/v1/datasets/pushed/labels", headers=annotator, json=twice),
        422,
        "labels[1].label_id",
    )
    wrong_type = {"labels": [good | {"confidence": "high"}]}
    refused(
        client.post("/api/v1/datasets/pushed/labels", headers=annotator, json=wrong_type),
        422,
        "labels[0].confidence",
    )
    assert session.scalar(select(func.count()).select_from(Adjudication)) == 0


def test_query_and_header_errors_name_them(client, pusher):
    refused(client.get(ITEMS, headers=pusher, params={"limit": 1001}), 422, "limit")
    refused(client.get(ITEMS, headers=pusher, params={"cursor": "x"}), 422, "cursor")
    run = {"dataset": "pushed", "k": 1}
    refused(client.post("/api/v1/runs", headers=pusher, json=run), 422, "Idempotency-Key")
    refused(client.get("/api/v1/runs/none/decisions", headers=pusher), 404)
    unknown = client.get("/api/v1/datasets/none/items", headers=pusher)
    assert "PUT /datasets/none" in refused(unknown, 404)["detail"]


def test_a_database_that_cannot_be_used_is_503_and_the_server_still_starts(tmp_path, monkeypatch):
    """A database of something else: the server starts (it logs that no run was resumed), every
    request that needs the database answers 503 saying why, and /health still answers."""
    import sqlite3

    from fastapi.testclient import TestClient

    from pcf.api import standalone

    broken = tmp_path / "other.db"
    with sqlite3.connect(broken) as other:
        other.execute("CREATE TABLE dataset (id INTEGER PRIMARY KEY, label TEXT)")
    monkeypatch.setenv("PCF_DATABASE_URL", f"sqlite:///{broken}")
    with TestClient(standalone(), base_url="http://127.0.0.1/api/v1") as client:
        assert client.get("/health").status_code == 200
        answer = client.get("/me", headers={"Authorization": "Bearer pcf_x"})
    body = refused(answer, 503)
    assert "database cannot be used" in body["detail"]
