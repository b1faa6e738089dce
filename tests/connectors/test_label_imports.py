"""Labels from elsewhere: `pcf labels import` of JSON Lines, CSV or Parquet, all or nothing,
under the plan's rules, each label keeping its source."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pcf.access import AccessDeniedError, Actor, Role, operator
from pcf.cli import app
from pcf.connectors import label_imports
from pcf.connectors.label_imports import import_labels
from pcf.store import (
    add_adjudication,
    adjudication_records,
    audit_events,
    import_items,
    item_db_ids,
    save_plan,
)
from tests.factories import enrol, make_item

runner = CliRunner()
GOOD = [
    {
        "item_id": "q1",
        "annotator": "rater-1",
        "answer": "c0",
        "confidence": 0.75,
        "note": "=checked, twice",
        "time": "2026-11-30T09:00:00+00:00",
    },
    {"item_id": "q1", "annotator": "rater-2", "answer": "c1", "confidence": None, "note": ""},
    {"item_id": "q2", "annotator": "rater-1", "answer": "none_correct", "confidence": 0.5},
]


def write(rows: list[dict], path: Path) -> Path:
    """``rows`` as the file ``path``'s suffix names; Parquet keeps times as timestamps."""
    frame = pd.DataFrame(rows)
    if "time" not in frame:
        frame["time"] = None
    if path.suffix == ".parquet":
        frame.assign(time=pd.to_datetime(frame["time"], utc=True)).to_parquet(path)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def team(session) -> int:
    """Items q1 and q2 (candidates c0 to c3), two labels per item."""
    found = import_items(
        [make_item("q1"), make_item("q2")], session=session, name="team", fmt="jsonl"
    )
    session.commit()
    done = runner.invoke(app, ["labelling", "set", "team", "--labels-per-item", "2"])
    assert done.exit_code == 0, done.output
    return found.id


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_one_bad_row_imports_nothing_and_a_good_file_round_trips(
    session, team, suffix, tmp_path, monkeypatch
):
    monkeypatch.setattr(label_imports, "BATCH", 2)  # the bad row comes after a batch was stored
    bad = write(
        [*GOOD, {**GOOD[2], "annotator": "rater-2", "answer": "c9"}], tmp_path / f"b{suffix}"
    )
    done = runner.invoke(app, ["labels", "import", str(bad), "--dataset", "team"])
    assert done.exit_code == 1
    line = 5 if suffix == ".csv" else 4  # a CSV's header is its line 1; Parquet counts rows
    assert done.output.splitlines() == [
        f"1 problem(s) in {bad}; nothing imported:",
        f"{bad}:{line}: answer: 'c9' is not one of: c0, c1, c2, c3, none_correct, cannot_tell",
    ]
    assert adjudication_records(team, session=session) == []
    good = write(GOOD, tmp_path / f"labels{suffix}")
    done = runner.invoke(
        app, ["labels", "import", str(good), "--dataset", "team", "--source", "bench"]
    )
    assert done.exit_code == 0, done.output
    assert "imported 3 labels into team" in done.output
    exported = tmp_path / "out.jsonl"
    done = runner.invoke(app, ["labels", "export", "team", "--out", str(exported)])
    assert done.exit_code == 0, done.output
    records = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    named = {"answer": "choice", "note": "notes", "time": "created_at"}
    for row, record in zip(GOOD, records, strict=True):
        assert {key: record[named.get(key, key)] for key in row} == row
    assert {r["source"] for r in records} == {"bench"}
    assert {r["supersedes"] for r in records} == {None}
    [event] = [e for e in audit_events(session=session) if e.action == "labels_imported"]
    assert event.actor.startswith("operator:")
    assert (event.target, event.details["labels"], event.details["source"]) == ("team", 3, "bench")


def test_every_rule_is_checked_against_the_file_and_the_labels_already_given(
    session, team, tmp_path
):
    """The plan asks two labels per item; ann labelled q2 in PCF already."""
    q2 = item_db_ids(team, session=session)["q2"]
    add_adjudication(q2, session=session, annotator="ann@x.org", choice="c0")
    session.commit()
    rows = [
        {"item_id": "q1", "annotator": "rater-1", "answer": "c0"},  # 1: fine
        {"item_id": "q9", "annotator": "rater-1", "answer": "c0"},
        {"item_id": "q1", "annotator": "rater-1", "answer": "c1"},
        {"item_id": "q1", "annotator": "rater-2", "answer": "c1"},  # 4: the second label
        {"item_id": "q1", "annotator": "rater-3", "answer": "c1"},
        {"item_id": "q2", "annotator": "ann@x.org", "answer": "c2"},
        {"item_id": "q2", "annotator": "rater-1", "answer": "c2", "confidence": 1.5},
        {"item_id": "q2", "annotator": "rater-1", "answer": "c2", "time": "2026-11-30T09:00:00"},
        {"item_id": "q2", "answer": "c2"},
    ]
    path = write(rows, tmp_path / "labels.jsonl")
    done = runner.invoke(app, ["labels", "import", str(path), "--dataset", "team"])
    assert done.exit_code == 1
    assert done.output.splitlines()[1:] == [
        f"{path}:2: item_id: no item 'q9' in dataset 'team'",
        f"{path}:3: annotator: 'rater-1' labelled 'q1' already",
        f"{path}:5: item_id: item 'q1' has the 2 label(s) its plan asks for",
        f"{path}:6: annotator: 'ann@x.org' labelled 'q2' already",
        f"{path}:7: confidence: must be a number from 0 to 1, got 1.5",
        f"{path}:8: time: must be a date and time with its time zone (2026-12-04T10:00:00Z)",
        f"{path}:9: annotator: missing",
    ]
    assert [r["annotator"] for r in adjudication_records(team, session=session)] == ["ann@x.org"]


