"""Who uses the app (AppTest's ``secrets`` and ``user``): the sign-in screen, strangers, roles."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pcf.store import get_member, save_member
from tests.app import APP, AUTH, id_token, signed_in_app

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


def test_the_one_providers_settings_tables_are_no_providers(engine):
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH | {"client_kwargs": {"prompt": "login"}}
    at.user = {"is_logged_in": False}
    at.run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in"]


def test_a_stranger_is_told_to_ask_an_admin_and_sees_no_data_nor_the_admins(db):
    signed_in_app(db, "adam@example.com", "admin")
    at = signed_in_app(db, "mallory@example.com")
    assert not at.exception
    assert page_titles(at) == ["No access yet"]
    assert any("Ask an admin of this server" in m.value for m in at.markdown)
    assert not any("adam@example.com" in m.value for m in at.markdown)
    assert not at.sidebar.selectbox
    assert [b.label for b in at.button] == ["Sign out"]


@pytest.mark.parametrize(
    ("settings", "claims", "why"),
    [
        ({}, {"email_verified": False}, "has not verified"),
        ({"allowed_issuers": ["https://id.example"]}, {"iss": "https://evil"}, "may not sign in"),
        ({"verified_claim": "xms_edov"}, {}, "is not true"),
        ({"allowed_issuers": "https://id.example"}, {}, "must be a list of issuer"),
    ],
    ids=["unverified", "other issuer", "claim named", "bad setting"],
)
def test_a_sign_in_the_provider_settings_do_not_accept_sees_why_and_no_data(
    db, settings, claims, why
):
    save_member("adam@example.com", "admin", session=db, added_by="test")
    db.commit()
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH | settings
    at.user = id_token("adam@example.com", **claims)
    at.run()
    assert not at.exception
    assert any(why in e.value for e in at.error)
    assert not at.sidebar.selectbox
    db.expire_all()
    assert get_member("adam@example.com", session=db).issuer is None


@pytest.mark.parametrize(
    ("role", "first_page", "members_page"),
    [("admin", "Overview", True), ("reviewer", "Overview", False), ("viewer", "Overview", False)],
)
def test_each_role_opens_on_its_first_page(db, role, first_page, members_page):
    at = signed_in_app(db, f"{role}@example.com", role)
    assert not at.exception
    assert page_titles(at)[0] == first_page
    assert any(f"{role}@example.com" in m.value and role in m.value for m in at.sidebar.markdown)
    if not members_page:  # nor the Import page, an admin's too
        for page in ("members", "imports"):
            with pytest.raises(ValueError, match="navigation page"):
                at.switch_page(f"pages/{page}.py").run()


def test_an_annotator_lands_on_adjudicate(db):
    at = signed_in_app(db, "alice@example.com", "annotator")
    assert not at.exception
    assert page_titles(at) == ["Adjudicate"]
    for page in (
        "overview",
        "review",
        "compare",
        "runs",
        "weights",
        "report",
        "members",
        "imports",
    ):
        with pytest.raises(ValueError, match="navigation page"):
            at.switch_page(f"pages/{page}.py").run()


def test_a_provider_without_an_email_claim_gets_no_access(demo_engine):
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": True, "sub": "12345"}
    at.run()
    assert not at.exception
    assert any("no usable email address" in e.value for e in at.error)
    assert not at.sidebar.selectbox
