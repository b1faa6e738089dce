"""The people routes: the labelling plan changes only at the version it was read at (ETag and
If-Match), ``queue/next`` serves the Label page's queue and shares its holds, and assignments are
``pcf labels assign``'s."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pcf.analysis.results import analyse_run
from pcf.labelling.adjudications import adjudication_queue, display_order, item_index, with_priority
from pcf.store import get_run, load_items
from tests.app import open_page, signed_in_app
from tests.app.test_adjudicate import item_on_screen

pytestmark = pytest.mark.db
PLAN = "/api/v1/datasets/demo/plan"
NEXT = "/api/v1/datasets/demo/queue/next"


def test_the_plan_changes_only_at_the_version_it_was_read_at(demo_engine, client, token):
    admin, annotator = token("lead@example.org"), token("ann@example.org", "annotator", "label")
    read = client.get(PLAN, headers=annotator)  # annotators read the guidelines
    assert read.json()["labels_per_item"] == 1
    first = read.headers["etag"]

    missing = client.put(PLAN, headers=admin, json={"labels_per_item": 2})
    assert missing.status_code == 428, missing.text
    assert missing.json()["errors"][0]["field"] == "If-Match"
    wrong = client.put(PLAN, headers=admin | {"If-Match": first}, json={"labels_per_item": 11})
    assert [e["field"] for e in wrong.json()["errors"]] == ["labels_per_item"]

    changed = client.put(
        PLAN, headers=admin | {"If-Match": first}, json={"labels_per_item": 2, "adaptive": True}
    )
    assert changed.status_code == 200, changed.text
    second = changed.headers["etag"]
    assert second != first
    assert client.get(PLAN, headers=admin).headers["etag"] == second
    stale = client.put(PLAN, headers=admin | {"If-Match": first}, json={"gold_rule": "majority"})
    assert stale.status_code == 412
    assert "changed since" in stale.json()["detail"]

    def put(n: int):
        change = {"guidelines": f"Version {n}."}
        return client.put(PLAN, headers=admin | {"If-Match": second}, json=change)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(put, range(6)))
    assert sorted(a.status_code for a in answers) == [200] + [412] * 5  # one change wins
    won = next(a for a in answers if a.status_code == 200)
    now = client.get(PLAN, headers=admin)
    assert now.headers["etag"] == won.headers["etag"]
    assert now.json() | {"guidelines": won.json()["guidelines"]} == {
        "labels_per_item": 2,
        "adaptive": True,
        "gold_rule": "unanimous",
        "guidelines": won.json()["guidelines"],
        "calibration_share": 0.0,
        "escalated": [],
    }


def test_queue_next_serves_the_label_pages_queue_and_shares_its_holds(
    demo_engine, db, client, token
):
    run = get_run("demo-pcf", session=db)
    table = analyse_run(run, session=db).table
    queue = adjudication_queue(with_priority(item_index(run.dataset_id, session=db), table), ())
    items = {i.item_id: i for i in load_items(run.dataset_id, session=db)}
    grace, gus = token("grace@example.org", "annotator", "label"), token("gus@example.org")

    # The Label page holds the most doubtful item for Gail; Grace gets the next, Gus the one after.
    page = open_page(signed_in_app(db, "gail@example.org", "annotator"), "adjudicate")
    assert item_on_screen(page) == queue[0]
    held = client.post(NEXT, headers=grace, json={"run": "demo-pcf"}).json()
    assert held["item"]["item_id"] == queue[1]
    assert held["queue"] == len(queue) - 1  # Gail's item is in nobody else's queue
    shown = [c["id"] for c in held["item"]["candidates"]]
    assert shown == list(display_order(items[queue[1]], "grace@example.org"))
    assert "gold" not in held["item"]
    assert (
        client.post(NEXT, headers=gus, json={"run": "demo-pcf"}).json()["item"]["item_id"]
        == (queue[2])
    )
    again = client.post(NEXT, headers=grace, json={"run": "demo-pcf"}).json()
    assert again["item"]["item_id"] == queue[1]  # her hold stays hers

    # Labelled, the item leaves her queue; a skipped one comes last; without a run, file order.
    label = {"label_id": "g1", "item_id": queue[1], "answer": "cannot_tell"}
    client.post("/api/v1/datasets/demo/labels", headers=grace, json={"labels": [label]})
    skipping = {"run": "demo-pcf", "skip": [queue[3]]}
    assert client.post(NEXT, headers=grace, json=skipping).json()["item"]["item_id"] == queue[4]
    plain = client.post(NEXT, headers=token("gil@example.org", "annotator", "label")).json()
    taken = {queue[0], queue[1], queue[2], queue[4]}
    assert plain["item"]["item_id"] == next(key for key in items if key not in taken)

    unknown = client.post(NEXT, headers=grace, json={"skip": ["nope"]})
    assert unknown.status_code == 422
    assert "nope" in unknown.json()["detail"]
    other = client.put("/api/v1/datasets/other", headers=gus)
    assert other.status_code == 201
    foreign = client.post(
        "/api/v1/datasets/other/queue/next", headers=gus, json={"run": "demo-pcf"}
    )
    assert foreign.status_code == 422
    assert "another dataset" in foreign.json()["detail"]


def test_an_empty_queue_is_a_null_item(client, token):
    lead = token("lead@example.org")
    assert client.put("/api/v1/datasets/tiny", headers=lead).status_code == 201
    texts = [{"id": "a", "text": "yes"}, {"id": "b", "text": "no"}]
    item = {"item_id": "q1", "prompt": "Is it?", "candidates": texts}
    added = client.post("/api/v1/datasets/tiny/items", headers=lead, json={"items": [item]})
    assert added.json() == {"added": 1, "unchanged": 0}
    claimed = client.post("/api/v1/datasets/tiny/queue/next", headers=lead).json()
    assert claimed["item"]["item_id"] == "q1"
    label = {"label_id": "l", "item_id": "q1", "answer": "a"}
    client.post("/api/v1/datasets/tiny/labels", headers=lead, json={"labels": [label]})
    assert client.post("/api/v1/datasets/tiny/queue/next", headers=lead).json() == {
        "item": None,
        "queue": 0,
    }


def test_assigned_items_come_first_for_their_assignee_and_for_nobody_else(
    demo_engine, db, client, token
):
    lead, ann = token("lead@example.org"), token("ann@example.org", "annotator", "label")
    other = token("other@example.org", "annotator", "label")
    order = [i.item_id for i in load_items(1, session=db)]
    given = client.post(
        "/api/v1/datasets/demo/assignments",
        headers=lead,
        json={"to": "ann@example.org", "items": [order[7], order[3]]},
    ).json()
    assert given == {"to": "ann@example.org", "assigned": [order[3], order[7]], "removed": 0}
    first = client.post(
        "/api/v1/datasets/demo/assignments",
        headers=lead,
        json={"to": "ann@example.org", "first": 2},
    ).json()
    assert first["assigned"] == order[:2]  # in file order, nobody's yet
    served = {client.post(NEXT, headers=ann).json()["item"]["item_id"]}
    assert served <= {order[0], order[1], order[3], order[7]}
    assert client.post(NEXT, headers=other).json()["item"]["item_id"] == order[2]

    viewer = token("view@example.org", "viewer", "read")
    refused = client.post(
        "/api/v1/datasets/demo/assignments", headers=lead, json={"to": "view@example.org"}
    )
    assert refused.status_code == 422
    assert "no member who may label" in refused.json()["detail"]
    assert viewer  # made a member above
    taken = client.post(
        "/api/v1/datasets/demo/assignments",
        headers=lead,
        json={"to": "ann@example.org", "remove": True},
    ).json()
    assert taken == {"to": "ann@example.org", "assigned": [], "removed": 4}


def test_the_items_come_blind_to_a_token_that_may_not_see_results(demo_engine, client, token, db):
    dataset_id = get_run("demo-pcf", session=db).dataset_id
    gold = {item.item_id: item.gold for item in load_items(dataset_id, session=db)}
    assert any(gold.values())
    readers = {
        ("annotator", "label"): False,  # annotators label blind, as on the Adjudicate page
        ("annotator", "admin"): False,  # a wide scope is capped by the role
        ("reviewer", "read"): True,
        ("viewer", "read"): True,
    }
    for (role, scope), sees_gold in readers.items():
        headers = token(f"{role}-{scope}@example.org", role, scope)
        shown, cursor = {}, None
        while True:
            params = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
            page = client.get("/api/v1/datasets/demo/items", headers=headers, params=params)
            assert page.status_code == 200, page.text
            shown |= {item["item_id"]: item["gold"] for item in page.json()["items"]}
            if (cursor := page.json()["next_cursor"]) is None:
                break
        assert shown == (gold if sees_gold else dict.fromkeys(gold)), (role, scope)
