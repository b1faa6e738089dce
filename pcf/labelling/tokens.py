"""Tokens of the HTTP API: each acts as one member within a scope, so its rights are the
scope's capped by the member's role, read again on every request (a removed or demoted
member's token is refused at once). The secret is shown once and kept only as its SHA-256
(it is random and 256 bits long: no slow hash is needed)."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from pcf.access import GRANTS, AccessDeniedError, Actor, Permission, Role, authorize
from pcf.store import (
    add_audit_event,
    add_token,
    get_member,
    list_tokens,
    revoke_token,
    token_by_digest,
    utc_now,
)

if TYPE_CHECKING:
    from sqlmodel import Session

    from pcf.store import ApiToken

PREFIX = "pcf_"
SHOWN_CHARS = 8
"""The characters of a secret (after :data:`PREFIX`) a token list shows."""
DURATION = re.compile(r"(\d+)([dhm])")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}


class Scope(StrEnum):
    """What a token may be used for; each scope holds the ones before it."""

    READ = "read"
    LABEL = "label"
    RUN = "run"
    ADMIN = "admin"


SCOPE_GRANTS: dict[Scope, frozenset[Permission]] = {
    Scope.READ: frozenset({Permission.SEE_RESULTS}),
    Scope.LABEL: frozenset({Permission.SEE_RESULTS, Permission.LABEL}),
    Scope.RUN: frozenset(
        {Permission.SEE_RESULTS, Permission.LABEL, Permission.IMPORT, Permission.RUN}
    ),
    Scope.ADMIN: frozenset(Permission),
}


class TokenError(PermissionError):
    """A request without a usable token: none, unknown, revoked or expired (HTTP 401)."""


@dataclass(frozen=True)
class TokenUser:
    """Who a request acts as: the member (with their role as it is now) and the token's scope."""

    actor: Actor
    scope: Scope
    token_id: int

    @property
    def permissions(self) -> frozenset[Permission]:
        """The token's rights: its scope's, capped by the member's role."""
        return SCOPE_GRANTS[self.scope] & GRANTS[self.actor.role]

    def require(self, permission: Permission) -> Actor:
        """The actor, when the token may ``permission``; else AccessDeniedError naming why."""
        if permission in self.permissions:
            return self.actor
        if permission not in SCOPE_GRANTS[self.scope]:
            raise AccessDeniedError(
                f"this token's scope is {self.scope.value}, which may not {permission.value}; "
                "create a token with a wider scope"
            )
        self.actor.require(permission)  # raises, naming the role
        return self.actor


@dataclass(frozen=True)
class NewToken:
    """A token just created: ``secret`` is shown this once and never stored."""

    id: int
    email: str
    scope: str
    secret: str
    expires_at: datetime | None


def digest(secret: str) -> str:
    """The SHA-256 of a secret, as stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h`` or ``15m`` as a duration.

    Raises:
        ValueError: another form, or zero.
    """
    found = DURATION.fullmatch(text.strip())
    if found is None or int(found[1]) == 0:
        raise ValueError(f"{text!r} is no duration: give e.g. 30d, 12h or 15m")
    return timedelta(**{UNITS[found[2]]: int(found[1])})


def create_token(
    email: str,
    scope: str,
    *,
    session: Session,
    actor: Actor,
    expires_in: timedelta | None = None,
) -> NewToken:
    """A new token acting as member ``email`` within ``scope``, as ``actor`` (an admin).

    Raises:
        ValueError: no such member, or an unknown scope.
    """
    actor = authorize(actor, Permission.MANAGE_MEMBERS, session=session)
    if scope not in set(Scope):
        raise ValueError(f"unknown scope {scope!r}; choose one of {', '.join(Scope)}")
    member = get_member(email.strip(), session=session)
    if member is None:
        raise ValueError(f"{email!r} is not a member; add them first (pcf members add)")
    secret = PREFIX + secrets.token_urlsafe(32)
    expires_at = None if expires_in is None else utc_now() + expires_in
    token = add_token(
        session=session,
        email=member.email,
        scope=scope,
        digest=digest(secret),
        prefix=secret[: len(PREFIX) + SHOWN_CHARS],
        created_by=actor.identity,
        expires_at=expires_at,
    )
    details = {"token": token.id, "scope": scope}
    add_audit_event(
        "token_created", session=session, actor=actor.identity, target=member.email, details=details
    )
    return NewToken(token.id, member.email, scope, secret, expires_at)


def tokens(*, session: Session, actor: Actor) -> list[ApiToken]:
    """Every token (never a secret), oldest first."""
    authorize(actor, Permission.MANAGE_MEMBERS, session=session)
    return list_tokens(session=session)


def revoke(token_id: int, *, session: Session, actor: Actor) -> None:
    """Revoke a token at once.

    Raises:
        ValueError: no such token, or revoked already.
    """
    actor = authorize(actor, Permission.MANAGE_MEMBERS, session=session)
    if not revoke_token(token_id, session=session):
        raise ValueError(f"no token {token_id} that is not revoked already; pcf tokens list")
    add_audit_event("token_revoked", session=session, actor=actor.identity, target=str(token_id))


def token_user(secret: str, *, session: Session) -> TokenUser:
    """Who the token ``secret`` acts as now.

    Raises:
        TokenError: an unknown, revoked or expired token, or one whose member was removed.
    """
    token = token_by_digest(digest(secret), session=session) if secret.startswith(PREFIX) else None
    if token is None:
        raise TokenError("unknown token: give a token of `pcf tokens create` as Bearer")
    if token.revoked_at is not None:
        raise TokenError(f"token {token.id} was revoked")
    if token.expires_at is not None and token.expires_at <= utc_now():
        raise TokenError(f"token {token.id} expired at {token.expires_at.isoformat()}")
    member = get_member(token.email, session=session)
    if member is None:
        raise TokenError(f"{token.email} is no longer a member; their tokens are refused")
    return TokenUser(Actor(member.email, Role(member.role)), Scope(token.scope), token.id)
