"""Members: who may sign in and with which role; the local person of local mode."""

from __future__ import annotations

import re

from sqlmodel import Session

from pcf.access import Actor, Permission, Role
from pcf.store.models import Member
from pcf.store.queries import (
    add_audit_event,
    delete_member,
    get_member,
    list_members,
    local_member,
    save_member,
)

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
LOCAL_NAME_MAX = 80


def actor_of(member: Member) -> Actor:
    """The actor a member acts as."""
    return Actor(member.email, Role(member.role))


def identify(email: str, *, session: Session) -> Actor | None:
    """The actor signed in as ``email`` (the provider's email claim), or None for a stranger."""
    member = get_member(email, session=session)
    return actor_of(member) if member is not None and not member.local else None


def local_actor(*, session: Session) -> Actor | None:
    """The local person of local mode (an admin), or None until they gave their name."""
    member = local_member(session=session)
    return Actor(member.email, Role.ADMIN) if member is not None else None


def set_local_name(name: str, *, session: Session) -> Actor:
    """Record the local person's name, once: it is the annotator of their labels.

    Raises:
        ValueError: an empty, overlong or NUL-holding name, or a name already given.
    """
    name = name.strip()
    if not name or len(name) > LOCAL_NAME_MAX or "\x00" in name:
        raise ValueError(f"give a name of 1 to {LOCAL_NAME_MAX} characters")
    if local_member(session=session) is not None:
        raise ValueError("the local name is set already")
    save_member(name, Role.ADMIN, session=session, added_by="local mode", local=True)
    add_audit_event("local_name_set", session=session, actor=name, target=name)
    return Actor(name, Role.ADMIN)


def members(*, session: Session, actor: Actor) -> list[Member]:
    """Every signed-in member (not the local person), by email."""
    actor.require(Permission.MANAGE_MEMBERS)
    return [m for m in list_members(session=session) if not m.local]


def add_member(email: str, role: str, *, session: Session, actor: Actor) -> Member:
    """Give ``email`` a role: a new member, or another role for one who has one.

    Raises:
        AccessDeniedError: ``actor`` may not manage members.
        ValueError: not an email address, an unknown role, or the last admin made another role.
    """
    actor.require(Permission.MANAGE_MEMBERS)
    email = email.strip().lower()
    if not EMAIL.fullmatch(email):
        raise ValueError(f"{email!r} is not an email address")
    if role not in set(Role):
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(Role)}")
    existing = get_member(email, session=session)
    if existing is not None and existing.role == Role.ADMIN and role != Role.ADMIN:
        _keep_an_admin(email, session=session)
    member = save_member(email, role, session=session, added_by=actor.identity)
    action = "member_added" if existing is None else "member_role_changed"
    details = {"role": role} | ({"was": existing.role} if existing is not None else {})
    add_audit_event(action, session=session, actor=actor.identity, target=email, details=details)
    return member


def remove_member(email: str, *, session: Session, actor: Actor) -> None:
    """Take ``email``'s access away; the labels they saved stay.

    Raises:
        AccessDeniedError: ``actor`` may not manage members.
        ValueError: no such member, or the last admin.
    """
    actor.require(Permission.MANAGE_MEMBERS)
    member = get_member(email.strip(), session=session)
    if member is None or member.local:
        raise ValueError(f"{email!r} is not a member")
    if member.role == Role.ADMIN:
        _keep_an_admin(member.email, session=session)
    delete_member(member.email, session=session)
    add_audit_event(
        "member_removed",
        session=session,
        actor=actor.identity,
        target=member.email,
        details={"role": member.role},
    )


def _keep_an_admin(email: str, *, session: Session) -> None:
    admins = [m.email for m in list_members(session=session) if m.role == Role.ADMIN]
    if admins == [email]:
        raise ValueError(f"{email} is the only admin: make another member admin first")


def admin_contacts(*, session: Session) -> list[str]:
    """The admins' emails: whom a stranger asks for access."""
    return [m.email for m in list_members(session=session) if m.role == Role.ADMIN and not m.local]


def record_sign_in(actor: Actor, *, session: Session) -> None:
    """Note in the audit log that ``actor`` signed in (once per browser session)."""
    add_audit_event(
        "signed_in", session=session, actor=actor.identity, details={"role": actor.role}
    )
