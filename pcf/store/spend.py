"""The spend ledger: what each request of a run may cost, reserved before it leaves and settled
by its bill (docs/costs.md, "Prices and the cost cap"). Functions flush, never commit."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import bindparam, case, func, insert, update
from sqlmodel import Session, col, select

from pcf.store.models import Spend

_RESERVE = insert(Spend).values(
    run_id=bindparam("run_id"),
    provider_batch_id=bindparam("provider_batch_id"),
    usd=bindparam("usd"),
    input_tokens=bindparam("input_tokens"),
    output_tokens=bindparam("output_tokens"),
    settled=False,
)
_SETTLE = (
    update(Spend)
    .where(col(Spend.id) == bindparam("entry"))
    .values(
        usd=bindparam("usd"),
        input_tokens=bindparam("input_tokens"),
        output_tokens=bindparam("output_tokens"),
        settled=True,
    )
)


def reserve_spend(
    run_id: int,
    usd: float,
    tokens: tuple[int, int],
    *,
    session: Session,
    provider_batch_id: int | None = None,
) -> int:
    """Record a reservation of ``usd`` (for ``tokens`` in and out) in the run's spend; its id.

    One small INSERT, built once and run on the connection: a live run makes one per request.
    """
    values = {
        "run_id": run_id,
        "provider_batch_id": provider_batch_id,
        "usd": usd,
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
    }
    return session.connection().execute(_RESERVE, values).inserted_primary_key[0]  # type: ignore[index]


def settle_spend(bills: Mapping[int, tuple[float, int, int]], *, session: Session) -> None:
    """Replace reservations with their bills: ``{entry id: (usd, input tokens, output tokens)}``."""
    if bills:
        session.connection().execute(
            _SETTLE,
            [
                {"entry": entry, "usd": usd, "input_tokens": tokens_in, "output_tokens": out}
                for entry, (usd, tokens_in, out) in bills.items()
            ],
        )


def raise_open_spend(run_id: int, usd: float, *, session: Session) -> None:
    """Raise every open reservation of the run to at least ``usd`` (a bill above them)."""
    session.execute(
        update(Spend)
        .where(col(Spend.run_id) == run_id, col(Spend.settled).is_(False), col(Spend.usd) < usd)
        .values(usd=usd)
        .execution_options(synchronize_session=False)
    )


def run_spend(run_id: int, *, session: Session) -> float:
    """What the run may have cost: its bills plus its open reservations (those of requests in
    flight, and of requests that never answered: a timeout, a process that died)."""
    total = session.exec(select(func.sum(Spend.usd)).where(Spend.run_id == run_id)).one()
    return float(total or 0.0)


def settle_batch_spend(
    provider_batch_id: int, usd: float, tokens: tuple[int, int], *, session: Session
) -> None:
    """Replace a batch submission's reservation with its bill (``tokens``: the most one of its
    requests was billed for)."""
    session.execute(
        update(Spend)
        .where(col(Spend.provider_batch_id) == provider_batch_id)
        .values(usd=usd, input_tokens=tokens[0], output_tokens=tokens[1], settled=True)
        .execution_options(synchronize_session=False)
    )


def billed_peaks(run_id: int, *, session: Session) -> tuple[int, int]:
    """The most input and output tokens one settled request of the run was billed for."""
    settled = case((col(Spend.settled), Spend.input_tokens), else_=0)
    settled_out = case((col(Spend.settled), Spend.output_tokens), else_=0)
    peaks = session.exec(
        select(func.max(settled), func.max(settled_out)).where(Spend.run_id == run_id)
    ).one()
    return peaks[0] or 0, peaks[1] or 0
