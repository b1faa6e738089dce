"""Members: roles given and taken by admins only, never the last admin, the local person; a
sign-in counts only with a verified email, and binds the member to that provider account."""

from __future__ import annotations

import re

import pytest
from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Role, operator
from pcf.labelling.audit import audit_log
from pcf.labelling.membership import (
    ProviderTrust,
    SignInRefusedError,
    add_member,
    identify,
    local_actor,
    members,
    provider_trust,
    remove_member,
    set_local_name,
)
from pcf.store import get_member, save_member
from tests.factories import enrol

ADAM = Actor("adam@example.com", Role.ADMIN)
ISSUER = "https://accounts.example.com"


def claims(email: str, sub: str | None = None, iss: str = ISSUER, **more: object) -> dict:
    """An ID token's claims for ``email`` (its own subject by default), verified unless
    ``more`` says otherwise."""
    return {"iss": iss, "sub": sub or f"sub-{email}", "email": email, "email_verified": True} | more


@pytest.fixture
def adam(session: Session) -> Actor:
    """The first admin, added by the operator (``pcf members add``)."""
    add_member(ADAM.identity, "admin", session=session, actor=operator())
    return ADAM


def test_an_admin_adds_members_and_each_signs_in_with_their_role(session: Session, adam: Actor):
    add_member("Alice@Example.com", "annotator", session=session, actor=adam)
    add_member("rita@example.com", "reviewer", session=session, actor=adam)
    alice = claims("alice@example.com")
    assert identify(alice, session=session) == Actor("alice@example.com", Role.ANNOTATOR)
    assert identify(alice | {"email": "ALICE@example.com"}, session=session) == Actor(
        "alice@example.com", Role.ANNOTATOR
    )
    assert identify(claims("rita@example.com"), session=session).role is Role.REVIEWER
    assert identify(claims("mallory@example.com"), session=session) is None
    add_member("alice@example.com", "reviewer", session=session, actor=adam)
    assert identify(alice, session=session).role is Role.REVIEWER
    assert [e["action"] for e in audit_log(session=session, actor=adam)] == [
        "member_role_changed",
        *["member_bound"] * 2,  # alice's and rita's first sign-ins
        *["member_added"] * 3,
    ]


@pytest.mark.parametrize("role", ["reviewer", "annotator", "viewer"])
def test_only_admins_manage_members(session: Session, role: str):
    actor = Actor("someone@example.com", Role(role))
    enrol(session, actor)
    with pytest.raises(AccessDeniedError, match="may not manage members"):
        add_member("carol@example.com", "admin", session=session, actor=actor)
    with pytest.raises(AccessDeniedError):
        remove_member("carol@example.com", session=session, actor=actor)
    with pytest.raises(AccessDeniedError):
        members(session=session, actor=actor)
    assert get_member("carol@example.com", session=session) is None


def test_an_admin_removed_or_demoted_meanwhile_changes_nothing(session: Session, adam: Actor):
    eve = Actor("eve@example.com", Role.ADMIN)
    add_member(eve.identity, "admin", session=session, actor=adam)
    add_member(eve.identity, "viewer", session=session, actor=adam)  # eve's page still says admin
    with pytest.raises(AccessDeniedError, match=r"eve@example\.com is viewer"):
        add_member("carol@example.com", "admin", session=session, actor=eve)
    remove_member(eve.identity, session=session, actor=adam)
    with pytest.raises(AccessDeniedError, match="no longer a member"):
        remove_member(adam.identity, session=session, actor=eve)
    assert get_member("carol@example.com", session=session) is None
    assert get_member(adam.identity, session=session).role == "admin"


