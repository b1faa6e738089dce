"""`pcf tokens`: a token is printed once and stored only as its SHA-256; its rights are its
scope capped by its member's role; it expires and is revoked."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from pcf.access import AccessDeniedError, Permission
from pcf.cli import app
from pcf.labelling.tokens import TokenError, parse_duration, token_user
from pcf.store import save_member
from tests.factories import pcf

runner = CliRunner()
pytestmark = pytest.mark.db


def test_a_token_is_shown_once_stored_hashed_listed_and_revoked(session):
    save_member("ann@example.org", "annotator", session=session, added_by="test")
    session.commit()
    made = json.loads(pcf("tokens", "create", "ann@example.org", "--scope", "run", "--json"))
    secret = made["token"]
    assert secret.startswith("pcf_")
    assert len(secret) > 40
    stored = session.execute(text("SELECT digest, prefix FROM api_token")).one()
    assert stored.digest == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.startswith(stored.prefix)
    assert len(stored.prefix) < len(secret) // 3
    listed = pcf("tokens", "list")
    assert secret not in listed
    assert stored.digest not in listed
    user = token_user(secret, session=session)
    assert user.require(Permission.LABEL).identity == "ann@example.org"
    with pytest.raises(AccessDeniedError, match="annotator"):
        user.require(Permission.RUN)  # the scope allows it, the role does not
    pcf("tokens", "revoke", str(made["id"]))
    session.expire_all()
    with pytest.raises(TokenError, match="revoked"):
        token_user(secret, session=session)
    again = runner.invoke(app, ["tokens", "revoke", str(made["id"])])
    assert again.exit_code == 2


def test_refusals_name_what_to_do(session):
    refused = runner.invoke(app, ["tokens", "create", "nobody@example.org", "--scope", "read"])
    assert refused.exit_code == 2
    assert "not a member" in refused.output
    save_member("v@example.org", "viewer", session=session, added_by="test")
    session.commit()
    for scope, expires in (("write", "30d"), ("read", "soon"), ("read", "0d")):
        done = runner.invoke(
            app, ["tokens", "create", "v@example.org", "--scope", scope, "--expires", expires]
        )
        assert done.exit_code == 2, done.output
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("15m") == timedelta(minutes=15)