def test_only_an_admin_imports_labels(session, team, tmp_path):
    rita = Actor("rita@x.org", Role.REVIEWER)
    enrol(session, rita)
    path = write(GOOD, tmp_path / "labels.jsonl")
    with pytest.raises(AccessDeniedError, match=r"rita@x\.org is reviewer and may not import"):
        import_labels(path, team, session=session, actor=rita, source="bench")
    assert adjudication_records(team, session=session) == []


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_one_person_in_four_spellings_is_one_annotator_or_a_problem_by_line(
    session, team, suffix, tmp_path
):
    """Case, padding and a zero width space once made four people of one, so one person's two
    labels read as a unanimous gold. Annotators are compared as their identity key."""
    q2 = item_db_ids(team, session=session)["q2"]
    add_adjudication(q2, session=session, annotator="ext@x.org", choice="c0")
    session.commit()
    spellings = ["ext@x.org", "EXT@X.ORG", "ext@x.org ", "ext@x.org\u200b"]
    rows = [{"item_id": "q1", "annotator": name, "answer": "c0"} for name in spellings]
    rows.append({"item_id": "q2", "annotator": "Ext@X.org", "answer": "c1"})
    path = write(rows, tmp_path / f"labels{suffix}")
    done = runner.invoke(app, ["labels", "import", str(path), "--dataset", "team"])
    assert done.exit_code == 1
    first = 2 if suffix == ".csv" else 1  # a CSV's header is its line 1
    assert done.output.splitlines()[1:] == [
        f"{path}:{first + 1}: annotator: 'ext@x.org' labelled 'q1' already",
        f"{path}:{first + 2}: annotator: 'ext@x.org' labelled 'q1' already",
        f"{path}:{first + 3}: annotator: 'ext@x.org\\u200b' holds an invisible character "
        "(U+200B ZERO WIDTH SPACE), with which it could pass for someone else's: remove it",
        f"{path}:{first + 4}: annotator: 'ext@x.org' labelled 'q2' already",
    ]
    assert [r["annotator"] for r in adjudication_records(team, session=session)] == ["ext@x.org"]
    good = write(
        [{"item_id": "q1", "annotator": " EXT@X.ORG", "answer": "c1"}], tmp_path / "g.jsonl"
    )
    done = runner.invoke(app, ["labels", "import", str(good), "--dataset", "team"])
    assert done.exit_code == 0, done.output
    assert [r["annotator"] for r in adjudication_records(team, session=session)] == [
        "ext@x.org"
    ] * 2


NOTE = "read twice, then checked against the source. " * 5  # rows of ~0.3 KB: the ids the
# import keeps per item (~10 bytes a row) stay under a tenth of the file's growth


def imported_peak(session, rows: int, tmp_path: Path) -> tuple[int, int]:
    """The size of a labels file of ``rows`` rows (ten labels for each of its own items) and
    the peak memory Python traced while importing it."""
    name = f"big-{rows}"
    items = [make_item(f"{name}-{i}") for i in range(rows // 10)]
    dataset = import_items(items, session=session, name=name, fmt="jsonl")
    save_plan(dataset.id, session=session, updated_by="test", labels_per_item=10)
    path = tmp_path / f"{name}.jsonl"
    with path.open("w", encoding="utf-8") as file:
        for item in items:
            for rater in range(10):
                row = {"item_id": item.item_id, "annotator": f"rater-{rater}@x.org"}
                file.write(json.dumps(row | {"answer": "c1", "note": NOTE}) + "\n")
    tracemalloc.start()
    try:
        count = import_labels(path, dataset.id, session=session, actor=operator(), source="t")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == rows
    return path.stat().st_size, peak


def test_a_file_four_times_larger_takes_no_more_memory_to_import(session, tmp_path):
    """Rows are read, checked and stored a batch at a time: the peak does not grow with the
    file (before, every row stayed in memory until the end: 42 times the file's size)."""
    imported_peak(session, 10, tmp_path)  # first uses build caches that stay
    small_size, small_peak = imported_peak(session, 3_000, tmp_path)
    large_size, large_peak = imported_peak(session, 12_000, tmp_path)
    assert large_peak - small_peak < (large_size - small_size) / 10, (small_peak, large_peak)
