"""Every route against every role and scope: a token may what its scope allows capped by its
member's role, read again on each request; revoked, expired and removed members' tokens are
refused; past its rate a token waits (429 + Retry-After)."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta

import pytest
from sqlmodel import select

from pcf.access import GRANTS, Permission, Role
from pcf.labelling.tokens import SCOPE_GRANTS, Scope
from pcf.store import ApiToken, save_member, utc_now

RUN = {"dataset": "demo", "name": "matrix", "k": 1, "limit": 1}
HOOK = {"url": "https://hooks.invalid/pcf", "events": ["gold.changed"]}
"""A webhook for an event the matrix never causes (no resolution): nothing is ever sent."""
ROUTES = [
    ("GET", "/me", None, None),
    ("GET", "/datasets", None, None),
    ("GET", "/datasets/demo/items", None, None),
    ("PUT", "/datasets/pushed", Permission.IMPORT, {"seed": 0}),
    ("POST", "/datasets/demo/items", Permission.IMPORT, {"items": []}),
    ("POST", "/runs/estimate", Permission.RUN, RUN),
    ("POST", "/runs", Permission.RUN, RUN),
    ("GET", "/runs/demo-pcf", Permission.SEE_RESULTS, None),
    ("GET", "/runs/demo-pcf/decisions", Permission.SEE_RESULTS, None),
    ("GET", "/runs/demo-pcf/judgments", Permission.SEE_RESULTS, None),
    ("POST", "/runs/demo-pcf/check", Permission.SEE_RESULTS, {"max_order_unstable": 1}),
    ("POST", "/runs/demo-pcf/cancel", Permission.RUN, None),
    ("POST", "/runs/demo-pcf/escalate", Permission.SEE_RESULTS, {}),
    ("POST", "/runs/demo-pcf/escalate", Permission.RESOLVE, {"queue": True}),
    ("GET", "/runs/demo-pcf/report", Permission.SEE_RESULTS, None),
    ("POST", "/datasets/demo/labels", Permission.LABEL, None),
    ("GET", "/datasets/demo/labels", Permission.SEE_RESULTS, None),
    ("GET", "/datasets/demo/gold", Permission.SEE_RESULTS, None),
    ("GET", "/datasets/demo/plan", None, None),
    ("PUT", "/datasets/demo/plan", Permission.PLAN_LABELLING, {"labels_per_item": 1}),
    ("POST", "/datasets/demo/queue/next", Permission.LABEL, {"run": "demo-pcf"}),
    ("POST", "/datasets/demo/assignments", Permission.ASSIGN, None),
    ("POST", "/webhooks", Permission.MANAGE_WEBHOOKS, HOOK),
    ("GET", "/webhooks", Permission.MANAGE_WEBHOOKS, None),
    ("GET", "/webhooks/1", Permission.MANAGE_WEBHOOKS, None),
    ("GET", "/webhooks/1/deliveries", Permission.MANAGE_WEBHOOKS, None),
    ("POST", "/webhooks/1/deliveries/1/redeliver", Permission.MANAGE_WEBHOOKS, None),
    ("DELETE", "/webhooks/2", Permission.MANAGE_WEBHOOKS, None),
]
pytestmark = pytest.mark.db


def test_each_route_allows_the_scope_capped_by_the_role_and_nothing_more(
    demo_engine, client, token, monkeypatch
):
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "hooks.invalid")
    for role, scope in itertools.product(Role, Scope):
        email = f"{role.value}-{scope.value}@example.org"
        headers = token(email, role.value, scope.value)
        rights = SCOPE_GRANTS[scope] & GRANTS[role]
        label = {"label_id": email, "item_id": "demo-040", "answer": "none_correct"}
        bodies = {"/labels": {"labels": [label]}, "/assignments": {"to": email, "first": 1}}
        extras = {"/runs": {"Idempotency-Key": email}, "/plan": {"If-Match": '"stale"'}}
        for method, path, permission, given in ROUTES:
            ending = path[path.rfind("/") :]
            body = bodies.get(ending, given) if method == "POST" else given
            extra = extras.get(ending, {})
            answer = client.request(method, f"/api/v1{path}", headers=headers | extra, json=body)
            allowed = permission is None or permission in rights
            where = f"{role} {scope} {method} {path}: {answer.status_code} {answer.text[:300]}"
            if allowed:
                assert answer.status_code < 500, where
                assert answer.status_code not in (401, 403), where
            else:
                assert answer.status_code == 403, where
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["detail"]
        assert client.request("GET", "/api/v1/me", headers=headers).json()["role"] == role
    wait_for_run(client, token("admin@example.org"))


def test_the_matrix_holds_every_route_of_the_api(client):
    """A route added without a row above fails here (``/health`` needs no token: below)."""
    documented = {
        (method.upper(), path)
        for path, methods in client.get("/api/v1/openapi.json").json()["paths"].items()
        for method in methods
    }

    def template(path: str) -> str:
        path = re.sub(r"^/(runs|datasets)/(?!estimate$)[^/]+", r"/\1/{name}", path)
        path = re.sub(r"^/webhooks/\d+", "/webhooks/{webhook_id}", path)
        return re.sub(r"/deliveries/\d+", "/deliveries/{delivery_id}", path)

    matrix = {(method, template(path)) for method, path, _, _ in ROUTES}
    assert documented - {("GET", "/health")} == matrix


def wait_for_run(client, headers) -> None:
    """Wait until the run the matrix started is done (its thread writes the test's database)."""
    for _ in range(10_000):
        status = client.get("/api/v1/runs/matrix", headers=headers).json()["status"]
        if status not in ("starting", "pending", "running"):
            return
    pytest.fail("the matrix's run did not finish")


def test_no_token_an_unknown_one_a_revoked_an_expired_and_a_removed_members_are_401(
    client, token, new_session
):
    assert client.get("/api/v1/health").status_code == 200  # needs no token
    refused = client.get("/api/v1/me")
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer pcf_nope"}).status_code == 401
    revoked, expired, removed = (token(f"{n}@example.org") for n in ("r", "e", "m"))
    for headers in (revoked, expired, removed):
        assert client.get("/api/v1/me", headers=headers).status_code == 200
    assert runner_ok("tokens", "revoke", "1")
    with new_session() as session:
        row = session.exec(select(ApiToken).where(ApiToken.email == "e@example.org")).one()
        row.expires_at = utc_now() - timedelta(seconds=1)
        session.add(row)
        session.commit()
    assert runner_ok("members", "remove", "m@example.org")
    for headers, why in ((revoked, "revoked"), (expired, "expired"), (removed, "no longer")):
        answer = client.get("/api/v1/me", headers=headers)
        assert answer.status_code == 401
        assert why in answer.json()["detail"]


def test_a_demoted_member_is_refused_at_their_next_request(client, token, new_session):
    headers = token("boss@example.org", "admin", "admin")
    assert client.put("/api/v1/datasets/one", headers=headers).status_code == 201
    with new_session() as session:
        save_member("boss@example.org", "viewer", session=session, added_by="test")
        session.commit()
    refused = client.put("/api/v1/datasets/two", headers=headers)
    assert refused.status_code == 403
    assert "viewer" in refused.json()["detail"]


def test_past_its_rate_a_token_gets_429_with_retry_after(client, token, monkeypatch):
    monkeypatch.setenv("PCF_API_RATE", "0.1")  # one request, then one per 10 s
    headers, other = token("fast@example.org"), token("other@example.org")
    assert client.get("/api/v1/me", headers=headers).status_code == 200
    refused = client.get("/api/v1/me", headers=headers)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 10
    assert refused.headers["content-type"] == "application/problem+json"
    assert client.get("/api/v1/me", headers=other).status_code == 200  # per token


def runner_ok(*args: str) -> bool:
    """Whether ``pcf ARGS`` succeeds."""
    from typer.testing import CliRunner

    from pcf.cli import app

    done = CliRunner().invoke(app, list(args))
    assert done.exit_code == 0, done.output
    return True
