"""Trust or escalate (pcf/analysis/escalate.py): the guarantee over many seeded draws on judges
whose confidence helps, tells nothing, or points the wrong way; and `pcf escalate` on the demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pcf.analysis.escalate import threshold
from pcf.cli import app

runner = CliRunner()
ALPHA, DELTA, DRAWS = 0.1, 0.1, 200
JUDGES = {  # the chance the judge is wrong, given its confidence s in [0, 1]
    "informative": lambda s: 0.25 * (1 - s),
    "uninformative": lambda s: np.full_like(s, 0.12),
    "confidently_wrong": lambda s: 0.02 + 0.3 * s,
}


@pytest.mark.parametrize("judge", JUDGES)
def test_agreement_on_the_decided_items_holds_in_1_minus_delta_of_the_draws(judge):
    """Per draw, 400 calibration items choose the threshold and 5,000 fresh items are decided
    by it: their agreement is >= 1 - alpha in at least 1 - delta of 200 draws, whatever the
    confidence says; an informative one decides most items."""
    rng = np.random.default_rng(33)
    held, decided = [], []
    for _ in range(DRAWS):
        signal = rng.uniform(0, 1, 5400)
        wrong = rng.uniform(0, 1, 5400) < JUDGES[judge](signal)
        level, *_ = threshold(signal[:400], wrong[:400], ALPHA, DELTA)
        chosen = signal[400:] >= (np.inf if level is None else level)
        decided.append(chosen.mean())
        held.append(not chosen.any() or wrong[400:][chosen].mean() <= ALPHA)
    assert np.mean(held) >= 1 - DELTA
    if judge == "informative":
        assert np.mean(decided) > 0.4  # of the 80% it could decide


def test_pcf_escalate_splits_the_demo_and_refuses_a_sample_too_small(demo_engine):
    result = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "0.3", "--signal", "margin"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["simulated"] is True
    assert figures["calibration"]["items"] == 26  # half of the demo's 52 gold items
    assert len(figures["decided"]) + len(figures["escalated"]) == 52 - 26
    assert figures["error_bound"] <= 0.3
    assert figures["baseline"]["error_bound"] <= 0.3
    assert len(figures["decided"]) == round(figures["decided_share"] * 26)
    small = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "0.05"])
    assert small.exit_code == 2
    assert "26 calibration items with gold answers" in small.output
    assert "need at least 45" in small.output
