"""Who may do what: the four roles, what each may do (:data:`GRANTS`; docs/team.md), and the
check every write makes (:func:`authorize`, which reads the actor's role again in the write's
own transaction). Identity comes from sign-in (the app) or a shell on the server (the CLI's
operator, an admin), never from a typed name.
"""

from __future__ import annotations

import getpass
import os
import re
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
    MANAGE_WEBHOOKS = "manage webhooks"


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
    """Who acts (a signed-in email, the local person's name, or the CLI's ``operator``, whose
    base URLs are theirs to name) and their role."""

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
    """``actor`` with the role the database gives them now (the operator keeps theirs), when
    it allows ``permission``: a member removed or demoted since their page was drawn saves
    nothing.

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
    """The first header of ``headers`` that says a proxy passed the request on, or None (local
    mode refuses those: a local proxy would make every visitor the local person)."""
    names = {name.lower() for name in headers}
    return next((name for name in FORWARDING_HEADERS if name in names), None)


LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The names of this machine a browser may use to reach the app in local mode: a name that
resolves to 127.0.0.1 through someone else's DNS (rebinding) would make their page the local
admin."""
_HOST = re.compile(r"(\[[^\]]*\]|[^:]*)(:[0-9]*)?")


def foreign_host(headers: Mapping[str, str]) -> str | None:
    """The ``Host`` header of ``headers`` when it names another host than :data:`LOCAL_HOSTS`
    (with any port), else None. A request without one (AppTest; a client on this machine that
    named no host) is this machine's: a browser always sends it."""
    host = next((value for name, value in headers.items() if name.lower() == "host"), None)
    if host is None:
        return None
    name = _HOST.fullmatch(host)
    return None if name is not None and name[1].lower() in LOCAL_HOSTS else host


def operator() -> Actor:
    """The person at the server's shell (the CLI): an admin, named by their login."""
    return Actor(f"operator:{getpass.getuser()}", Role.ADMIN, operator=True)


ALLOWED_BASE_URLS_ENV = "PCF_ALLOWED_BASE_URLS"
"""Base URLs (space- or comma-separated) beyond the providers' own that the server's keys may
be sent to from the app."""


def key_may_go_to(actor: Actor, backend: str, base_url: str | None) -> bool:
    """Whether the server's key for ``backend`` may be sent to ``base_url`` for ``actor``:
    always to the provider's own endpoint or its SDK variable's server, and for the operator;
    else only to a server on the operator's list (compared by :func:`pcf.judges.judge_server`).
    """
    if base_url is None or actor.operator:
        return True
    server = judge_server(backend, base_url)
    if server is None:
        return True
    listed = os.environ.get(ALLOWED_BASE_URLS_ENV, "").replace(",", " ").split()
    return server in {judge_server(backend, named) for named in [*listed, None]}
