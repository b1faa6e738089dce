"""The Weights page: presets, sliders and K recompute accuracy; the seed's weight table; an
adaptive run under the weights it settled on alone."""

from __future__ import annotations

import pytest
from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.analysis.results import run_decisions
from pcf.analysis.whatif import whatif
from pcf.decisions import aggregate
from pcf.stopping import StoppingPolicy
from pcf.store import get_run, load_items, run_judgments
from pcf.weights import PRESETS, Weights
from tests.app import open_page


@pytest.fixture
def at(app: AppTest) -> AppTest:
    """The Weights page on the demo database (run demo-pcf selected by the sidebar)."""
    page = open_page(app, "weights")
    assert not page.exception, [e.message for e in page.exception]
    return page


def expected_accuracy(
    db: Session, run: str, weights: Weights, k: int | None = None
) -> tuple[str, str]:
    """(consensus, direct) accuracy as the page formats it, recomputed with `aggregate` on
    execution 0's calls (the matched single-run diagnostic)."""
    stored = get_run(run, session=db)
    items = load_items(stored.dataset_id, session=db)
    calls = [j for j in run_judgments(stored.id, session=db) if j.execution == 0]
    records = aggregate(calls, items=items, weights=weights, k=k)
    gold = {i.item_id: i.gold for i in items}
    method = sum(r["winner"] == gold[r["item_id"]] for r in records) / len(records)
    direct = sum(r["metrics"]["direct_winner"] == gold[r["item_id"]] for r in records)
    return f"{100 * method:.1f}%", f"{100 * direct / len(records):.1f}%"


def shown(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_opens_on_the_proposed_weights_with_the_simulated_badge(at, db):
    assert at.selectbox(key="weights_preset").value == "proposed"
    assert at.slider(key="weights_ws").value == 0.5
    assert at.slider(key="weights_k").value == 7
    method, direct = expected_accuracy(db, "demo-pcf", PRESETS["proposed"])
    assert shown(at)["Accuracy"] == method
    assert shown(at)["Direct accuracy"] == direct
    assert any("Simulated judge" in w.value for w in at.warning)


def test_score_only_preset_changes_accuracy_to_aggregates(at, db):
    at.selectbox(key="weights_preset").set_value("score-only").run()
    assert not at.exception
    assert [at.slider(key=f"weights_{n}").value for n in ("ws", "wB", "wv", "wu")] == [1, 0, 0, 0]
    method, _ = expected_accuracy(db, "demo-pcf", PRESETS["score-only"])
    assert method != expected_accuracy(db, "demo-pcf", PRESETS["proposed"])[0]
    assert shown(at)["Accuracy"] == method
    changed = at.dataframe[0].value
    assert len(changed) == int(shown(at)["Improved"]) + int(shown(at)["Regressed"]) + sum(
        changed["outcome"] == "both wrong"
    )


def test_sliders_and_k_recompute_and_name_the_preset(at, db):
    at.slider(key="weights_k").set_value(3).run()
    at.slider(key="weights_wu").set_value(0.0).run()
    assert at.selectbox(key="weights_preset").value == "custom"
    weights = Weights(0.5, 0.25, 0.2, 0.0)
    assert shown(at)["Accuracy"] == expected_accuracy(db, "demo-pcf", weights, k=3)[0]
    for name, value in zip(("ws", "wB", "wv"), (0.0, 0.0, 1.0), strict=True):
        at.slider(key=f"weights_{name}").set_value(value).run()
    assert at.selectbox(key="weights_preset").value == "vote-only"


def test_all_zero_weights_are_refused(at):
    at.selectbox(key="weights_preset").set_value("score-only").run()
    at.slider(key="weights_ws").set_value(0.0).run()
    assert not at.exception
    assert "cannot all be zero" in at.error[0].value


def test_weight_table_has_the_six_presets_for_the_selected_runs(at, db):
    table = at.dataframe[-1].value
    assert table.index.tolist() == list(PRESETS)
    assert "demo-pcf accuracy %" in table.columns
    assert "demo-repeated Δ vs direct" in table.columns
    expected = expected_accuracy(db, "demo-repeated", PRESETS["rank-only"])[0]
    assert f"{table.loc['rank-only', 'demo-repeated accuracy %']:.1f}%" == expected
    at.multiselect(key="weights_table_runs").set_value(["demo-pcf"]).run()
    table = at.dataframe[-1].value
    assert len(table) == 6
    assert [c for c in table.columns if c.startswith("demo-")] == [
        "demo-pcf accuracy %",
        "demo-pcf Δ vs direct",
    ]


def test_a_direct_run_has_no_k_slider(at):
    at.sidebar.selectbox(key="run").set_value("demo-direct").run()
    assert not at.exception
    assert not [s for s in at.slider if s.key == "weights_k"]
    assert shown(at)["Accuracy"] == shown(at)["Direct accuracy"]


def test_the_adaptive_budget_curve_is_whatif_on_the_run(at, db):
    # The curve replays every policy on the run: a hang guard, not a speed bound (about 9 s on
    # a quiet 2-core machine).
    at.toggle(key="weights_budget").set_value(True).run(timeout=180)
    assert not at.exception, [e.message for e in at.exception]
    shown_curve = at.dataframe[-1].value.set_index("policy")
    run = get_run("demo-pcf", session=db)
    certain = whatif(run, StoppingPolicy("certain"), session=db)
    careful = whatif(run, StoppingPolicy("confident", risk=0.01), session=db)
    assert shown_curve.loc["certain", "calls_per_item"] == pytest.approx(certain["calls_per_item"])
    assert shown_curve.loc["confident R=0.01", "same winner as the full run"] == pytest.approx(
        careful["same_winner"]
    )
    assert shown_curve.loc["full run", "calls_per_item"] == 21
    assert shown_curve.loc["full run", "accuracy against gold"] == pytest.approx(
        certain["against_gold"]["full"]
    )


def test_an_adaptive_run_is_shown_only_under_the_weights_it_settled_on(adaptive_run, at, db):
    at.sidebar.selectbox(key="run").set_value(adaptive_run).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("Adaptive run" in i.value and "rank-only" in i.value for i in at.info)
    assert not [s for s in at.slider if s.key in ("weights_ws", "weights_k")]
    run = get_run(adaptive_run, session=db)
    gold = {i.item_id: i.gold for i in load_items(run.dataset_id, session=db)}
    records = run_decisions(run, session=db)  # every call, under the run's weights
    right = sum(r["winner"] == gold[r["item_id"]] for r in records)
    assert shown(at)["Accuracy"] == f"{100 * right / len(records):.1f}%"
    assert adaptive_run not in at.multiselect(key="weights_table_runs").options
    assert any("Adaptive runs are left out" in c.value for c in at.caption)
    assert any("no full run to replay" in c.value for c in at.caption)
