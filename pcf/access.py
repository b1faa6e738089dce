"""Who may do what: the four roles, what each may do, and the check every write makes.

Identity comes from sign-in (the app) or from having a shell on the server (the CLI acts as
the local operator, an admin); it never comes from a typed name or an address parameter. The
application functions that write take the acting :class:`Actor` and call :func:`authorize`,
which reads the actor's role again from the database in the write's own transaction: a page
that forgot to hide a button, or a member removed or demoted since their page was drawn, still
cannot do what the role does not allow.

| role | may |
| --- | --- |
| admin | everything: members, imports, runs (start, resume, collect, delete), labels, gold |
| reviewer | see everything, label, resolve disagreements into gold, assign items |
| annotator | label, blind: no gold, no judge decisions, no other person's label first |
| viewer | read results (Overview, Review, Compare, Weights, Report), nothing else |
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from pcf.judges import judge_server

if TYPE_CHECKING:
    from sqlmodel import Session


class Role(StrEnum):
    """A member's role."""

    ADMIN = "admin"
    REVIEWER = "reviewer"
    ANNOTATOR = "annotator"
    VIEWER = "viewer"


class Permission(StrEnum):
    """Something a role may be allowed to do; the value reads in an error message."""

    MANAGE_MEMBERS = "manage members"
    IMPORT = "import datasets and labels"
    RUN = "start, resume or collect runs"
    DELETE_RUN = "delete runs"
    LABEL = "save labels"
    RESOLVE = "resolve disagreements into gold"
    SEE_RESULTS = "see gold labels, judge decisions and other people's labels"
    READ_AUDIT = "read the audit log"
    PLAN_LABELLING = "set a dataset's labelling plan"
    ASSIGN = "assign items to annotators"


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.ADMIN: frozenset(Permission),
    Role.REVIEWER: frozenset(
        {Permission.LABEL, Permission.RESOLVE, Permission.SEE_RESULTS, Permission.ASSIGN}
    ),
    Role.ANNOTATOR: frozenset({Permission.LABEL}),
    Role.VIEWER: frozenset({Permission.SEE_RESULTS}),
}


class AccessDeniedError(PermissionError):
    """An action the actor's role does not allow; the message names both."""


@dataclass(frozen=True)
class Actor:
    """Who acts: ``identity`` (a signed-in email, the local person's name, or the operator)
    and their role. ``operator`` marks the person with a shell on the server (the CLI): the
    base URLs they give are theirs to name (:func:`key_may_go_to`)."""

    identity: str
    role: Role
    operator: bool = False

    def may(self, permission: Permission) -> bool:
        """Whether the role allows ``permission``."""
        return permission in GRANTS[self.role]

    def require(self, permission: Permission) -> None:
        """Raise :class:`AccessDeniedError` unless the role allows ``permission``."""
        if not self.may(permission):
            raise AccessDeniedError(
                f"{self.identity} is {self.role.value} and may not {permission.value}; "
                "ask an admin for another role"
            )


def authorize(actor: Actor, permission: Permission, *, session: Session) -> Actor:
    """``actor`` with the role the database gives them now, when it allows ``permission``.

    Every write calls it first, in its own transaction: the member's row is read there, so a
    member removed or demoted since their page was drawn saves nothing. The operator (the CLI)
    is no member and keeps their role.

    Raises:
        AccessDeniedError: the actor is no longer a member, or their role does not allow it.
    """
    from pcf.store import get_member  # noqa: PLC0415 - `pcf --help` stays light

    if not actor.operator:
        member = get_member(actor.identity, session=session)
        if member is None:
            raise AccessDeniedError(
                f"{actor.identity} is no longer a member; nothing was saved: ask an admin"
            )
        actor = Actor(actor.identity, Role(member.role))
    actor.require(permission)
    return actor


FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip", "via")
"""Headers a reverse proxy adds to the requests it passes on."""


def forwarded_by(headers: Mapping[str, str]) -> str | None:
    """The first header of ``headers`` that says a proxy passed the request on, or None.

    Local mode trusts the loopback address to mean "the person at this machine"; a reverse
    proxy on the same machine would make every visitor that person, so a forwarded request is
    refused there.
    """
    names = {name.lower() for name in headers}
    return next((name for name in FORWARDING_HEADERS if name in names), None)


def operator() -> Actor:
    """The person at the server's shell (the CLI): an admin, named by their login."""
    return Actor(f"operator:{getpass.getuser()}", Role.ADMIN, operator=True)


ALLOWED_BASE_URLS_ENV = "PCF_ALLOWED_BASE_URLS"
"""Base URLs (space- or comma-separated) the server's provider keys may be sent to from the
app, beyond the providers' own endpoints, e.g. ``http://gpu-box:8000/v1``."""


def key_may_go_to(actor: Actor, backend: str, base_url: str | None) -> bool:
    """Whether the server's key for ``backend`` may be sent to ``base_url`` for ``actor``.

    Always to the provider's own endpoint (no base URL, or the provider's own address), to the
    server of the SDK's variable (``OPENAI_BASE_URL``, ``AZURE_OPENAI_ENDPOINT``...) and for
    the operator, who names the servers; otherwise only to a server on the operator's list,
    compared as the cache compares servers (:func:`pcf.judges.judge_server`: scheme, host,
    port and path, never a credential or a query).
    """
    if base_url is None or actor.operator:
        return True
    server = judge_server(backend, base_url)
    if server is None:
        return True
    listed = os.environ.get(ALLOWED_BASE_URLS_ENV, "").replace(",", " ").split()
    return server in {judge_server(backend, named) for named in [*listed, None]}
