"""Members: who may sign in and with which role; the local person of local mode."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlmodel import Session

from pcf.access import Actor, Permission, Role, authorize
from pcf.identities import IdentityError, identity_key
from pcf.store import (
    Member,
    add_audit_event,
    bind_member,
    delete_member,
    get_member,
    list_members,
    local_member,
    save_member,
)

_PART = r"[^@\s\x00-\x1f\x7f]+"
EMAIL = re.compile(rf"{_PART}@{_PART}\.{_PART}")
LOCAL_NAME_MAX = 80


@dataclass(frozen=True)
class ProviderTrust:
    """What a sign-in provider's ID token must show: ``verified_claim`` ``true`` for the email
    to count (e.g. Microsoft Entra's ``xms_edov``), and an issuer among ``allowed_issuers``
    (empty: any; for multi-tenant providers, list your tenants' issuers)."""

    verified_claim: str = "email_verified"
    allowed_issuers: frozenset[str] = frozenset()


def provider_trust(settings: Mapping[str, object], where: str) -> ProviderTrust:
    """The :class:`ProviderTrust` of a provider's settings (other keys are not ours).

    Raises:
        ValueError: a setting of the wrong type, naming ``where`` and the field.
    """
    claim = settings.get("verified_claim", ProviderTrust.verified_claim)
    issuers = settings.get("allowed_issuers", [])
    if not isinstance(claim, str) or not claim:
        raise ValueError(f"{where}: verified_claim must be a claim's name, e.g. email_verified")
    if not isinstance(issuers, list) or not all(isinstance(i, str) and i for i in issuers):
        raise ValueError(f"{where}: allowed_issuers must be a list of issuer URLs")
    return ProviderTrust(claim, frozenset(issuers))


class SignInRefusedError(ValueError):
    """A sign-in whose claims do not prove who the person is; the message says why."""


def identify(
    claims: Mapping[str, object], *, session: Session, trust: ProviderTrust = ProviderTrust()
) -> Actor | None:
    """The member a provider's ID token names (its email as ``trust`` accepts it), or None for
    a stranger. A member's first sign-in binds them to that account; only it signs in as them.

    Raises:
        SignInRefusedError: no usable email, issuer or subject; an email the identity rule
            refuses (:func:`pcf.identities.identity_key`: a lookalike or invisible character);
            an issuer not accepted; an email not verified; or another account than the member's.
    """
    email, issuer, subject = (claims.get(name) for name in ("email", "iss", "sub"))
    if not isinstance(email, str) or not EMAIL.fullmatch(email):
        raise SignInRefusedError("your sign-in provider sent no usable email address")
    try:
        email = identity_key(email)
    except IdentityError as exc:
        raise SignInRefusedError(f"your sign-in provider's address is refused: {exc}") from None
    if not (isinstance(issuer, str) and isinstance(subject, str) and issuer and subject):
        raise SignInRefusedError("your sign-in provider sent no issuer or subject")
    if trust.allowed_issuers and issuer not in trust.allowed_issuers:
        raise SignInRefusedError(f"accounts of {issuer} may not sign in here")
    if claims.get(trust.verified_claim) is not True:
        raise SignInRefusedError(
            f"your sign-in provider has not verified {email} ({trust.verified_claim} is not "
            "true): verify the address with your provider, then sign in again"
        )
    member = get_member(email, session=session)
    if member is None or member.local:
        return None
    if member.issuer is None and bind_member(member.email, issuer, subject, session=session):
        add_audit_event(
            "member_bound",
            session=session,
            actor=member.email,
            target=member.email,
            details={"issuer": issuer, "subject": subject},
        )
        session.refresh(member)
    if (member.issuer, member.subject) != (issuer, subject):
        raise SignInRefusedError(
            f"{member.email} signs in with another account than this one (of {issuer}); "
            "ask an admin"
        )
    return Actor(member.email, Role(member.role))


def local_actor(*, session: Session) -> Actor | None:
    """The local person of local mode (an admin), or None until they gave their name."""
    member = local_member(session=session)
    return Actor(member.email, Role.ADMIN) if member is not None else None


def set_local_name(name: str, *, session: Session) -> Actor:
    """Record the local person's name (their labels' annotator), once.

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
    """Give ``email`` a role (a new member, or another role).

    Raises:
        ValueError: not an email address, one the identity rule refuses
            (:func:`pcf.identities.identity_key`), an unknown role, or the last admin made
            another role.
    """
    actor = authorize(actor, Permission.MANAGE_MEMBERS, session=session)
    email = email.strip()
    if not EMAIL.fullmatch(email):
        raise ValueError(f"{email!r} is not an email address")
    email = identity_key(email)
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
        ValueError: no such member, or the last admin.
    """
    actor = authorize(actor, Permission.MANAGE_MEMBERS, session=session)
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
    """Refuse to take the last signed-in admin away."""
    admins = [m for m in list_members(session=session) if m.role == Role.ADMIN and not m.local]
    if [m.email for m in admins] == [email]:
        raise ValueError(f"{email} is the only admin: make another member admin first")


def record_sign_in(actor: Actor, *, session: Session) -> None:
    """Note in the audit log that ``actor`` signed in (once per browser session)."""
    add_audit_event(
        "signed_in", session=session, actor=actor.identity, details={"role": actor.role}
    )
