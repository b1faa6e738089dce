"""Trust or escalate (pcf/analysis/escalate.py): the guarantee over many seeded draws on judges
whose confidence helps, tells nothing, or points the wrong way; and `pcf escalate` on the demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from pcf.access import AccessDeniedError, Actor, Role
from pcf.analysis.escalate import escalate, threshold
from pcf.cli import app
from pcf.labelling.plan import calibration_order, queue_escalated
from pcf.labelling.queue import claim_next
from pcf.run_settings import parse_run_settings
from pcf.store import (
    add_adjudication,
    audit_events,
    get_dataset,
    get_engine,
    get_run,
    insert_calls,
    item_db_ids,
    load_items,
    session_scope,
)
from tests.factories import call_row, enrol, stored_run

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
    tiny = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "5e-324"])  # once a crash
    assert tiny.exit_code == 2
    assert "alpha and delta must be 1e-06 or more" in tiny.output


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
    tiny = runner.invoke(app, ["escalate", "demo-pcf", "--alpha", "5e-324"])  # once a crash
    assert tiny.exit_code == 2
    assert "alpha and delta must be 1e-06 or more" in tiny.output


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


def generated_run(
    tmp_path, name: str, picks: list[list[str | None]], *, stops: dict | None = None
) -> None:
    """A run of items with candidates ``a`` and ``b`` (gold ``a``), one call per entry of an
    item's ``picks`` (its top pick, None for a failed call), stored without a judge; an
    adaptive ``confident`` run when ``stops`` are given."""
    rows = [
        {
            "item_id": f"q{i:03d}",
            "prompt": f"Question {i}?",
            "gold": "a",
            "bucket": None,
            "candidates": [{"id": "a", "text": "Right."}, {"id": "b", "text": "Wrong."}],
        }
        for i in range(len(picks))
    ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert runner.invoke(app, ["import", "jsonl", str(path), "--name", name]).exit_code == 0
    with session_scope(get_engine()) as session:
        dataset = get_dataset(name, session=session)
        ids = item_db_ids(dataset.id, session=session)
        settings = {"identity": {"adaptive": "confident"}, "stops": stops} if stops else {}
        run = stored_run(
            session, dataset.id, name=name, k=6, seed=0, settings=parse_run_settings(settings)
        )
        calls = []
        for i, item_picks in enumerate(picks):
            for c, top in enumerate(item_picks):
                order = ["a", "b"] if c % 2 == 0 else ["b", "a"]
                fields: dict = {"ok": False, "judgment": None}
                if top is not None:
                    other = "b" if top == "a" else "a"
                    fields = {
                        "judgment": {
                            "factuality": {top: 9.0, other: 2.0},
                            "hallucination_risk": {top: 0.1, other: 0.5},
                            "ranking": [top, other],
                            "confidence": 0.9,
                        }
                    }
                key = f"{name}-{i}-{c}"
                calls.append(
                    call_row(run.id, ids[f"q{i:03d}"], c, order=order, content_key=key, **fields)
                )
        insert_calls(calls, session=session)


def test_the_printed_promise_holds_on_a_finite_set_of_confidently_wrong_items(
    isolated_database, tmp_path
):
    """400 items, a judge sure of every one and wrong on 8.75%: split at random 300 times,
    the held-out decided items agree less than 0.9 whenever anything is decided (a lucky
    calibration half leaves an unlucky other half), so the promise printed is the one the
    procedure keeps, for a new item, with the realized figure beside it, never bounded."""
    generated_run(tmp_path, "sure", [["b", "b"] if i < 35 else ["a", "a"] for i in range(400)])
    population_risk = 35 / 400  # a new item drawn like these, all at the threshold
    decided_splits = kept = 0
    with session_scope(get_engine()) as session:
        run = get_run("sure", session=session)
        for seed in range(300):
            figures = escalate(run, session=session, alpha=0.1, delta=0.1, seed=seed)
            held = figures["held_out_agreement"]
            if figures["threshold"] is None:
                kept += 1
                assert figures["decided"] == []
                continue
            decided_splits += 1
            assert "a new item" in figures["guarantee"]
            assert "not the share of this run's decided items" in figures["guarantee"]
            assert held["items"] == len(figures["decided"]) == 200
            assert held["agreement"] < 0.9  # what the old promise claimed >= 0.9
            kept += population_risk <= 0.1
    assert decided_splits > 0
    assert kept / 300 >= 0.9


def test_escalating_an_adaptive_run_calibrates_on_items_judged_in_full(isolated_database, tmp_path):
    """An adaptive run: 100 items judged in full at random (the first two all calls failed,
    no winner), 87% of them unanimous and right; 300 stopped after two agreeing calls, wrong on
    one in eight. Over 12 seeds the decided items are only held-out full items, and agree at
    least as the bound says in >= 1 - delta of seeds; no item without a winner is decided; the
    JSON is valid (no NaN or Infinity)."""
    rng = np.random.default_rng(5)
    picks: list[list[str | None]] = []
    stops = {}
    for i in range(400):
        if i < 2:
            picks.append([None] * 6)
        elif i < 100:
            split = rng.uniform() < 0.13
            picks.append(["a", "b", "b", "a", "b", "a"] if split else ["a"] * 6)
        else:
            picks.append(["b", "b"] if rng.uniform() < 0.125 else ["a", "a"])
        reason = "calibration" if i < 100 else "confident"
        stops[f"q{i:03d}"] = {"calls": len(picks[-1]), "reason": reason, "winner": 0}
    generated_run(tmp_path, "adaptive", picks, stops=stops)
    held, decided = [], 0
    with session_scope(get_engine()) as session:
        run = get_run("adaptive", session=session)
        for seed in range(12):
            figures = escalate(run, session=session, alpha=0.1, delta=0.1, seed=seed)
            assert "judged in full" in figures["calibration"]["note"]
            assert all(int(key[1:]) in range(2, 100) for key in figures["decided"])
            assert not {"q000", "q001"} & set(figures["decided"])  # no winner: escalated
            decided += len(figures["decided"])
            agreement = figures["held_out_agreement"]["agreement"]
            held.append(agreement is None or agreement >= 1 - 0.1)
    assert sum(held) >= 0.9 * 12
    assert decided > 12 * 20  # most held-out full items are decided
    printed = runner.invoke(app, ["escalate", "adaptive", "--signal", "margin"])
    assert printed.exit_code == 0, printed.output
    assert "NaN" not in printed.stdout
    assert "Infinity" not in printed.stdout
    assert not {"q000", "q001"} & set(json.loads(printed.stdout)["decided"])


def test_human_calibration_refuses_a_share_partly_labelled_or_disputed(db):
    """Calibrating on the labelled part of the share would calibrate on a non-random sample
    (disputed items are the judge's hard ones): escalation waits and names the count."""
    assert (
        runner.invoke(app, ["labelling", "set", "demo", "--calibration-share", "0.5"]).exit_code
        == 0
    )
    dataset = get_dataset("demo", session=db)
    share = calibration_order(dataset.id, session=db)
    ids = item_db_ids(dataset.id, session=db)
    items = {item.item_id: item for item in load_items(dataset.id, session=db)}
    unlabelled, disputed = set(share[:3]), share[3]
    for key, item in items.items():
        if key not in unlabelled:
            add_adjudication(ids[key], session=db, annotator="ann", choice=item.gold)
    other = next(c for c in items[disputed].candidate_ids if c != items[disputed].gold)
    add_adjudication(ids[disputed], session=db, annotator="bob", choice=other)
    db.commit()
    refused = runner.invoke(app, ["escalate", "demo-pcf", "--calibration-labels", "humans"])
    assert refused.exit_code == 2
    assert "4 of the 26 items of the random calibration share have no human gold" in (
        refused.output
    )
