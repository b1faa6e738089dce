"""Labels and human gold leave the tool whole: JSON Lines, CSV and Parquet round-trip every
field, texts included."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pcf.access import Actor, Role, operator
from pcf.analysis.agreement import compare_with_humans
from pcf.cli import app
from pcf.items import Candidate, Item
from pcf.labelling.exports import (
    GOLD_SCHEMA,
    LABEL_SCHEMA,
    gold_records,
    label_records,
    write_records,
)
from pcf.labelling.human_gold import dataset_gold, rule_text
from pcf.labelling.plan import set_plan
from pcf.labelling.resolutions import resolve
from pcf.store import add_adjudication, current_labels, import_items, load_items
from tests.factories import enrol, make_item

HARD = '=HYPERLINK("http://x") "quoted", comma, new\nline, 日本語, tab\there'


@pytest.fixture
def labelled(session):
    """A dataset of two items: both labelled by two people (one correction), one resolved."""
    found = import_items(
        [make_item("q1"), make_item("q2")], session=session, name="team", fmt="jsonl"
    )
    first, second = (i.metadata["db_id"] for i in load_items(found.id, session=session))
    add_adjudication(first, session=session, annotator="ann", choice="c0", notes=HARD)
    add_adjudication(first, session=session, annotator="ann", choice="c1", tags=["near-tie", "x"])
    add_adjudication(first, session=session, annotator="bob", choice="c2", confidence=0.75)
    add_adjudication(second, session=session, annotator="ann", choice="none_correct")
    add_adjudication(second, session=session, annotator="bob", choice="none_correct")
    rita = Actor("rita@x.org", Role.REVIEWER)
    enrol(session, rita)
    resolve(first, session=session, actor=rita, choice="c1", reason=HARD)
    session.commit()
    return found.id


def test_every_format_round_trips_every_field(session, labelled, tmp_path):
    labels, gold = label_records(labelled, session=session), gold_records(labelled, session=session)
    assert [r["choice"] for r in labels] == ["c0", "c1", "c2", "none_correct", "none_correct"]
    assert [(g["item_id"], g["human_gold"], g["source"]) for g in gold] == [
        ("q1", "c1", "resolution"),
        ("q2", None, None),
    ]
    assert gold[0]["labels"] == [
        {"annotator": "ann", "choice": "c1"},
        {"annotator": "bob", "choice": "c2"},
    ]
    assert gold[0]["resolutions"][0]["reason"] == HARD
    for records, schema, name in ((labels, LABEL_SCHEMA, "labels"), (gold, GOLD_SCHEMA, "gold")):
        write_records(records, tmp_path / f"{name}.parquet", "parquet", schema)
        assert pq.read_table(tmp_path / f"{name}.parquet").to_pylist() == records
        write_records(records, tmp_path / f"{name}.jsonl", "jsonl", schema)
        lines = (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == records
        write_records(records, tmp_path / f"{name}.csv", "csv", schema)
        with (tmp_path / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == len(records)
        assert rows[0]["item_id"] == "q1"
        assert json.loads(rows[0]["candidates"]) == records[0]["candidates"]
    with (tmp_path / "labels.csv").open(encoding="utf-8", newline="") as handle:
        first = next(csv.DictReader(handle))
    assert first["notes"] == "'" + HARD  # a spreadsheet opens it as text, not a formula


def test_the_commands_write_the_files(labelled, tmp_path):
    runner = CliRunner()
    out = tmp_path / "out" / "gold.parquet"
    done = runner.invoke(app, ["gold", "export", "team", "--out", str(out), "--format", "parquet"])
    assert done.exit_code == 0, done.output
    assert pq.read_table(out).num_rows == 2
    done = runner.invoke(app, ["labels", "export", "team", "--out", str(tmp_path / "l.jsonl")])
    assert done.exit_code == 0, done.output
    assert len((tmp_path / "l.jsonl").read_text(encoding="utf-8").splitlines()) == 5
    refused = runner.invoke(app, ["labels", "export", "nope", "--out", str(tmp_path / "x.csv")])
    assert refused.exit_code == 2
    assert "no dataset 'nope'" in refused.output
    clash = ["labels", "export", "team", "--out", str(tmp_path / "x.parquet"), "--format", "csv"]
    refused = runner.invoke(app, clash)
    assert refused.exit_code == 2
    assert "--out x.parquet names parquet but --format is csv" in refused.output
    assert not (tmp_path / "x.parquet").exists()


def test_an_hf_export_is_a_folder_both_datasets_loaders_read_with_a_card_of_plan_rule_and_counts(
    session, labelled, tmp_path, monkeypatch
):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    set_plan(labelled, session=session, actor=operator(), labels_per_item=2, gold_rule="majority")
    session.commit()
    cards = {}
    for what, records in (("labels", label_records), ("gold", gold_records)):
        out = tmp_path / f"{what}-hf"
        command = [what, "export", "team", "--out", str(out), "--format", "hf"]
        done = CliRunner().invoke(app, command)
        assert done.exit_code == 0, done.output
        expected = records(labelled, session=session)
        assert datasets.load_dataset(str(out), split="train").to_list() == expected
        saved = datasets.load_from_disk(str(out))  # the call HF users reach for
        assert list(saved) == ["train"]
        assert saved["train"].to_list() == expected
        assert saved["train"].features == datasets.Features.from_arrow_schema(
            LABEL_SCHEMA if what == "labels" else GOLD_SCHEMA
        )
        cards[what] = (out / "README.md").read_text(encoding="utf-8")
    for card in cards.values():
        assert "- Plan: 2 label(s) per item.\n" in card
        assert f"- Rule (majority): {rule_text('majority')}\n" in card
    assert "- Counts: 5 labels (corrections included) of 2 items by 2 people." in cards["labels"]
    assert "- Counts: 2 items; gold from resolution: 1, labels that give none: 1." in cards["gold"]


@pytest.mark.parametrize(("what", "schema"), [("labels", LABEL_SCHEMA), ("gold", GOLD_SCHEMA)])
def test_an_export_of_nothing_is_a_valid_file_of_its_format(session, tmp_path, what, schema):
    """No label yet: each format's file, its format taken from the name, opens with its
    columns and no row (the Parquet file was 0 bytes of JSON Lines)."""
    import_items([make_item("q1")], session=session, name="quiet", fmt="jsonl")
    session.commit()
    runner = CliRunner()
    for name in ("x.parquet", "x.csv", "x.jsonl"):
        done = runner.invoke(app, [what, "export", "quiet", "--out", str(tmp_path / name)])
        assert done.exit_code == 0, done.output
        assert f"wrote 0 {what} records" in done.output
    table = pq.read_table(tmp_path / "x.parquet")
    assert (table.num_rows, table.schema) == (0, schema)
    with (tmp_path / "x.csv").open(encoding="utf-8", newline="") as handle:
        assert list(csv.reader(handle)) == [schema.names]
    assert (tmp_path / "x.jsonl").read_text() == ""


def test_exports_name_each_choice_by_where_its_answer_differs(session):
    start = "Here is the list of years from 2000 to 2010 that were leap years in the calendar: "
    item = Item(
        "q1",
        "Which years from 2000 to 2010 were leap years?",
        (Candidate("c0", start + "2000, 2004 and 2008."), Candidate("c1", start + "2004 only.")),
        "c0",
    )
    found = import_items([item], session=session, name="alike", fmt="jsonl")
    db_id = load_items(found.id, session=session)[0].metadata["db_id"]
    add_adjudication(db_id, session=session, annotator="ann", choice="c1")
    add_adjudication(db_id, session=session, annotator="bob", choice="c1")
    add_adjudication(db_id, session=session, annotator="cat", choice="cannot_tell")
    labels, gold = label_records(found.id, session=session), gold_records(found.id, session=session)
    titles = [label["choice_title"] for label in labels]
    assert titles[0] == titles[1]
    assert titles[0].startswith("B · ")
    assert "2004 only." in titles[0]  # the words that tell it from A, not the shared start
    assert "Here is the list" not in titles[0]
    assert titles[2] is None  # no candidate chosen
    assert gold[0]["human_gold_title"] == titles[0]


def test_gold_waits_for_the_plans_labels_and_marks_single_label_gold(session, tmp_path):
    """With two labels per item, an item with one label has no gold (no export record, not
    counted on Compare); under the adaptive plan its one label is gold, marked single_label."""
    found = import_items(
        [make_item("q1"), make_item("q2"), make_item("q3")],
        session=session,
        name="two",
        fmt="jsonl",
    )
    q1, q2, q3 = (i.metadata["db_id"] for i in load_items(found.id, session=session))
    add_adjudication(q1, session=session, annotator="ann", choice="c0")
    add_adjudication(q2, session=session, annotator="ann", choice="c1")
    add_adjudication(q2, session=session, annotator="bob", choice="c1")
    add_adjudication(q3, session=session, annotator="ann", choice="c2")
    add_adjudication(q3, session=session, annotator="bob", choice="cannot_tell")
    session.commit()
    runner, out = CliRunner(), tmp_path / "gold.jsonl"

    def exported(*plan: str) -> dict[str, tuple[str, bool]]:
        done = runner.invoke(app, ["labelling", "set", "two", *plan])
        assert done.exit_code == 0, done.output
        done = runner.invoke(app, ["gold", "export", "two", "--out", str(out)])
        assert done.exit_code == 0, done.output
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        return {r["item_id"]: (r["human_gold"], r["single_label"]) for r in records}

    assert exported("--labels-per-item", "2") == {"q2": ("c1", False), "q3": ("c2", True)}
    human = dataset_gold(found.id, session=session)
    assert human.waiting == ("q1",)
    decisions = [
        {"item_id": q, "winner": "c0", "metrics": {"direct_winner": "c1"}}
        for q in ("q1", "q2", "q3")
    ]
    labels = current_labels(found.id, session=session)
    counts = dict.fromkeys(("q1", "q2", "q3"), 3)
    compared = compare_with_humans(decisions, labels, human.gold, candidates=counts)
    assert compared.adjudicated == 2
    assert list(compared.rows["item_id"]) == ["q2", "q3"]
    assert exported("--adaptive") == {"q1": ("c0", True), "q2": ("c1", False), "q3": ("c2", True)}
