"""The HTTP API's own tables: its tokens (by the digest of their secret) and the runs it
started (by the client's idempotency key). Functions flush, never commit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from pcf.store.datasets import rows_changed
from pcf.store.models import ApiLabel, ApiRun, ApiToken, saved, utc_now


def add_token(
    *,
    session: Session,
    email: str,
    scope: str,
    digest: str,
    prefix: str,
    created_by: str,
    expires_at: datetime | None = None,
) -> ApiToken:
    """Store a new token of member ``email`` (its secret's ``digest``, never the secret)."""
    token = ApiToken(
        email=email,
        scope=scope,
        digest=digest,
        prefix=prefix,
        created_by=created_by,
        expires_at=expires_at,
    )
    return saved(token, session=session)


def token_by_digest(digest: str, *, session: Session) -> ApiToken | None:
    """The token whose secret has this digest, or None."""
    return session.exec(select(ApiToken).where(ApiToken.digest == digest)).first()


def list_tokens(*, session: Session) -> list[ApiToken]:
    """Every token, revoked and expired ones too, oldest first."""
    return list(session.exec(select(ApiToken).order_by(col(ApiToken.id))).all())


def revoke_token(token_id: int, *, session: Session) -> bool:
    """Mark the token revoked now (once); whether a token not yet revoked was found."""
    revoked = session.execute(
        update(ApiToken)
        .where(col(ApiToken.id) == token_id, col(ApiToken.revoked_at).is_(None))
        .values(revoked_at=utc_now())
        .execution_options(synchronize_session="fetch")
    )
    session.flush()
    return rows_changed(revoked) == 1


def claim_api_run(
    run_name: str, *, session: Session, email: str, idempotency_key: str, request: dict[str, Any]
) -> tuple[ApiRun | None, bool]:
    """The API run that ``email``'s ``idempotency_key`` names, and whether this call stored it:
    the one stored before (whatever its request), else a new one for ``run_name``; None when
    ``run_name`` was submitted with another key. Two calls with one key at once store one row
    (the second waits for the first's transaction)."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    values = {
        "run_name": run_name,
        "email": email,
        "idempotency_key": idempotency_key,
        "request": request,
        "cancelled": False,
        "created_at": utc_now(),
    }
    insert = dialect.insert(ApiRun).values(values).on_conflict_do_nothing()
    stored = session.execute(insert.returning(col(ApiRun.run_name))).first() is not None
    query = select(ApiRun).where(ApiRun.email == email, ApiRun.idempotency_key == idempotency_key)
    return session.exec(query).first(), stored


def get_api_run(run_name: str, *, session: Session) -> ApiRun | None:
    """The API's record of run ``run_name``, or None (a run started elsewhere)."""
    return session.get(ApiRun, run_name)


def cancel_api_run(run_name: str, *, session: Session) -> None:
    """Mark the API run cancelled: a restarted server does not resume it."""
    session.execute(
        update(ApiRun)
        .where(col(ApiRun.run_name) == run_name)
        .values(cancelled=True)
        .execution_options(synchronize_session="fetch")
    )
    session.flush()


def api_runs_to_resume(*, session: Session) -> list[ApiRun]:
    """The API runs not cancelled, oldest first (the caller skips those already done)."""
    query = select(ApiRun).where(col(ApiRun.cancelled).is_(False)).order_by(col(ApiRun.created_at))
    return list(session.exec(query).all())


def posted_labels(email: str, label_ids: list[str], *, session: Session) -> dict[str, int]:
    """Of ``label_ids`` posted by ``email`` before, each one's adjudication id."""
    query = select(ApiLabel).where(ApiLabel.email == email, col(ApiLabel.label_id).in_(label_ids))
    return {row.label_id: row.adjudication_id for row in session.exec(query)}


def add_posted_label(email: str, label_id: str, adjudication_id: int, *, session: Session) -> None:
    """Record that ``email``'s ``label_id`` saved label ``adjudication_id``."""
    saved(
        ApiLabel(email=email, label_id=label_id, adjudication_id=adjudication_id), session=session
    )
