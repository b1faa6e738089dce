"""The cost guard, for every path that pays a provider: an upper bound of each request's
price reserved before it leaves, in the database's spend ledger, and settled with the bill (the
rule: docs/costs.md)."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, replace

from sqlmodel import Session

from pcf.judges.base import JudgeRequest
from pcf.prices import call_cost
from pcf.store import commit_retrying, raise_open_spend, reserve_spend, run_spend, settle_spend

FRAMING_TOKENS = 512
"""Tokens a provider may add around a request's text: message framing and the instructions
that carry a structured-output schema."""

PRICE_JUMP = 10
"""A price rise mid-run the cap still holds against: a request joins others in flight only
while the spend plus this many times every reservation in flight fits the cap (docs/costs.md)."""


def request_bound(request: JudgeRequest) -> tuple[int, int]:
    """Upper bounds of the input and output tokens ``request`` is billed for."""
    schema = json.dumps(request.schema) if request.schema is not None else ""
    text = request.system + request.user + schema
    return len(text.encode("utf-8")) + FRAMING_TOKENS, request.max_tokens


@dataclass(frozen=True)
class Reservation:
    """The tokens and price reserved for one request (``usd`` None: the model has no price);
    ``entry``: its row in the spend ledger, or a number of the guard's own."""

    input_tokens: int
    output_tokens: int
    usd: float | None
    entry: int = 0


class Ledger:
    """One run's spend in the database (:mod:`pcf.store.spend`): each reservation committed
    before its request leaves; a bill settled with the next commit (:meth:`write_bills`, in the
    transaction that stores the call), at once when it is above its reservation."""

    def __init__(self, run_id: int, session: Session) -> None:
        self.run_id, self.session = run_id, session
        self._bills: dict[int, tuple[float, int, int]] = {}

    def spent(self) -> float:
        """The run's spend: its bills and its open reservations, of every process."""
        return run_spend(self.run_id, session=self.session)

    def reserve(self, reservation: Reservation) -> int:
        """Commit ``reservation`` (with the bills kept so far); its entry."""
        tokens = reservation.input_tokens, reservation.output_tokens

        def write() -> int:
            self.write_bills()
            return reserve_spend(self.run_id, reservation.usd or 0.0, tokens, session=self.session)

        entry = commit_retrying(self.session, write)
        self._bills.clear()
        return entry

    def bill(self, entry: int, usd: float, tokens: tuple[int, int], *, above: bool) -> None:
        """Keep the bill of ``entry``; ``above`` its reservation, commit it now and raise every
        open reservation of the run to ``usd`` (those requests may be billed as much)."""
        self._bills[entry] = (usd, *tokens)
        if above:

            def write() -> None:
                self.write_bills()
                raise_open_spend(self.run_id, usd, session=self.session)

            commit_retrying(self.session, write)
            self._bills.clear()

    def write_bills(self) -> None:
        """Settle the bills kept so far in the open transaction (again, after a rollback)."""
        settle_spend(self._bills, session=self.session)

    def committed(self) -> None:
        """The transaction that wrote the bills was committed: forget them."""
        self._bills.clear()


