"""The Overview page on the demo database."""

from __future__ import annotations

from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.access import operator
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import accuracy_against, analyse_run, gold_answers, run_summary
from pcf.analysis.triage import run_triage
from pcf.consensus import pack
from pcf.flags import FLAGS
from pcf.instability import slot_bias
from pcf.labelling.membership import set_local_name
from pcf.labelling.plan import set_plan
from pcf.runs.study import DEMO_RUNS
from pcf.store import (
    add_adjudication,
    get_run,
    item_db_ids,
    load_items,
    run_judgments,
)
from tests.app import APP, markdown_texts, open_page


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def frame_with(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_overview_explains_the_tool_and_flags_the_simulated_judge(app):
    at = open_page(app, "overview")
    assert not at.exception
    assert "several orderings" in at.markdown[0].value
    assert any("Simulated judge" in w.value for w in at.warning)
    assert list(frame_with(at, "protocol")["run"]) == [spec.run_name for spec in DEMO_RUNS]


def test_accuracy_flags_and_slot_bias_match_the_stored_run(app, db: Session):
    at = open_page(app, "overview")
    run = get_run("demo-pcf", session=db)
    summary = run_summary(run, session=db)
    stats = summary["accuracy"]
    shown = metrics(at)
    assert shown["Direct accuracy"] == f"{stats['direct_accuracy']:.1%}"
    assert shown["Consensus accuracy"] == f"{stats['method_accuracy']:.1%}"
    assert shown["Improved / regressed / same"] == (
        f"{stats['improved']} / {stats['regressed']} / {stats['same']}"
    )
    assert shown["McNemar p (exact)"] == f"{stats['mcnemar_p']:.3g}"
    low, high = stats["ci_points"]
    assert any(f"change is [{low:+.1f}, {high:+.1f}] points" in m for m in markdown_texts(at))

    flags = frame_with(at, "meaning")
    assert dict(zip(flags["flag"], flags["items"], strict=True)) == summary["flagged"]
    assert list(flags["flag"]) == list(FLAGS)

    (group,) = pack(run_judgments(run.id, session=db))
    bias = slot_bias(group)
    assert any(
        f"chi-square against uniform (dashed line) = {bias.chi2:.1f}, p = {bias.p_value:.3g}"
        in text
        for text in markdown_texts(at)
    )
    shares = frame_with(at, "share of top picks")["share of top picks"]
    assert list((shares / 100).round(9)) == list(bias.top_share.round(9))


def test_the_direct_run_says_it_is_the_baseline(app):
    app.sidebar.selectbox(key="run").set_value("demo-direct")
    at = open_page(app, "overview")
    assert not at.exception
    assert any("direct baseline" in i.value for i in at.info)
    assert metrics(at)["Improved / regressed / same"] == "0 / 0 / 52"


def test_human_labels_get_their_own_accuracy(app, db: Session):
    dataset_id = get_run("demo-pcf", session=db).dataset_id
    items = load_items(dataset_id, session=db)[:3]
    ids = item_db_ids(dataset_id, session=db)
    for item in items:
        add_adjudication(ids[item.item_id], session=db, annotator="ann", choice=item.gold)
    db.commit()
    at = open_page(app, "overview")
    assert not at.exception
    assert any(m.startswith("**Against human labels** (3 items):") for m in markdown_texts(at))
    assert metrics(at)["Items adjudicated"] == "3"


def test_the_triage_curve_counts_the_judges_errors_found(app, db: Session):
    at = open_page(app, "overview")
    assert not at.exception
    curves, wrong, _ = run_triage(
        get_run("demo-pcf", session=db), session=db, orders=["priority", "calibrated"]
    )
    shown = metrics(at)
    for found in curves:
        assert shown[f"{found.order}: errors found at 20%"] == f"{100 * found.at(0.2):.0f}%"
    assert any(f"{sum(wrong)} of 52 items have a wrong or no winner" in c.value for c in at.caption)


def test_an_adaptive_run_says_so_and_how_it_stopped(adaptive_run, app):
    at = open_page(app, "overview")
    at.sidebar.selectbox(key="run").set_value(adaptive_run).run()
    assert not at.exception, [e.message for e in at.exception]
    runs = frame_with(at, "stopping").set_index("run")["stopping"]
    assert runs[adaptive_run] == "confident R=0.05 on rank-only"
    assert runs["demo-pcf"] == "full run"
    notes = [i.value for i in at.info if "Adaptive run" in i.value]
    assert notes
    assert "K and weight tables leave it out" in notes[0]


def test_the_demo_opens_on_its_strong_bias_run_told_in_words(db: Session):
    set_local_name("Ada", session=db)
    db.commit()
    at = AppTest.from_file(str(APP), default_timeout=30).run()  # no run picked: the default
    assert not at.exception
    assert at.sidebar.selectbox(key="run").value == "demo-strong-bias-pcf"
    # The box cuts a long name; the caption under it says it in full, with what the run is.
    described = at.sidebar.caption[0].value.replace("\\", "")
    assert described == "demo-strong-bias-pcf: pcf, K=7, simulated/sim-strong-primacy"
    table = analyse_run(get_run("demo-strong-bias-pcf", session=db), session=db).table
    stats = accuracy_against(table, gold_answers(table))
    changed = int(table["overrides_direct"].sum())
    assert stats["improved"] > stats["regressed"]  # the run where the orderings pay off
    summary = "\n".join(markdown_texts(at))
    assert (
        f"changed **{changed} of {len(table)}** verdicts of the judge's first reading: "
        f"**{stats['improved']} better, {stats['regressed']} worse** against gold labels"
    ) in summary
    assert "most doubtful items first**: they hold **" in summary
    assert not [e for e in at.expander if e.label.startswith("The statistics") and e.proto.expanded]

    other = at.button(key="overview_run_demo-pcf")
    assert other.label == escape_markdown("demo-pcf (simulated, sim-primacy)")
    other.click().run()
    assert at.sidebar.selectbox(key="run").value == "demo-pcf"
    assert at.sidebar.caption[0].value.replace("\\", "").startswith("demo-pcf: pcf, K=7,")
    assert any(h.value.replace("\\", "") == "Run demo-pcf" for h in at.subheader)
    assert (
        at.button(key="overview_run_demo-strong-bias-pcf")
        .label.replace("\\", "")
        .startswith("demo-strong-bias-pcf (simulated, ")
    )


def test_overview_shows_the_escalate_split_once_a_random_share_has_human_gold(app, db: Session):
    at = open_page(app, "overview")
    assert any(
        "Not yet: the labelling plan reserves no random calibration share" in m
        for m in markdown_texts(at)
    )
    dataset_id = get_run("demo-pcf", session=db).dataset_id
    set_plan(dataset_id, session=db, actor=operator(), calibration_share=0.5)
    ids = item_db_ids(dataset_id, session=db)
    for item in load_items(dataset_id, session=db):
        add_adjudication(ids[item.item_id], session=db, annotator="ann", choice=item.gold)
    db.commit()
    at = open_page(app, "overview")
    assert not at.exception
    (split,) = [m for m in markdown_texts(at) if "random human gold items" in m]
    assert split.startswith("Simulated judge: the judge may decide ")
    assert "(26 random human gold items, alpha 0.1, delta 0.1)" in split
