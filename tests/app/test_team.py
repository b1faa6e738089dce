"""The Team and Resolve pages: progress and agreement per person, disagreements into gold."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import analyse_run
from pcf.cli import app
from pcf.labelling.adjudications import adjudication_queue, item_index, with_priority
from pcf.labelling.human_gold import dataset_gold
from pcf.labelling.plan import labelling_plan
from pcf.store import (
    add_adjudication,
    assignees_by_item,
    get_run,
    item_db_ids,
    load_items,
    save_member,
)
from tests.app import markdown_texts, open_page, signed_in_app


@pytest.fixture
def two_people(db: Session):
    """Ann and Bob labelled the demo's first six items; they disagree on the odd ones."""
    items = load_items(1, session=db)[:6]
    for i, item in enumerate(items):
        ids = item.candidate_ids
        add_adjudication(item.metadata["db_id"], session=db, annotator="ann@x.org", choice=ids[0])
        add_adjudication(
            item.metadata["db_id"], session=db, annotator="bob@x.org", choice=ids[i % 2]
        )
    db.commit()
    return [i.item_id for i in items]


def test_team_shows_each_persons_progress_and_their_kappa(two_people, db: Session):
    at = open_page(signed_in_app(db, "rita@x.org", "reviewer"), "team")
    assert not at.exception
    progress = next(d.value for d in at.dataframe if "annotator" in d.value.columns)
    assert list(progress["annotator"]) == ["ann@x.org", "bob@x.org"]
    assert list(progress["labels"]) == [6, 6]
    assert list(progress["agreement_with_others"]) == [0.5, 0.5]
    assert progress["estimated_accuracy"].between(0, 1).all()
    assert list(progress["flag"]) == ["", ""]  # six labels are too few to call a habit
    pairs = next(d.value for d in at.dataframe if "kappa" in d.value.columns)
    items = load_items(1, session=db)[:6]
    chance = sum(1 / len(i.candidate_ids) for i in items) / 6
    expected = (3 / 6 - chance) / (1 - chance)  # bob agrees with ann on every other item
    assert pairs["kappa"].tolist() == pytest.approx([expected])
    assert pairs["n"].tolist() == ["n=6, too few (under 20)"]  # the six items both labelled
    everyone = next(d.value for d in at.dataframe if "bucket" in d.value.columns)
    assert everyone.set_index("bucket").loc["all", "n"] == "n=6, too few (under 20)"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Items complete"] == "6"
    assert not [b for b in at.button if b.label == "Save the plan"]  # reviewers do not plan


def test_an_admin_sets_the_plan_on_the_team_page(db: Session):
    at = open_page(signed_in_app(db, "adam@x.org", "admin"), "team")
    at.number_input[0].set_value(2)
    next(s for s in at.selectbox if s.label == "Gold rule").set_value("majority")
    next(n for n in at.number_input if n.label == "Random calibration share").set_value(0.2)
    next(b for b in at.button if b.label == "Save the plan").click().run()
    assert not at.exception
    plan = labelling_plan(1, session=db)
    assert (plan.labels_per_item, plan.gold_rule, plan.calibration_share) == (2, "majority", 0.2)
    assert any("a random 20% first" in m for m in markdown_texts(at))


def test_a_reviewer_resolves_a_disagreement_and_it_leaves_the_queue(two_people, db):
    at = open_page(signed_in_app(db, "rita@x.org", "reviewer"), "resolve")
    assert not at.exception
    first = two_people[1]
    assert at.selectbox[0].value == first
    assert at.selectbox[0].options == [two_people[1], two_people[3], two_people[5]]
    item = next(i for i in load_items(1, session=db) if i.item_id == first)
    at.radio[0].set_value(item.candidate_ids[1])
    at.text_area[0].input("checked the source")
    next(b for b in at.button if b.label == "Set gold").click().run()
    assert not at.exception
    assert at.selectbox[0].value == two_people[3]
    gold = dataset_gold(1, session=db)
    assert (gold.gold[first], gold.source[first]) == (item.candidate_ids[1], "resolution")
    at.text_input(key="resolve_find").input(two_people[5].upper()).run()
    assert at.selectbox[0].options == [two_people[5]]


def test_a_reviewer_assigns_the_most_doubtful_items_and_team_reads_x_of_n(two_people, db):
    save_member("cat@x.org", "annotator", session=db, added_by="test")
    db.commit()
    at = open_page(signed_in_app(db, "rita@x.org", "reviewer"), "team")
    form = next(s for s in at.selectbox if s.label == "To")
    assert {"rita@x.org", "cat@x.org"} <= set(form.options)
    form.set_value("cat@x.org")
    next(n for n in at.number_input if n.label.startswith("The most doubtful")).set_value(3)
    next(b for b in at.button if b.label == "Assign").click().run()
    assert not at.exception
    assigned = f"**Assigned**: {escape_markdown('cat@x.org')} 0 of 3"
    assert assigned in markdown_texts(at)
    run = get_run("demo-pcf", session=db)
    ranked = with_priority(item_index(1, session=db), analyse_run(run, session=db).table)
    free = [k for k in adjudication_queue(ranked, ()) if k not in two_people]
    ids = item_db_ids(1, session=db)
    assert assignees_by_item(1, session=db) == {ids[k]: "cat@x.org" for k in free[:3]}


def test_annotators_have_no_resolve_page(db):
    at = signed_in_app(db, "ann@x.org", "annotator")
    with pytest.raises(ValueError, match="navigation page"):
        open_page(at, "resolve")


def test_labels_imported_from_a_file_show_on_team_and_compare(db: Session, tmp_path):
    """Two benchmark raters, no members, gave the demo's first four items their gold: on Team
    they are two people with four labels each, on Compare four items of human gold."""
    items = load_items(1, session=db)[:4]
    rows = [{"item_id": i.item_id, "answer": i.gold} for i in items]
    path = tmp_path / "labels.jsonl"
    path.write_text(
        "".join(json.dumps(r | {"annotator": who}) + "\n" for who in ("b1", "b2") for r in rows)
    )
    for command in (
        ["labelling", "set", "demo", "--labels-per-item", "2"],
        ["labels", "import", str(path), "--dataset", "demo", "--source", "bench"],
    ):
        done = CliRunner().invoke(app, command)
        assert done.exit_code == 0, done.output
    at = open_page(signed_in_app(db, "rita@x.org", "reviewer"), "team")
    assert not at.exception
    progress = next(d.value for d in at.dataframe if "annotator" in d.value.columns)
    assert (list(progress["annotator"]), list(progress["labels"])) == (["b1", "b2"], [4, 4])
    assert {m.label: m.value for m in at.metric}["Items complete"] == "4"
    at = open_page(at, "compare")
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Adjudicated items"], metrics["Humans agree with gold"]) == ("4", "4 / 4")