class CostGuard:
    """One run's spend against its cap (None: no cap), in USD at ``prices``. ``peaks``: the
    most input and output tokens a stored call of the run was billed for; ``spent``: the run's
    spend so far; ``ledger``: where reservations and bills are written (None: in memory only)."""

    def __init__(
        self,
        cap: float | None,
        model: str,
        prices: dict[str, tuple[float, float]],
        *,
        peaks: tuple[int, int] = (0, 0),
        spent: float = 0.0,
        ledger: Ledger | None = None,
    ) -> None:
        self.cap, self.model, self.prices, self.ledger = cap, model, prices, ledger
        self.peak_in, self.peak_out = peaks
        self.confirmed = any(peaks)
        self.spent = spent
        self.stopped = False
        self._open: dict[int, float] = {}  # the price each request in flight is counted at
        self._numbers = itertools.count(-1, -1)
        self._changed = asyncio.Event()

    @property
    def in_flight(self) -> int:
        """Requests reserved and not settled yet."""
        return len(self._open)

    @property
    def reserved(self) -> float:
        """What the requests in flight are counted at."""
        return sum(self._open.values())

    def reservation(self, request: JudgeRequest) -> Reservation:
        """What the guard would reserve for ``request``: its bound, raised to the run's peaks."""
        bound_in, bound_out = request_bound(request)
        tokens_in, tokens_out = max(bound_in, self.peak_in), max(bound_out, self.peak_out)
        return Reservation(
            tokens_in, tokens_out, call_cost(self.model, tokens_in, tokens_out, self.prices)
        )

    def _fits(self, reservation: Reservation) -> bool | None:
        """True: it may go now; False: it never fits; None: it fits once a call settles."""
        if self.stopped:
            return False
        if self.cap is None or reservation.usd is None:
            return True  # no cap, or a model without a price: its cost is unknown
        if self.spent + reservation.usd > self.cap:
            return False
        if self.in_flight == 0:
            return True
        if self.confirmed and (
            self.spent + PRICE_JUMP * (self.reserved + reservation.usd) <= self.cap
        ):
            return True
        return None

    def _take(self, reservation: Reservation) -> Reservation:
        """Count ``reservation`` in flight, committed to the ledger first when it has a price."""
        if self.ledger is not None and reservation.usd:
            entry = self.ledger.reserve(reservation)
        else:
            entry = next(self._numbers)
        self._open[entry] = reservation.usd or 0.0
        return replace(reservation, entry=entry)

    async def reserve(self, request: JudgeRequest) -> Reservation | None:
        """Reserve ``request``'s price before it is sent (waiting while it fits only once calls
        in flight settle); None when it would take the spend past the cap, or after
        :meth:`stop`."""
        while (fits := self._fits(reservation := self.reservation(request))) is None:
            await self._changed.wait()  # the run's peaks may have risen meanwhile
        return self._take(reservation) if fits else None

    def stop(self) -> None:
        """Send nothing more: every reservation waiting or to come is refused."""
        self.stopped = True
        self._wake()

    def settle(self, reservation: Reservation, input_tokens: int, output_tokens: int) -> None:
        """Replace a reservation with what the provider billed. Billing above it raises the
        peaks, raises every request in flight to this bill, and puts the guard back to one
        request in flight."""
        self._open.pop(reservation.entry)
        billed = call_cost(self.model, input_tokens, output_tokens, self.prices) or 0.0
        self.spent += billed
        above = billed > (reservation.usd or 0.0)
        if above:
            self._open = {entry: max(usd, billed) for entry, usd in self._open.items()}
        if self.ledger is not None and reservation.entry > 0:
            self.ledger.bill(reservation.entry, billed, (input_tokens, output_tokens), above=above)
            if above:  # the ledger raised the open reservations of dead processes too
                self.spent = self.ledger.spent() - self.reserved
        if input_tokens > reservation.input_tokens or output_tokens > reservation.output_tokens:
            self.confirmed = False
        elif (input_tokens or output_tokens) and (
            reservation.input_tokens >= self.peak_in and reservation.output_tokens >= self.peak_out
        ):
            self.confirmed = True  # billed within a reservation made at today's peaks
        self.peak_in = max(self.peak_in, input_tokens)
        self.peak_out = max(self.peak_out, output_tokens)
        self._wake()

    def failed(self, reservation: Reservation, *, answered: bool) -> None:
        """A request that got no answer: ``answered`` with an error status (billed nothing),
        else :meth:`unanswered`."""
        if answered:
            self.settle(reservation, 0, 0)
        else:
            self.unanswered(reservation)

    def unanswered(self, reservation: Reservation) -> None:
        """A request sent without an answer (a timeout, a lost connection, a cancelled call),
        or answered without its usage: the provider may have billed it, or billed an unknown
        amount, so it stays counted at its reservation."""
        self.spent += self._open.pop(reservation.entry)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
