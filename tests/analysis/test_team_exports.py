"""Labels and human gold leave the tool whole: JSON Lines, CSV and Parquet round-trip every
field, texts included."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pcf.access import Actor, Role
from pcf.analysis.team_exports import (
    GOLD_SCHEMA,
    LABEL_SCHEMA,
    gold_records,
    label_records,
    write_records,
)
from pcf.cli import app
from pcf.items import Candidate, Item
from pcf.labelling.gold import resolve
from pcf.store import add_adjudication, import_items, load_items
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
