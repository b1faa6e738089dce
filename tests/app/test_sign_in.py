"""Who uses the app (AppTest's ``secrets`` and ``user``): the sign-in screen, strangers, roles."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app import APP, AUTH, signed_in_app

EXAMPLE = Path(__file__).resolve().parents[2] / ".streamlit" / "secrets.example.toml"


def page_titles(at: AppTest) -> list[str]:
    return [t.value for t in at.title]


def test_nobody_signed_in_sees_only_the_sign_in_buttons_of_the_example_providers(engine):
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for provider in ("google", "microsoft"):
        assert {"client_id", "client_secret", "server_metadata_url"} <= example["auth"][
            provider
        ].keys()
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = example["auth"]
    at.user = {"is_logged_in": False}
    at.run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in with google", "Sign in with microsoft"]
    assert not at.sidebar.selectbox


def test_a_stranger_sees_whom_to_ask_and_no_data(db):
    signed_in_app(db, "adam@example.com", "admin")
    at = signed_in_app(db, "mallory@example.com")
    assert not at.exception
    assert page_titles(at) == ["No access yet"]
    assert any("adam@example.com" in m.value for m in at.markdown)
    assert not at.sidebar.selectbox
    assert [b.label for b in at.button] == ["Sign out"]


@pytest.mark.parametrize(
    ("role", "first_page", "members_page"),
    [("admin", "Overview", True), ("reviewer", "Overview", False), ("viewer", "Overview", False)],
)
def test_each_role_opens_on_its_first_page(db, role, first_page, members_page):
    at = signed_in_app(db, f"{role}@example.com", role)
    assert not at.exception
    assert page_titles(at)[0] == first_page
    assert any(f"{role}@example.com" in m.value and role in m.value for m in at.sidebar.markdown)
    if not members_page:
        with pytest.raises(ValueError, match="navigation page"):
            at.switch_page("pages/members.py").run()


def test_an_annotator_lands_on_adjudicate(db):
    at = signed_in_app(db, "alice@example.com", "annotator")
    assert not at.exception
    assert page_titles(at) == ["Adjudicate"]
    for page in ("overview", "review", "compare", "runs", "weights", "report", "members"):
        with pytest.raises(ValueError, match="navigation page"):
            at.switch_page(f"pages/{page}.py").run()


def test_a_provider_without_an_email_claim_gets_no_access(demo_engine):
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": True, "sub": "12345"}
    at.run()
    assert not at.exception
    assert any("no email address" in e.value for e in at.error)
    assert not at.sidebar.selectbox
