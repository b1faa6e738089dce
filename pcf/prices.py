"""The price table, in USD per million tokens ``(input, output)``, extended by ``PCF_PRICES``
(docs/costs.md): a model missing from it is unpriced, never guessed; no price is negative."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pcf.files import PRICES_FILE, InputFileError, read_input

if TYPE_CHECKING:
    from pcf.store import Run

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "claude-sonnet-4-20250514": (3.00, 15.00),
    "claude-3-5-haiku-20241022": (0.80, 4.00),
    # Gemini API, paid tier, prompts up to 200k tokens (thinking tokens bill as output):
    # https://ai.google.dev/gemini-api/docs/pricing, list prices as of 2025-11
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
}
UNPRICED = "unpriced"
"""What a cost reads where the model has no price: never $0 (docs/costs.md)."""
BATCH_DISCOUNT = 0.5
"""Both providers bill batch requests at half the list price, input and output alike."""


def price_table() -> dict[str, tuple[float, float]]:
    """The built-in prices updated with the file named by ``PCF_PRICES``, if set."""
    table = dict(DEFAULT_PRICES)
    path = os.environ.get("PCF_PRICES")
    if path:
        try:
            text = read_input(path, PRICES_FILE).decode("utf-8")
        except (InputFileError, UnicodeDecodeError) as exc:
            reason = exc.reason if isinstance(exc, InputFileError) else "not UTF-8 text"
            raise ValueError(
                f"PCF_PRICES={path}: {reason}; PCF_PRICES names a JSON file "
                "{model: [input, output]} in USD per million tokens"
            ) from exc
        try:
            extra = json.loads(text)
            prices = {model: (float(p[0]), float(p[1])) for model, p in extra.items()}
            if not all(math.isfinite(v) and v >= 0 for pair in prices.values() for v in pair):
                raise ValueError("a price is negative or not finite")
            table.update(prices)
        except (ValueError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(
                f"PCF_PRICES={path}: expected a JSON object {{model: [input, output]}} in USD "
                f"per million tokens ({exc})"
            ) from exc
    return table


def call_cost(
    model: str, input_tokens: int, output_tokens: int, prices: dict[str, tuple[float, float]]
) -> float | None:
    """USD cost of one call, or None when the model has no price."""
    if model not in prices:
        return None
    price_in, price_out = prices[model]
    return (input_tokens * price_in + output_tokens * price_out) / 1_000_000


def run_cost(run: Run, prices: Mapping[str, tuple[float, float]] | None = None) -> float | None:
    """The run's stored cost in USD, or None when it is not known: calls of a model without a
    price (a simulated run, or one that used no token, costs what it stored)."""
    simulated = run.settings.is_simulated(run.backend)
    tokens = run.input_tokens + run.output_tokens
    return run.cost_usd if simulated or tokens == 0 or has_price(run.model, prices) else None


def has_price(model: str, prices: Mapping[str, tuple[float, float]] | None = None) -> bool:
    """Whether ``model`` is in the price table (``prices``, else :func:`price_table`)."""
    return model in (price_table() if prices is None else prices)


def shown_cost(cost_usd: float | None) -> float | str:
    """A cost as JSON output shows it: USD to 6 places, or ``unpriced``."""
    return UNPRICED if cost_usd is None else round(cost_usd, 6)


def cost_text(cost_usd: float | None) -> str:
    """A cost as a person reads it: ``$0.0123``, or ``unpriced``."""
    return UNPRICED if cost_usd is None else f"${cost_usd:.4f}"


def batch_prices(prices: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The price table for calls sent through a provider's batch API."""
    return {
        model: (p_in * BATCH_DISCOUNT, p_out * BATCH_DISCOUNT)
        for model, (p_in, p_out) in prices.items()
    }
