"""The Members page: an admin gives and takes roles, creates API tokens (each secret shown
once) and revokes them; the audit log shows who did it."""

from __future__ import annotations

import pandas as pd
import pytest
from sqlmodel import Session

from pcf.access import operator
from pcf.labelling.tokens import Scope, TokenError, token_user, tokens
from pcf.store import get_member, save_member
from tests.app import open_page, signed_in_app


def new_session(db: Session) -> Session:
    """Another session on the test's database (it sees what the page committed)."""
    return Session(db.get_bind())


def test_an_admin_adds_changes_and_removes_a_member(db: Session):
    at = open_page(signed_in_app(db, "adam@example.com", "admin"), "members")
    assert not at.exception
    at.text_input[0].set_value("Carol@Example.com")
    at.button[0].click().run()
    assert [s.value for s in at.success] == ["`carol@example.com` is now annotator\\."]
    assert get_member("carol@example.com", session=db).role == "annotator"
    table = next(d.value for d in at.dataframe if "signs in at" in d.value.columns)
    bound = dict(zip(table["email"], table["signs in at"], strict=True))
    assert bound["adam@example.com"] == "https://id.example"  # bound at his first sign-in
    assert pd.isna(bound["carol@example.com"])  # until hers

    at.text_input[0].set_value("carol")
    at.button[0].click().run()
    assert any("not an email address" in e.value for e in at.error)

    remove = next(s for s in at.selectbox if s.label == "Member")
    remove.set_value("carol@example.com")
    next(b for b in at.button if b.label == "Remove").click().run()
    db.expire_all()
    assert get_member("carol@example.com", session=db) is None
    log = next(d.value for d in at.dataframe if "action" in d.value.columns)
    assert list(log["action"])[:3] == ["member_removed", "member_added", "signed_in"]
    assert set(log["actor"][:2]) == {"adam@example.com"}


def test_an_admin_creates_a_token_seen_once_lists_and_revokes_it(db: Session):
    at = open_page(signed_in_app(db, "adam@example.com", "admin"), "members")
    save_member("carol@example.com", "annotator", session=db, added_by="test")
    db.commit()
    at.run()
    next(s for s in at.selectbox if s.label == "For member").set_value("carol@example.com")
    next(s for s in at.selectbox if s.label == "Scope").set_value(Scope.LABEL)
    next(t for t in at.text_input if t.label == "Expires after").set_value("forever")
    next(b for b in at.button if b.label == "Create token").click().run()
    assert any("no duration" in e.value for e in at.error)
    assert tokens(session=db, actor=operator()) == []

    next(s for s in at.selectbox if s.label == "For member").set_value("carol@example.com")
    next(s for s in at.selectbox if s.label == "Scope").set_value(Scope.LABEL)
    next(t for t in at.text_input if t.label == "Expires after").set_value("30d")
    next(b for b in at.button if b.label == "Create token").click().run()
    (secret,) = [c.value for c in at.code]
    with new_session(db) as s:
        user = token_user(secret, session=s)  # the secret shown is the token stored
    assert (user.actor.identity, user.scope) == ("carol@example.com", Scope.LABEL)
    (made,) = tokens(session=db, actor=operator())
    assert made.expires_at is not None
    assert secret not in {made.prefix, made.digest}
    assert secret.startswith(made.prefix)
    listed = next(d.value for d in at.dataframe if "scope" in d.value.columns)
    assert list(listed["member"]) == ["carol@example.com"]
    assert secret not in listed.to_string()
    at.run()
    assert not at.code  # shown once

    revoke = next(s for s in at.selectbox if s.label == "Token")
    revoke.set_value(revoke.options[0])
    next(b for b in at.button if b.label == "Revoke").click().run()
    with new_session(db) as s, pytest.raises(TokenError, match="revoked"):
        token_user(secret, session=s)
    assert not next(s for s in at.selectbox if s.label == "Token").options
    log = next(d.value for d in at.dataframe if "action" in d.value.columns)
    assert list(log["action"])[:2] == ["token_revoked", "token_created"]