@pytest.mark.parametrize(
    ("email", "role", "message"),
    [
        ("carol", "annotator", "not an email address"),
        ("carol@example.com", "owner", "unknown role"),
        ("", "viewer", "not an email address"),
        ("carol\x00@example.com", "viewer", "not an email address"),
        ("carol@exam\x00ple.com", "viewer", "not an email address"),
        ("carol@example.com\u200b", "viewer", "invisible character (U+200B ZERO WIDTH SPACE)"),
        ("\u212aarol@example.com", "viewer", "U+212A KELVIN SIGN, which reads as 'k'"),
    ],
)
def test_bad_members_are_refused(session: Session, adam: Actor, email: str, role: str, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        add_member(email, role, session=session, actor=adam)
    assert [m.email for m in members(session=session, actor=adam)] == [adam.identity]


def test_the_last_signed_in_admin_stays_though_the_local_person_is_admin(
    session: Session, adam: Actor
):
    set_local_name("Ada", session=session)
    with pytest.raises(ValueError, match="only admin"):
        remove_member("adam@example.com", session=session, actor=adam)
    with pytest.raises(ValueError, match="only admin"):
        add_member("adam@example.com", "viewer", session=session, actor=adam)
    add_member("eve@example.com", "admin", session=session, actor=adam)
    remove_member("adam@example.com", session=session, actor=adam)
    assert [m.email for m in members(session=session, actor=operator())] == ["eve@example.com"]


def test_the_local_name_is_given_once_and_is_an_admin(session: Session):
    assert local_actor(session=session) is None
    with pytest.raises(ValueError, match="1 to 80 characters"):
        set_local_name("  ", session=session)
    set_local_name(" ada@example.com ", session=session)
    assert local_actor(session=session) == Actor("ada@example.com", Role.ADMIN)
    with pytest.raises(ValueError, match="set already"):
        set_local_name("annie1", session=session)
    # a local name is no sign-in identity, even one that reads as an address
    assert identify(claims("ada@example.com"), session=session) is None
    assert members(session=session, actor=operator()) == []


def test_a_lookalike_address_takes_no_member_and_the_member_signs_in_as_stored(
    session: Session, adam: Actor
):
    """``str.lower()`` turns the KELVIN SIGN (U+212A) into ``k``: compared so, a verified
    ``\u212aate@...`` account took the unbound admin ``kate@...``."""
    add_member("kate@example.com", "admin", session=session, actor=adam)
    lookalike = claims("\u212aate@example.com", sub="kelvin")
    with pytest.raises(SignInRefusedError, match=re.escape("U+212A KELVIN SIGN")):
        identify(lookalike, session=session)
    kate = get_member("kate@example.com", session=session)
    assert (kate.role, kate.issuer, kate.subject) == ("admin", None, None)
    assert get_member("\u212aate@example.com", session=session) is None
    kate_actor = Actor("kate@example.com", Role.ADMIN)
    assert identify(claims("KATE@Example.com", sub="kate"), session=session) == kate_actor
    assert (kate.issuer, kate.subject) == (ISSUER, "kate")
    bound = [e for e in audit_log(session=session, actor=adam) if e["action"] == "member_bound"]
    assert [(e["actor"], e["target"]) for e in bound] == [("kate@example.com",) * 2]


def test_a_member_stored_before_the_rule_in_a_spelling_it_refuses_is_no_one_elses(
    session: Session, adam: Actor
):
    """An older version lowered what an admin typed: a full-width letter stayed one. That row
    keeps its spelling (no migration) and is reached by it alone: an admin removes it."""
    save_member("\uff4bate@example.com", "admin", session=session, added_by="an older version")
    add_member("kate@example.com", "viewer", session=session, actor=adam)
    assert identify(claims("kate@example.com"), session=session).role is Role.VIEWER
    with pytest.raises(SignInRefusedError, match="FULLWIDTH LATIN SMALL LETTER K"):
        identify(claims("\uff4bate@example.com"), session=session)
    remove_member("\uff4bate@example.com", session=session, actor=adam)
    assert [m.email for m in members(session=session, actor=adam)] == [
        adam.identity,
        "kate@example.com",
    ]


def test_a_local_name_outside_the_rule_still_acts_as_itself(session: Session):
    """A local name is no address: "Émile" (a capital the rule would refuse in an address) is
    found by its own spelling for every write."""
    emile = set_local_name("Émile", session=session)
    add_member("kate@example.com", "viewer", session=session, actor=emile)
    assert [m.email for m in members(session=session, actor=emile)] == ["kate@example.com"]


@pytest.mark.parametrize(
    "unverified",
    [{"email_verified": False}, {"email_verified": "true"}, {"email_verified": None}, {}],
    ids=["false", "a string", "null", "missing"],
)
def test_an_unverified_email_signs_in_as_nobody(session: Session, adam: Actor, unverified):
    token = claims(adam.identity, sub="attacker") | unverified
    if not unverified:
        del token["email_verified"]
    with pytest.raises(SignInRefusedError, match=r"has not verified adam@example\.com"):
        identify(token, session=session)
    assert get_member(adam.identity, session=session).issuer is None  # nothing bound


def test_the_first_sign_in_binds_the_account_and_no_other_signs_in_as_the_member(
    session: Session, adam: Actor
):
    assert identify(claims(adam.identity, sub="adam-1"), session=session) == adam
    member = get_member(adam.identity, session=session)
    assert (member.issuer, member.subject) == (ISSUER, "adam-1")
    assert identify(claims("ADAM@example.com", sub="adam-1"), session=session) == adam
    for other in (
        claims(adam.identity, sub="adam-2"),  # another account at the same provider
        claims(adam.identity, sub="adam-1", iss="https://evil.example"),  # another provider
    ):
        with pytest.raises(SignInRefusedError, match="another account"):
            identify(other, session=session)
    # removed and added again: the next sign-in binds anew
    add_member("eve@example.com", "admin", session=session, actor=adam)
    remove_member(adam.identity, session=session, actor=operator())
    add_member(adam.identity, "admin", session=session, actor=operator())
    assert identify(claims(adam.identity, sub="adam-2"), session=session) == adam


def test_a_provider_limited_to_issuers_and_trusting_a_named_claim(session: Session, adam: Actor):
    tenant = "https://login.microsoftonline.com/our-tenant/v2.0"
    trust = provider_trust(
        {"client_id": "x", "verified_claim": "xms_edov", "allowed_issuers": [tenant]}, "[auth.ms]"
    )
    assert trust == ProviderTrust("xms_edov", frozenset({tenant}))
    token = claims(adam.identity, iss="https://login.microsoftonline.com/their-tenant/v2.0")
    with pytest.raises(SignInRefusedError, match=r"their-tenant/v2\.0 may not sign in here"):
        identify(token | {"xms_edov": True}, session=session, trust=trust)
    ours = claims(adam.identity, iss=tenant)  # email_verified: true, but not the claim named
    with pytest.raises(SignInRefusedError, match=r"xms_edov is not true"):
        identify(ours, session=session, trust=trust)
    assert identify(ours | {"xms_edov": True}, session=session, trust=trust) == adam


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"verified_claim": ""}, "verified_claim"),
        ({"allowed_issuers": "https://a"}, "allowed_issuers"),
    ],
)
def test_bad_provider_settings_name_the_section_and_field(settings, field):
    with pytest.raises(ValueError, match=rf"^\[auth.google\]: {field}"):
        provider_trust(settings, "[auth.google]")


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (claims("adam@example.com\x00.evil.example"), "no usable email"),
        (claims("adam@exa\x00mple.com"), "no usable email"),
        (claims("adam@example.com") | {"sub": ""}, "no issuer or subject"),
        ({"email": "adam@example.com", "email_verified": True, "sub": "x"}, "no issuer"),
        ({"iss": ISSUER, "sub": "x", "email_verified": True}, "no usable email"),
    ],
)
def test_a_token_without_a_clean_email_issuer_and_subject_is_refused(
    session: Session, adam: Actor, token: dict, why: str
):
    with pytest.raises(SignInRefusedError, match=why):
        identify(token, session=session)
