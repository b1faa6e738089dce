"""The Members page: an admin gives and takes roles; the audit log shows who did it."""

from __future__ import annotations

import pandas as pd
from sqlmodel import Session

from pcf.store import get_member
from tests.app import open_page, signed_in_app


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
