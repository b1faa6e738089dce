"""Prices (pcf/prices.py): the table from PCF_PRICES, refused when a price could make a cost < 0."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pcf.cli import app
from pcf.prices import DEFAULT_PRICES, UNPRICED, call_cost, price_table
from tests.app.test_runs import LISTWISE
from tests.factories import make_item
from tests.wire_server import WireServer, fixed_json


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


def test_a_model_without_a_price_reads_unpriced_wherever_its_cost_shows(
    isolated_database, tmp_path
):
    """A local server's model (its calls used tokens, nothing is known of their price): the
    progress line, the summary and `pcf runs` say unpriced, never $0."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(make_item(f"q{n}").to_dict()) + "\n" for n in range(2)))
    runner = CliRunner()
    assert runner.invoke(app, ["import", "auto", str(items), "--name", "ds"]).exit_code == 0
    with WireServer(fixed_json(LISTWISE)) as wire:
        judge = ["judge", "ds", "--model", "openai-compatible/local-m", "--k", "2", "--name", "r"]
        judged = runner.invoke(app, [*judge, "--base-url", wire.openai_base_url])
    assert judged.exit_code == 0, judged.output
    summary = json.loads(judged.stdout)
    assert summary["input_tokens"] > 0
    assert (summary["cost_usd"], summary["per_item"]["cost_usd"]) == (UNPRICED, UNPRICED)
    assert "failed, unpriced" in judged.stderr
    assert "$0.0000" not in judged.stderr
    listed = json.loads(runner.invoke(app, ["runs"]).stdout)["runs"]
    assert [(r["name"], r["cost_usd"]) for r in listed] == [("r", UNPRICED)]
