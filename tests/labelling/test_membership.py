"""Members: roles given and taken by admins only, never the last admin, the local person."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Role
from pcf.labelling.audit import audit_log
from pcf.labelling.membership import (
    add_member,
    admin_contacts,
    identify,
    local_actor,
    members,
    remove_member,
    set_local_name,
)

ADAM = Actor("adam@example.com", Role.ADMIN)


def test_an_admin_adds_members_and_each_signs_in_with_their_role(session: Session):
    add_member("Alice@Example.com", "annotator", session=session, actor=ADAM)
    add_member("rita@example.com", "reviewer", session=session, actor=ADAM)
    assert identify("alice@example.com", session=session) == Actor(
        "alice@example.com", Role.ANNOTATOR
    )
    assert identify("ALICE@example.com", session=session).role is Role.ANNOTATOR
    assert identify("rita@example.com", session=session).role is Role.REVIEWER
    assert identify("mallory@example.com", session=session) is None
    add_member("alice@example.com", "reviewer", session=session, actor=ADAM)
    assert identify("alice@example.com", session=session).role is Role.REVIEWER
    assert [e["action"] for e in audit_log(session=session, actor=ADAM)] == [
        "member_role_changed",
        "member_added",
        "member_added",
    ]


@pytest.mark.parametrize("role", ["reviewer", "annotator", "viewer"])
def test_only_admins_manage_members(session: Session, role: str):
    actor = Actor("someone@example.com", Role(role))
    with pytest.raises(AccessDeniedError, match="may not manage members"):
        add_member("carol@example.com", "admin", session=session, actor=actor)
    with pytest.raises(AccessDeniedError):
        remove_member("carol@example.com", session=session, actor=actor)
    with pytest.raises(AccessDeniedError):
        members(session=session, actor=actor)
    assert identify("carol@example.com", session=session) is None


@pytest.mark.parametrize(
    ("email", "role", "message"),
    [
        ("carol", "annotator", "not an email address"),
        ("carol@example.com", "owner", "unknown role"),
        ("", "viewer", "not an email address"),
    ],
)
def test_bad_members_are_refused(session: Session, email: str, role: str, message: str):
    with pytest.raises(ValueError, match=message):
        add_member(email, role, session=session, actor=ADAM)


def test_the_last_admin_stays(session: Session):
    add_member("adam@example.com", "admin", session=session, actor=ADAM)
    with pytest.raises(ValueError, match="only admin"):
        remove_member("adam@example.com", session=session, actor=ADAM)
    with pytest.raises(ValueError, match="only admin"):
        add_member("adam@example.com", "viewer", session=session, actor=ADAM)
    add_member("eve@example.com", "admin", session=session, actor=ADAM)
    remove_member("adam@example.com", session=session, actor=ADAM)
    assert admin_contacts(session=session) == ["eve@example.com"]


def test_the_local_name_is_given_once_and_is_an_admin(session: Session):
    assert local_actor(session=session) is None
    with pytest.raises(ValueError, match="1 to 80 characters"):
        set_local_name("  ", session=session)
    set_local_name(" Ada ", session=session)
    assert local_actor(session=session) == Actor("Ada", Role.ADMIN)
    with pytest.raises(ValueError, match="set already"):
        set_local_name("annie1", session=session)
    assert identify("Ada", session=session) is None  # a local name is no sign-in identity
    assert members(session=session, actor=ADAM) == []
