"""Dataset loaders: the good files load, every malformed file is refused with file/line/field."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from pcf.errors import DataError
from pcf.items import load_dataset
from tests.shared_data import JUDGEBENCH_PAIRS, RB2

needs_shared = pytest.mark.skipif(not RB2.exists(), reason="../shared/data is absent")

GOOD_ITEM = {
    "item_id": "q1",
    "prompt": "What is the boiling point of water at sea level?",
    "candidates": [{"id": "a", "text": "100 °C"}, {"id": "b", "text": "90 °C"}],
    "gold": "a",
    "bucket": "physics",
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def rb2_row(**overrides) -> dict:
    row = {
        "id": "7",
        "prompt": "Who wrote Hamlet?",
        "chosen": ["William Shakespeare."],
        "rejected": ["Christopher Marlowe.", "Ben Jonson.", "John Milton."],
        "num_correct": 1,
        "num_incorrect": 3,
        "total_completions": 4,
        "models": ["m1", "m2", "m3", "m4"],
        "subset": "Factuality",
    }
    row.update(overrides)
    return row


def jb_row(**overrides) -> dict:
    row = {
        "pair_id": "p1",
        "original_id": 3,
        "source": "mmlu-pro-law",
        "question": "Q?",
        "response_A": "yes",
        "response_B": "no",
        "label": "A>B",
    }
    row.update(overrides)
    return row


def problems_of(fmt: str, path: Path) -> list[str]:
    with pytest.raises(DataError) as info:
        load_dataset(fmt, path)
    return [str(p) for p in info.value.problems]


def test_items_jsonl_round_trip(tmp_path):
    path = write_jsonl(
        tmp_path / "items.jsonl", [GOOD_ITEM, {**GOOD_ITEM, "item_id": "q2", "gold": None}]
    )
    items = load_dataset("jsonl", path)
    assert [i.item_id for i in items] == ["q1", "q2"]
    assert items[0].to_dict() == GOOD_ITEM
    assert items[1].gold is None
    assert load_dataset("jsonl", path, limit=1) == items[:1]
    assert load_dataset("jsonl", path, subset="nope") == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"item_id": "q9", "prompt": ', ":2: invalid JSON"),
        (
            json.dumps({k: v for k, v in GOOD_ITEM.items() if k != "prompt"} | {"item_id": "q9"}),
            ":2: prompt: missing",
        ),
        (
            json.dumps(GOOD_ITEM | {"item_id": "q9", "candidates": GOOD_ITEM["candidates"][:1]}),
            ":2: candidates: needs at least 2",
        ),
        (json.dumps(GOOD_ITEM), ":2: item_id: duplicate id 'q1' (first on line 1)"),
        (
            json.dumps(
                GOOD_ITEM
                | {
                    "item_id": "q9",
                    "candidates": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
                }
            ),
            ":2: candidates.id: duplicate candidate id 'a'",
        ),
        (
            json.dumps(
                GOOD_ITEM
                | {
                    "item_id": "q9",
                    "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": "  "}],
                }
            ),
            ":2: candidates[1].text: is empty",
        ),
        (json.dumps(GOOD_ITEM | {"item_id": "q9", "gold": "zz"}), ":2: gold: 'zz' is not one of"),
        ("[1, 2]", ":2: expected a JSON object"),
    ],
)
def test_items_jsonl_rejects(tmp_path, line, expected):
    path = write_jsonl(tmp_path / "items.jsonl", [GOOD_ITEM, line])
    problems = problems_of("jsonl", path)
    assert any(p.startswith(str(path)) and expected in p for p in problems), problems


def test_every_problem_is_reported_not_just_the_first(tmp_path):
    path = write_jsonl(
        tmp_path / "items.jsonl", ["{bad", json.dumps(GOOD_ITEM | {"prompt": ""}), "{worse"]
    )
    problems = problems_of("jsonl", path)
    assert [p.split(": ")[0].rsplit(":", 1)[1] for p in problems] == ["1", "2", "3"]


def test_csv_loads_and_rejects(tmp_path):
    good = tmp_path / "items.csv"
    pd.DataFrame(
        [
            ["q1", "Capital of France?", "a", "Paris", "a", "geo"],
            ["q1", "Capital of France?", "b", "Lyon, with a comma", "a", "geo"],
            ["q2", "2+2?", "x", "4", "", ""],
            ["q2", "2+2?", "y", "5", "", ""],
        ],
        columns=["item_id", "prompt", "candidate_id", "text", "gold", "bucket"],
    ).to_csv(good, index=False)
    items = load_dataset("csv", good)
    assert [(i.item_id, i.candidate_ids, i.gold, i.bucket) for i in items] == [
        ("q1", ("a", "b"), "a", "geo"),
        ("q2", ("x", "y"), None, None),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "item_id,prompt,candidate_id,text,gold\n"
        "q1,P?,a,yes,a\n"
        "q1,Other prompt?,b,no,a\n"
        "q2,P?,a,,\n"
        "q2,P?,a,dup,\n"
        "q3,P?,a,only one,\n"
    )
    problems = problems_of("csv", bad)
    assert any(f"{bad}:3: prompt: differs" in p for p in problems), problems
    assert any(f"{bad}:4: text: is empty" in p for p in problems), problems
    assert any(f"{bad}:6: candidates: needs at least 2" in p for p in problems), problems
    missing = tmp_path / "missing.csv"
    missing.write_text("item_id,prompt,text\nq1,P?,x\n")
    assert "candidate_id" in problems_of("csv", missing)[0]


def test_rewardbench2_hides_the_label_and_validates(tmp_path):
    path = write_jsonl(tmp_path / "rb2.jsonl", [rb2_row(), rb2_row(id="8", subset="Math")])
    [item] = load_dataset("rewardbench2", path, subset="Factuality")
    assert item.item_id == "Factuality:7"
    assert item.text_of(item.gold) == "William Shakespeare."
    assert list(item.candidate_ids) == sorted(item.candidate_ids)
    assert all(cid.startswith("c") and len(cid) == 8 for cid in item.candidate_ids)

    cases = [
        (rb2_row(chosen=["a", "b"]), ":1: chosen: must hold exactly 1"),
        (rb2_row(rejected=[]), ":1: rejected: must hold at least 1"),
        (rb2_row(total_completions=5), ":1: total_completions: says 5"),
        (rb2_row(rejected=["x", "", "z"]), ":1: rejected[1]: is empty"),
        (rb2_row(prompt=None), ":1: prompt: missing"),
    ]
    for row, expected in cases:
        bad = write_jsonl(tmp_path / "bad.jsonl", [row])
        assert any(expected in p for p in problems_of("rewardbench2", bad)), expected
    dup = write_jsonl(tmp_path / "dup.jsonl", [rb2_row(), rb2_row()])
    assert any(
        ":2: item_id: duplicate id 'Factuality:7'" in p for p in problems_of("rewardbench2", dup)
    )


def test_rewardbench2_parquet(tmp_path):
    path = tmp_path / "rb2.parquet"
    pd.DataFrame([rb2_row(), rb2_row(id="8")]).to_parquet(path)
    items = load_dataset("rewardbench2", path)
    assert [i.item_id for i in items] == ["Factuality:7", "Factuality:8"]
    assert items[0].metadata["models"] == ["m1", "m2", "m3", "m4"]


def test_judgebench_loads_and_rejects(tmp_path):
    path = write_jsonl(
        tmp_path / "jb.jsonl", [jb_row(), jb_row(pair_id="p2", label="B>A", source="livecodebench")]
    )
    items = load_dataset("judgebench", path)
    assert [(i.gold, i.bucket) for i in items] == [
        ("response_A", "mmlu-pro"),
        ("response_B", "livecodebench"),
    ]
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [jb_row(label="A=B"), jb_row(pair_id="p2", response_B="")]
    )
    problems = problems_of("judgebench", bad)
    assert any(":1: label: must be 'A>B' or 'B>A'" in p for p in problems)
    assert any(":2: response_B: is empty" in p for p in problems)


def test_missing_file_and_unknown_format(tmp_path):
    assert "file not found" in problems_of("jsonl", tmp_path / "nope.jsonl")[0]
    with pytest.raises(ValueError, match="unknown format"):
        load_dataset("xml", tmp_path / "x")


@needs_shared
def test_real_rewardbench2_rows():
    items = load_dataset("rewardbench2", RB2, subset="Factuality")
    assert len(items) == 120
    assert all(len(i.candidates) == 4 for i in items)
    # The gold answer is spread over listing positions, not always first as stored.
    positions = Counter(i.candidate_ids.index(i.gold) for i in items)
    assert max(positions.values()) < 60


@needs_shared
def test_real_judgebench_pairs():
    items = load_dataset("judgebench", JUDGEBENCH_PAIRS)
    assert len(items) == 350
    assert Counter(i.gold for i in items) == {"response_A": 193, "response_B": 157}
    assert Counter(i.bucket for i in items) == {
        "mmlu-pro": 154,
        "livebench-reasoning": 98,
        "livebench-math": 56,
        "livecodebench": 42,
    }
