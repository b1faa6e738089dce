"""Prices (pcf/prices.py): the table from PCF_PRICES, refused when a price could make a cost < 0."""

from __future__ import annotations

import pytest

from pcf.prices import DEFAULT_PRICES, call_cost, price_table


def test_a_prices_file_extends_the_table(tmp_path, monkeypatch):
    path = tmp_path / "prices.json"
    path.write_text('{"my-model": [0.5, 1.5], "free-model": [0, 0]}')
    monkeypatch.setenv("PCF_PRICES", str(path))
    table = price_table()
    assert table["my-model"] == (0.5, 1.5)
    assert call_cost("free-model", 10**7, 10**7, table) == 0.0
    assert table.items() >= DEFAULT_PRICES.items()


@pytest.mark.parametrize("prices", ["[-1, 2]", "[1, -0.5]", '["NaN", 1]', "[1, 1e999]"])
def test_a_negative_or_unbounded_price_is_refused(tmp_path, monkeypatch, prices):
    path = tmp_path / "prices.json"
    path.write_text(f'{{"my-model": {prices}}}')
    monkeypatch.setenv("PCF_PRICES", str(path))
    with pytest.raises(ValueError, match=rf"PCF_PRICES={path}: .*negative or not finite"):
        price_table()


def test_a_price_file_that_cannot_be_read_says_what_pcf_prices_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PCF_PRICES", '{"my-model": [1, 2]}')
    with pytest.raises(ValueError, match=r"file not found; PCF_PRICES names a JSON file"):
        price_table()
