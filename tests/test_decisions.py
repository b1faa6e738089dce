"""A judgments file aggregated a few items at a time (pcf.decisions.aggregate_file) gives what
aggregating it whole gives: the same records in the same order, notes and errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from pcf.choices import RULES
from pcf.decisions import _num, _nums, aggregate, aggregate_file
from pcf.errors import DataError
from pcf.items import Candidate, Item, load_dataset
from pcf.judgments import INVALID_JUDGMENT, Judgment, read_judgments
from pcf.weights import PRESETS

from .factories import mixed_judgments, write_calls

OPTIONS = [
    {},
    {"k": 1},
    {"k": 2, "executions": 1},
    {"executions": 2},
    {"weights": PRESETS["uniform"]},
    *({"rule": rule} for rule in RULES),
]


def listing(path: Path, calls: list[Judgment]) -> Path:
    """An items file listing most judged items in another order (candidates too), and one
    item that has no calls."""
    ids = {j.item_id: sorted(j.order) for j in calls}
    keys = sorted(ids)[3:]
    random.Random(2).shuffle(keys)
    items = [
        Item(key, f"Question {key}?", tuple(Candidate(c, f"Answer {c}.") for c in ids[key]))
        for key in keys
    ]
    items.append(Item("unjudged", "?", (Candidate("a", "A."), Candidate("b", "B."))))
    path.write_text("".join(json.dumps(i.to_dict()) + "\n" for i in items), encoding="utf-8")
    return path


def streamed(path: Path, items: Path | None = None, **options) -> tuple[list[str], str]:
    """Notes and records of ``aggregate_file`` three items at a time."""
    with aggregate_file(path, items=items, size=3, **options) as (notes, records):
        return notes, records.read()


def whole(path: Path, items: Path | None = None, **options) -> str:
    """The records of the whole file, aggregated at once, as JSON Lines."""
    listed = load_dataset("jsonl", items) if items else None
    records = aggregate(read_judgments(path), items=listed, **options)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(map(str, o.values())))
@pytest.mark.parametrize("shuffle", [False, True], ids=["grouped", "shuffled"])
def test_a_file_aggregated_in_chunks_gives_the_whole_files_records(tmp_path, options, shuffle):
    calls = mixed_judgments()
    path = write_calls(tmp_path / "j.jsonl", calls, shuffle=shuffle)
    notes, records = streamed(path, **options)
    assert records == whole(path, **options)
    assert notes == []
    items = listing(tmp_path / "items.jsonl", calls)
    assert streamed(path, items, **options)[1] == whole(path, items, **options)


def test_lines_read_as_failed_calls_are_noted_in_line_order(tmp_path):
    calls = mixed_judgments()
    lines = write_calls(tmp_path / "j.jsonl", calls).read_text().splitlines()
    for at in (3, 70, len(lines) - 2):
        broken = json.loads(lines[at])
        broken.update(ok=True, factuality={}, error=None)
        lines[at] = json.dumps(broken)
    lines[40] = json.dumps(json.loads(lines[40]) | {"ok": False, "error": "invalid_judgment: x"})
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    notes, records = streamed(path)
    expected = [
        j.error for j in read_judgments(path) if (j.error or "").startswith(INVALID_JUDGMENT)
    ]
    assert notes == expected
    assert [note.split(": ")[1] for note in notes] == [
        f"{path}:4",
        "x",
        f"{path}:71",
        f"{path}:{len(lines) - 1}",
    ]
    assert records == whole(path)


def test_problems_far_into_a_shuffled_file_are_those_of_the_whole_file(tmp_path):
    lines = write_calls(tmp_path / "j.jsonl", mixed_judgments(items=300)).read_text().splitlines()
    assert len(lines) > 1000
    other = json.loads(lines[10])
    other.update(call_index=99, order=["x", "y"], ok=False)
    lines[950] = '{"item_id": "q1", "execution": 0'  # bad JSON
    lines[500] = json.dumps(json.loads(lines[500]) | {"execution": -1})
    lines.insert(700, json.dumps(other))  # the item's candidates differ from its first line
    lines.append(lines[20])  # a duplicate call, 1,000 lines after the first
    repeated = json.loads(lines[20])
    key = (repeated["item_id"], repeated["execution"], repeated["call_index"])
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as expected:
        read_judgments(path)
    with pytest.raises(DataError) as found:
        streamed(path)
    assert found.value.problems == expected.value.problems
    assert [str(p) for p in found.value.problems] == [
        f"{path}:501: execution: must be an integer >= 0, got -1",
        f"{path}:701: order: candidates differ from line 11 of item {other['item_id']!r}",
        f"{path}:952: invalid JSON: Expecting ',' delimiter (column 1)",
        f"{path}:{len(lines)}: call_index: duplicate call {key} (first on line 21)",
    ]


def test_calls_over_other_candidates_than_the_items_file_stop_as_the_whole_file_does(tmp_path):
    calls = mixed_judgments()
    path = write_calls(tmp_path / "j.jsonl", calls)
    items = listing(tmp_path / "items.jsonl", calls)
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    for row in (rows[5], rows[20], rows[30]):  # other ids in items of several sizes
        row["candidates"][0]["id"] = "other"
    items.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match="item '") as expected:
        whole(path, items)
    with pytest.raises(ValueError, match="item '") as found:
        streamed(path, items)
    assert not isinstance(found.value, DataError)
    assert str(found.value) == str(expected.value)


def test_the_judgments_files_problems_come_before_the_items_files(tmp_path):
    calls = mixed_judgments()
    path = write_calls(tmp_path / "j.jsonl", calls)
    items = tmp_path / "items.jsonl"
    items.write_text('{"item_id": "x"}\n')
    with pytest.raises(DataError, match=f"{items}:1: prompt: missing"):
        streamed(path, items)
    path.write_text(path.read_text() + "{}\n")
    with pytest.raises(DataError, match=f"{path}:{len(calls) + 1}: item_id: missing") as found:
        streamed(path, items)
    assert str(items) not in str(found.value)


def test_metrics_are_rounded_alike_whether_one_at_a_time_or_a_whole_array_at_once():
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [rng.normal(size=400), [np.nan, -0.0, 0.0, 0.1234565, 2.5e-7, -2.5e-7, 1 / 3, np.inf]]
    )
    values = np.concatenate([values, rng.choice(values, 200)]).reshape(-1, 4)
    rounded = _nums(values)
    assert rounded == [[_num(v) for v in row] for row in values]
    assert [type(v) for v in rounded[100]] == [type(_num(v)) for v in values[100]]
    assert _nums(values.astype(np.float32)) == [
        [_num(v) for v in row] for row in values.astype(np.float32)
    ]
