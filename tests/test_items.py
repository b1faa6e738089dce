"""Dataset loaders: the good files load, every malformed file is refused with file/line/field."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlmodel import SQLModel
from typer.testing import CliRunner

from pcf.cli import app
from pcf.errors import DataError
from pcf.items import MAX_CANDIDATES, load_any, load_dataset, recognise_format
from pcf.prompts import DEFAULT_KEYS
from pcf.store import import_items
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


# ---------------------------------------------------------------- hostile files


GOOD_CANDIDATE = {"id": "b", "text": "y"}


def item_line(**overrides) -> bytes:
    return json.dumps(GOOD_ITEM | {"item_id": "q9"} | overrides).encode()


@pytest.mark.parametrize(
    ("second_line", "expected"),
    [
        (b'{"item_id": "q\xff9"}', ":2: not UTF-8 text: byte 0xff at column 15"),
        (b'{"a": ' * 200_000, ":2: nested more than 64 levels deep"),
        (b'{"a": ' + b"[" * 200_000, ":2: nested more than 64 levels deep"),
        (b'{"n": ' + b"7" * 5000 + b"}", ":2: invalid JSON: a number of more than 4300 digits"),
        (item_line(prompt="Why\ud800?"), ":2: prompt: contains a lone surrogate (U+D800)"),
        (item_line(candidates=[{"id": "a", "text": "x\x00"}, {"id": "b", "text": "y"}]),
         ":2: candidates[0].text: contains a NUL character"),
        (item_line(metadata={"deep": "\x00"}), ":2: metadata.deep: contains a NUL character"),
        (item_line(gold=None, candidates=[{"id": f"c{i}", "text": "t"} for i in range(1000)]),
         ":2: candidates: at most 26 candidates (slot keys A to Z), got 1000"),
        (item_line(gold="b", candidates=[{"id": "none_correct", "text": "x"}, GOOD_CANDIDATE]),
         ":2: candidates.id: 'none_correct' is an annotator's choice, not an id"),
        (item_line(candidates=[{"id": "a", "text": "x"}, {"id": "cannot_tell", "text": "y"}]),
         ":2: candidates.id: 'cannot_tell' is an annotator's choice, not an id"),
    ],
)  # fmt: skip
def test_hostile_jsonl_lines_are_problems_with_file_and_line(tmp_path, second_line, expected):
    path = tmp_path / "items.jsonl"
    path.write_bytes(json.dumps(GOOD_ITEM).encode() + b"\n" + second_line + b"\n")
    assert problems_of("jsonl", path) == [f"{path}{expected}"]


LONG = "x" * 51  # over the limits the test below sets: 50 characters of prompt, 30 of answer


@pytest.mark.parametrize(
    ("fmt", "row", "expected"),
    [
        ("jsonl", GOOD_ITEM | {"prompt": LONG},
         ":1: prompt: item 'q1': 51 characters, over the limit of 50 characters (set "
         "PCF_MAX_PROMPT_CHARS to raise it)"),
        ("jsonl", GOOD_ITEM | {"candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": LONG}]},
         ":1: candidates[1].text: item 'q1': 51 characters, over the limit of 30 characters (set "
         "PCF_MAX_CANDIDATE_CHARS to raise it)"),
        ("rewardbench2", rb2_row(rejected=["a", LONG, "c"]),
         ":1: rejected[1]: item 'Factuality:7': 51 characters, over the limit of 30 characters "
         "(set PCF_MAX_CANDIDATE_CHARS to raise it)"),
        ("judgebench", jb_row(response_B=LONG),
         ":1: response_B: item 'p1': 51 characters, over the limit of 30 characters (set "
         "PCF_MAX_CANDIDATE_CHARS to raise it)"),
        ("judgebench", jb_row(question=LONG),
         ":1: question: item 'p1': 51 characters, over the limit of 50 characters (set "
         "PCF_MAX_PROMPT_CHARS to raise it)"),
    ],
)  # fmt: skip
def test_a_prompt_or_candidate_over_its_limit_names_file_line_item_and_field(
    tmp_path, monkeypatch, fmt, row, expected
):
    monkeypatch.setenv("PCF_MAX_PROMPT_CHARS", "50")
    monkeypatch.setenv("PCF_MAX_CANDIDATE_CHARS", "30")
    path = write_jsonl(tmp_path / "items.jsonl", [row])
    assert problems_of(fmt, path) == [f"{path}{expected}"]
    monkeypatch.setenv("PCF_MAX_CANDIDATE_CHARS", "51")
    monkeypatch.setenv("PCF_MAX_PROMPT_CHARS", "51")
    assert len(load_dataset(fmt, path)) == 1


def test_validate_reports_a_candidate_over_its_limit(tmp_path, monkeypatch):
    csv_file = tmp_path / "items.csv"
    rows = f"q1,P?,a,x\nq1,P?,b,{'y' * 31}\nq1,P?,c,z\n"
    csv_file.write_text(f"item_id,prompt,candidate_id,text\n{rows}")
    monkeypatch.setenv("PCF_MAX_CANDIDATE_CHARS", "30")
    result = CliRunner().invoke(app, ["validate", "csv", str(csv_file)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"1 problem(s) in {csv_file}:",
        f"{csv_file}:3: text: item 'q1': 31 characters, over the limit of 30 characters (set "
        "PCF_MAX_CANDIDATE_CHARS to raise it)",
    ]


def test_a_byte_order_mark_is_accepted(tmp_path):
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD_ITEM).encode() + b"\n")
    assert [i.item_id for i in load_dataset("jsonl", jsonl)] == ["q1"]
    csv_file = tmp_path / "items.csv"
    csv_file.write_text("item_id,prompt,candidate_id,text\nq1,P?,a,x\nq1,P?,b,y\n", "utf-8-sig")
    assert [i.candidate_ids for i in load_dataset("csv", csv_file)] == [("a", "b")]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"item_id,prompt,candidate_id,text\nq1,P?,a,x\nq1,P\xc3?,b,y\n",
         ":3: not UTF-8 text: byte 0xc3 at column 5"),
        (b"item_id,prompt,candidate_id,text\nq1,P?,a,x\x00\nq1,P?,b,y\nq1,P?,c,z\n",
         ":2: text: contains a NUL character"),
        (b"item_id,prompt,candidate_id,text\nq1,P?,a," + b"x" * 200_000 + b"\n",
         ":2: unreadable CSV: field larger than field limit (131072)"),
    ],
)  # fmt: skip
def test_hostile_csv_files_are_problems_with_file_and_line(tmp_path, content, expected):
    path = tmp_path / "items.csv"
    path.write_bytes(content)
    assert problems_of("csv", path) == [f"{path}{expected}"]


def test_odd_values_in_benchmark_rows_are_problems_not_crashes(tmp_path):
    rb2 = write_jsonl(tmp_path / "rb2.jsonl", [rb2_row(id=["7"]), rb2_row(id=True)])
    assert problems_of("rewardbench2", rb2) == [
        f"{rb2}:1: id: must be a string or an integer, got list",
        f"{rb2}:2: id: must be a string or an integer, got bool",
    ]
    jb = write_jsonl(tmp_path / "jb.jsonl", [jb_row(label=["A>B"])])
    assert problems_of("judgebench", jb) == [f"{jb}:1: label: must be 'A>B' or 'B>A', got list"]


def test_the_candidate_limit_is_the_number_of_slot_keys():
    assert len(DEFAULT_KEYS) == MAX_CANDIDATES


ANY_TEXT = st.lists(
    st.sampled_from(["\x00", "\ud800", "\udfff", "\ufeff", "a"])
    | st.characters(exclude_categories=()),
    min_size=1,
    max_size=8,
).map("".join)
"""Text of any code point: NUL, lone surrogates (JSON writes them as escapes) and the rest."""
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=12,
)
ITEM_LIKE = st.fixed_dictionaries(
    {
        "item_id": st.sampled_from(["q1", "q2"]) | ANY_TEXT,
        "prompt": ANY_TEXT,
        "candidates": st.lists(
            st.fixed_dictionaries(
                {"id": st.sampled_from(["a", "b", "c", "none_correct"]), "text": ANY_TEXT}
            ),
            min_size=2,
            max_size=4,
            unique_by=lambda candidate: candidate["id"],
        ),
    },
    optional={"gold": st.sampled_from(["a", "b"]) | st.none(), "metadata": JSON_VALUES},
)
JUDGEBENCH_LIKE = st.fixed_dictionaries(
    {
        "pair_id": st.sampled_from(["p1", "p2"]) | ANY_TEXT,
        "question": st.just("Q?") | ANY_TEXT,
        "source": st.just("mmlu-pro-law") | ANY_TEXT,
        "response_A": st.just("yes") | ANY_TEXT,
        "response_B": st.just("no") | ANY_TEXT,
        "label": st.sampled_from(["A>B", "B>A"]) | JSON_VALUES,
    }
)
REWARDBENCH2_LIKE = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["1", "2"]) | JSON_VALUES,
        "subset": st.just("Factuality") | ANY_TEXT,
        "prompt": st.just("Who?") | ANY_TEXT,
        "chosen": st.lists(st.just("Me.") | ANY_TEXT, min_size=1, max_size=2),
        "rejected": st.lists(st.just("You.") | ANY_TEXT, min_size=1, max_size=3),
    },
    optional={"models": JSON_VALUES, "total_completions": st.integers(0, 5)},
)
CSV_ROW = st.tuples(
    st.sampled_from(["q1", "q2"]) | ANY_TEXT,
    st.just("P?") | ANY_TEXT,
    st.sampled_from(["a", "b", "c"]) | ANY_TEXT,
    st.just("An answer.") | ANY_TEXT,
)


def json_lines(rows: list) -> bytes:
    return "\n".join(json.dumps(row) for row in rows).encode()


def csv_bytes(rows: list[tuple[str, ...]]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerows([("item_id", "prompt", "candidate_id", "text"), *rows])
    return out.getvalue().encode("utf-8", "surrogatepass")


LOADERS = ("jsonl", "csv", "judgebench", "rewardbench2")
HOSTILE_FILES = st.one_of(
    st.tuples(st.sampled_from(LOADERS), st.binary(max_size=300)),
    st.tuples(st.sampled_from(LOADERS), st.lists(JSON_VALUES, max_size=4).map(json_lines)),
    st.tuples(st.just("jsonl"), st.lists(ITEM_LIKE, max_size=4).map(json_lines)),
    st.tuples(st.just("judgebench"), st.lists(JUDGEBENCH_LIKE, max_size=3).map(json_lines)),
    st.tuples(st.just("rewardbench2"), st.lists(REWARDBENCH2_LIKE, max_size=3).map(json_lines)),
    st.tuples(st.just("csv"), st.lists(CSV_ROW, max_size=6).map(csv_bytes)),
).flatmap(
    lambda file: st.sampled_from([file[1], b"\xef\xbb\xbf" + file[1], file[1] + b"\xff"]).map(
        lambda data: (file[0], data)
    )
)
"""(format, file bytes): noise, JSON of any shape, rows shaped like each format's with any
text in their fields, each also with a byte-order mark or a stray invalid byte."""


def table_counts(session) -> dict[str, int]:
    return {
        table.name: session.execute(select(func.count()).select_from(table)).scalar_one()
        for table in SQLModel.metadata.sorted_tables
    }


def load_or_problems(fmt: str, path: Path) -> tuple[list, list]:
    """The items of a file and no problems, or no items and the problems."""
    try:
        return load_dataset(fmt, path), []
    except DataError as error:
        return [], error.problems


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(file=HOSTILE_FILES)
def test_any_bytes_give_items_or_problems_with_lines_and_import_all_or_nothing(
    tmp_path, new_session, file
):
    fmt, data = file
    path = tmp_path / f"fuzz.{'csv' if fmt == 'csv' else 'jsonl'}"
    path.write_bytes(data)
    with new_session() as session:  # one per example
        before = table_counts(session)
        items, problems = load_or_problems(fmt, path)
        assert all(p.file == str(path) and p.line and p.line >= 1 for p in problems)
        if items:  # what validate accepts, import stores
            import_items(items, session=session, name="fuzz", fmt=fmt)
            assert table_counts(session)["item"] == before["item"] + len(items)
        session.rollback()
        assert table_counts(session) == before


@pytest.mark.skipif(not RB2.exists(), reason="../shared/data is absent")
def test_the_format_is_the_one_the_columns_fit_or_the_candidates_are_named(tmp_path):
    """Each shipped layout is told by its columns (a Parquet file's by its schema, a CSV's by
    its header); a row that fits two, or none, is refused with the formats and what each
    lacks; a file with no readable row is read by its suffix, to name its problems."""
    rb2_rows = [json.loads(line) for line in RB2.read_text(encoding="utf-8").splitlines()]
    parquet = tmp_path / "rb2.parquet"
    pd.DataFrame(rb2_rows).to_parquet(parquet)
    table = tmp_path / "items.csv"
    table.write_text("item_id,prompt,candidate_id,text\nq,P?,a,Yes\nq,P?,b,No\n")
    for path, fmt in [
        (RB2, "rewardbench2"),
        (parquet, "rewardbench2"),
        (JUDGEBENCH_PAIRS, "judgebench"),
        (table, "csv"),
    ]:
        assert recognise_format(path) == fmt, path
        assert load_any(None, path)[1] == fmt
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps(rb2_rows[0] | {"item_id": "x", "candidates": []}) + "\n")
    with pytest.raises(
        ValueError,
        match=r"both.jsonl: its columns fit several formats: "
        r"RewardBench 2 \(rewardbench2\), items.jsonl \(jsonl\); choose one",
    ):
        recognise_format(both)
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("question,answer\nP?,Yes\n")
    with pytest.raises(
        ValueError, match=r"^unknown.csv: columns \['answer', 'question'\] fit no"
    ) as refused:
        recognise_format(unknown)
    assert "CSV (a row per candidate) (csv) lacks item_id, prompt, candidate_id, text" in str(
        refused.value
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(DataError, match=r"broken\.jsonl:1: invalid JSON") as bad:
        load_any(None, broken)
    assert bad.value.__notes__ == ["read as items.jsonl, recognised by its columns"]


def imported_peak(tmp_path: Path, count: int) -> tuple[int, int]:
    """The size of an items.jsonl of ``count`` items (four candidates of about 1,300
    characters) and the peak memory Python traced while ``pcf import`` stored it."""
    path = tmp_path / f"items-{count}.jsonl"
    with path.open("w", encoding="utf-8") as file:
        for n in range(count):
            candidates = [{"id": c, "text": f"{c}{n} " * 200} for c in "abcd"]
            row = {"item_id": f"i{n}", "prompt": "Which?", "candidates": candidates}
            file.write(json.dumps(row) + "\n")
    tracemalloc.start()
    try:
        done = CliRunner().invoke(app, ["import", "jsonl", str(path), "--name", path.stem])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert done.exit_code == 0, done.output
    assert f'"items": {count}' in done.stdout
    return path.stat().st_size, peak


def test_a_dataset_four_times_larger_takes_no_more_memory_to_import(tmp_path, isolated_database):
    """`pcf import` reads a row at a time and stores a chunk of items at a time: the peak does
    not grow with the file (before, every item stayed in memory until the end: 432 MB on 60,000
    items against 183 MB on 5,000, ``benchmarks/scale.py``)."""
    imported_peak(tmp_path, 10)  # first uses build caches that stay
    small_size, small_peak = imported_peak(tmp_path, 2_000)  # four chunks: the noise of the
    large_size, large_peak = imported_peak(tmp_path, 8_000)  # ids index and garbage is ~1 MB
    assert large_peak - small_peak < (large_size - small_size) / 10, (small_peak, large_peak)


def test_a_problem_after_the_first_chunks_stored_imports_nothing(tmp_path, session):
    """A streamed import stores chunks before it reads the last line: a problem there still
    leaves the database as it was, and names its line."""
    two = [{"id": "a", "text": "Yes"}, {"id": "b", "text": "No"}]
    rows = [{"item_id": f"i{n}", "prompt": "Which?", "candidates": two} for n in range(1_001)]
    rows.append({"item_id": "late", "prompt": "Which?", "candidates": two[:1]})
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    before = table_counts(session)
    done = CliRunner().invoke(app, ["import", "jsonl", str(path)])
    assert done.exit_code == 1
    assert "nothing imported: 1 problem(s)" in done.output
    assert f"late.jsonl:{len(rows)}" in done.output
    assert table_counts(session) == before
