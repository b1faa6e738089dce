"""Trust or escalate (pcf/analysis/escalate.py): the guarantee over many seeded draws on judges
whose confidence helps, tells nothing, or points the wrong way; and `pcf escalate` on the demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from pcf.access import AccessDeniedError, Actor, Role
from pcf.analysis.escalate import threshold
from pcf.cli import app
from pcf.labelling.plan import queue_escalated
from pcf.labelling.queue import claim_next
from pcf.store import (
    add_adjudication,
    audit_events,
    get_dataset,
    get_run,
    item_db_ids,
    load_items,
)
from tests.factories import enrol

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


def label_every_item_with_its_gold(session: Session) -> None:
    dataset = get_dataset("demo", session=session)
    ids = item_db_ids(dataset.id, session=session)
    for item in load_items(dataset.id, session=session):
        add_adjudication(ids[item.item_id], session=session, annotator="ann", choice=item.gold)
    session.commit()


def test_human_calibration_needs_the_plans_random_share_and_uses_only_its_gold(db):
    label_every_item_with_its_gold(db)
    humans = ["escalate", "demo-pcf", "--calibration-labels", "humans"]
    refused = runner.invoke(app, humans)
    assert refused.exit_code == 2
    assert "reserves no random calibration share" in refused.output
    assert "not a random sample" in refused.output
    done = runner.invoke(app, ["labelling", "set", "demo", "--calibration-share", "0.5"])
    assert json.loads(done.stdout)["calibration_share"] == 0.5
    figures = json.loads(runner.invoke(app, [*humans, "--alpha", "0.3"]).stdout)
    assert figures["calibration"]["items"] == 26  # all 52 have human gold: only the share counts
    assert len(figures["decided"]) + len(figures["escalated"]) == 52 - 26
    small = runner.invoke(app, [*humans, "--alpha", "0.05"])
    assert small.exit_code == 2
    assert "26 calibration items with human gold of the 26 in the random calibration share" in (
        small.output
    )
    assert "need at least 45" in small.output


def test_pcf_escalate_queue_serves_the_escalated_items_first(db):
    annotator = Actor("ann@example.com", Role.ANNOTATOR)
    enrol(db, annotator)
    run = get_run("demo-pcf", session=db)
    with pytest.raises(AccessDeniedError):
        queue_escalated(run, ["demo-001"], session=db, actor=annotator)
    result = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "0.3", "--queue"])
    assert result.exit_code == 0, result.output
    escalated = json.loads(result.stdout)["escalated"]
    items = load_items(run.dataset_id, session=db)
    order = [(item.item_id, item.metadata["db_id"]) for item in items]
    assert order[0][0] not in escalated
    wanted = dict.fromkeys((key for key, _ in order), 10)
    served = []
    for _ in escalated:
        claimed = claim_next(run.dataset_id, order, session=db, actor=annotator, wanted=wanted)
        add_adjudication(
            claimed.item_db_id, session=db, annotator=annotator.identity, choice="cannot_tell"
        )
        served.append(claimed.item_key)
    assert served == escalated
    event = audit_events(session=db, limit=1)[0]
    assert (event.action, event.target, event.details) == (
        "escalated_queued",
        "demo-pcf",
        {"items": len(escalated)},
    )
