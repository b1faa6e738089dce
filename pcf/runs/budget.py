"""The cost guard, for every path that pays a provider: an upper bound of each request's
price reserved before it leaves, settled with the bill (the rule: docs/costs.md)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from pcf.judges.base import JudgeRequest
from pcf.prices import call_cost

FRAMING_TOKENS = 512
"""Tokens a provider may add around a request's text: message framing and the instructions
that carry a structured-output schema."""


def request_bound(request: JudgeRequest) -> tuple[int, int]:
    """Upper bounds of the input and output tokens ``request`` is billed for."""
    schema = json.dumps(request.schema) if request.schema is not None else ""
    text = request.system + request.user + schema
    return len(text.encode("utf-8")) + FRAMING_TOKENS, request.max_tokens


@dataclass(frozen=True)
class Reservation:
    """The tokens and price reserved for one request (``usd`` None: the model has no price)."""

    input_tokens: int
    output_tokens: int
    usd: float | None


class CostGuard:
    """One run's spend against its cap (None: no cap), in USD at ``prices``; ``peaks``: the
    most input and output tokens a stored call of the run was billed for."""

    def __init__(
        self,
        cap: float | None,
        model: str,
        prices: dict[str, tuple[float, float]],
        *,
        peaks: tuple[int, int] = (0, 0),
    ) -> None:
        self.cap, self.model, self.prices = cap, model, prices
        self.peak_in, self.peak_out = peaks
        self.confirmed = any(peaks)
        self.spent = self.reserved = 0.0
        self.in_flight = 0
        self._changed = asyncio.Event()

    def reservation(self, request: JudgeRequest) -> Reservation:
        """What the guard would reserve for ``request``: its bound, raised to the run's peaks."""
        bound_in, bound_out = request_bound(request)
        tokens_in, tokens_out = max(bound_in, self.peak_in), max(bound_out, self.peak_out)
        return Reservation(
            tokens_in, tokens_out, call_cost(self.model, tokens_in, tokens_out, self.prices)
        )

    def _fits(self, reservation: Reservation) -> bool | None:
        """True: it may go now; False: it never fits; None: it fits once a call settles."""
        if self.cap is None or reservation.usd is None:
            return True  # no cap, or a model without a price: its cost is unknown
        if self.spent + reservation.usd > self.cap:
            return False
        if (self.confirmed or self.in_flight == 0) and (
            self.spent + self.reserved + reservation.usd <= self.cap
        ):
            return True
        return None

    def _take(self, reservation: Reservation) -> Reservation:
        self.reserved += reservation.usd or 0.0
        self.in_flight += 1
        return reservation

    async def reserve(self, request: JudgeRequest) -> Reservation | None:
        """Reserve ``request``'s price before it is sent (waiting while it fits only once calls
        in flight settle); None when it would take the spend past the cap."""
        if self.cap is None:  # nothing to guard: no bound to find
            return self._take(Reservation(0, 0, None))
        while (fits := self._fits(reservation := self.reservation(request))) is None:
            await self._changed.wait()  # the run's peaks may have risen meanwhile
        return self._take(reservation) if fits else None

    def settle(self, reservation: Reservation, input_tokens: int, output_tokens: int) -> None:
        """Replace a reservation with what the provider billed. Billing above it raises the
        peaks and puts the guard back to one request in flight."""
        self.reserved -= reservation.usd or 0.0
        self.in_flight -= 1
        self.spent += call_cost(self.model, input_tokens, output_tokens, self.prices) or 0.0
        if input_tokens > reservation.input_tokens or output_tokens > reservation.output_tokens:
            self.confirmed = False
        elif (input_tokens or output_tokens) and (
            reservation.input_tokens >= self.peak_in and reservation.output_tokens >= self.peak_out
        ):
            self.confirmed = True  # billed within a reservation made at today's peaks
        self.peak_in = max(self.peak_in, input_tokens)
        self.peak_out = max(self.peak_out, output_tokens)
        self._changed.set()
        self._changed = asyncio.Event()
