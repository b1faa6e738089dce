"""Readers of recorded both-order judge outputs, and the replay summary.

The acceptance tests replay the recorded JudgeBench and LLMBar runs in ../shared/data and
compare with the official numbers and the tallies the data's SOURCE.md files list.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pcf.connectors.recordings import (
    RecordedPair,
    read_judgebench_outputs,
    read_llmbar_results,
    replay_summary,
)
from pcf.errors import DataError
from tests.shared_data import HAIKU, LLMBAR, O1_MINI

# (file, official score, correct, incorrect, tie, pairs, raw (order-1, order-2) tallies)
JUDGEBENCH_EXPECTED = [
    (
        O1_MINI,
        65.71,
        230,
        39,
        81,
        350,
        {
            ("A>B", "B>A"): 121,
            ("B>A", "A>B"): 114,
            ("A>B", "A>B"): 58,
            ("B>A", "B>A"): 18,
            ("A=B", "A>B"): 12,
            ("A=B", "B>A"): 10,
            ("B>A", "A=B"): 8,
            ("A=B", "A=B"): 5,
            ("A>B", "A=B"): 4,
        },
    ),
    (
        HAIKU,
        32.22,
        87,
        79,
        104,
        270,
        {
            ("A=B", "A=B"): 54,
            ("A>B", "B>A"): 42,
            ("B>A", "A>B"): 39,
            ("A>B", "A>B"): 37,
            ("A=B", "A>B"): 32,
            ("A>B", "A=B"): 20,
            ("B>A", "A=B"): 13,
            ("A=B", "B>A"): 13,
            ("B>A", "B>A"): 7,
            (None, "A>B"): 5,
            (None, "A=B"): 4,
            ("A=B", None): 2,
            (None, "B>A"): 2,
        },
    ),
]


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared data not present: {path}")
    return path


def _hand_count(path: Path) -> tuple[Counter, Counter]:
    """Official outcomes and raw decision tallies, straight from the JSON (not via pcf)."""
    outcomes: Counter = Counter()
    raw: Counter = Counter()
    flip = {"A>B": "B>A", "B>A": "A>B"}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        first, second = (j["decision"] if j else None for j in row["judgments"])
        raw[first, second] += 1
        counter = sum(
            (d == row["label"]) - (d == flip[row["label"]])
            for d in (first, flip.get(second, second))
        )
        outcomes["correct" if counter > 0 else "incorrect" if counter < 0 else "tie"] += 1
    return outcomes, raw


# ---------------------------------------------------------------- JudgeBench acceptance


@pytest.mark.parametrize(
    ("name", "score", "correct", "incorrect", "tie", "n", "raw_tallies"), JUDGEBENCH_EXPECTED
)
def test_judgebench_replay_reproduces_official_numbers(
    name, score, correct, incorrect, tie, n, raw_tallies
):
    path = _require(name)
    pairs = read_judgebench_outputs(path)
    summary = replay_summary(pairs)

    assert summary["pairs"] == n
    assert round(summary["judgebench_official"], 2) == score
    assert summary["judgebench_official"] == 100 * correct / n
    assert summary["official_counts"] == {"correct": correct, "incorrect": incorrect, "tie": tie}

    hand_outcomes, hand_raw = _hand_count(path)
    assert dict(hand_outcomes) == summary["official_counts"]
    assert hand_raw == Counter(raw_tallies)

    back_to_order1 = {"first": "A>B", "second": "B>A", "tie": "A=B", None: None}
    back_to_order2 = {"first": "B>A", "second": "A>B", "tie": "A=B", None: None}
    read_raw = Counter((back_to_order1[p.d1], back_to_order2[p.d2]) for p in pairs)
    assert read_raw == Counter(raw_tallies)

    bucket_n = sum(b["n"] for b in summary["buckets"].values())
    bucket_correct = sum(b["correct"] for b in summary["buckets"].values())
    assert (bucket_n, bucket_correct) == (n, correct)
    assert set(summary["buckets"]) == {
        "mmlu-pro",
        "livebench-reasoning",
        "livebench-math",
        "livecodebench",
    }
    assert summary["buckets"]["mmlu-pro"]["n"] == 154
    scores = [b["score"] for b in summary["buckets"].values()]
    assert summary["macro_accuracy"] == pytest.approx(sum(scores) / 4)
    assert summary["rules"]["agree_or_decisive"] == pytest.approx(summary["judgebench_official"])


def test_judgebench_position_bias_from_raw_tallies():
    path = _require(O1_MINI)
    summary = replay_summary(read_judgebench_outputs(path))
    # (A>B, A>B): A was shown first both times and won both times; (B>A, B>A) the reverse.
    assert summary["primacy"] == 58
    assert summary["recency"] == 18
    assert summary["position_consistency"] == pytest.approx(100 * (121 + 114 + 5) / 350)


# ---------------------------------------------------------------- LLMBar acceptance


def test_llmbar_gpt4_vanilla_natural():
    natural = _require(LLMBAR / "Natural")
    pairs = read_llmbar_results(natural, judge="GPT-4", strategy="Vanilla")
    assert Counter((p.d1, p.d2) for p in pairs) == {
        ("first", "first"): 40,
        ("second", "second"): 55,
        ("first", "second"): 3,
        ("second", "first"): 2,
    }
    summary = replay_summary(pairs)
    assert summary["primacy"] == 3  # output shown first won in both orders
    assert summary["recency"] == 2
    assert summary["position_consistency"] == 95.0
    assert {p.bucket for p in pairs} == {"Natural"}
    # Upstream statistics.json: correct_False 95%, correct_True 96%, correct_both 93%, equal 95%.
    stats = json.loads((natural / "evaluators/GPT-4/Vanilla/statistics.json").read_text())
    assert summary["order1_accuracy"] == float(stats["correct_False"].split("= ")[1][:-1])
    assert summary["order2_accuracy"] == float(stats["correct_True"].split("= ")[1][:-1])
    assert summary["rules"]["agree_only"] == float(stats["correct_both"].split("= ")[1][:-1])
    assert summary["position_consistency"] == float(stats["equal"].split("= ")[1][:-1])


def test_llmbar_falcon_and_palm2_tallies_from_source_md():
    _require(LLMBAR)
    falcon = read_llmbar_results(LLMBAR / "Natural", judge="Falcon", strategy="Vanilla")
    assert Counter((p.d1, p.d2) for p in falcon) == {
        ("first", "first"): 21,
        ("second", "second"): 31,
        ("first", "second"): 48,
    }
    assert replay_summary(falcon)["primacy"] == 48
    palm2 = read_llmbar_results(LLMBAR / "Natural", judge="PaLM2", strategy="Vanilla")
    assert sum(p.d1 is None and p.d2 is None for p in palm2) == 2


def test_llmbar_whole_tree_buckets_and_labels():
    _require(LLMBAR)
    pairs = read_llmbar_results(LLMBAR, judge="GPT-4", strategy="Metrics_Reference")
    by_bucket = Counter(p.bucket for p in pairs)
    assert by_bucket == {
        "Natural": 100,
        "Adversarial/Neighbor": 134,
        "Adversarial/GPTInst": 92,
        "Adversarial/GPTOut": 47,
        "Adversarial/Manual": 46,
    }
    labels = Counter((p.bucket, p.label) for p in pairs)
    assert (labels["Natural", "first"], labels["Natural", "second"]) == (42, 58)
    assert (labels["Adversarial/Neighbor", "first"], labels["Adversarial/Neighbor", "second"]) == (
        75,
        59,
    )
    assert len({p.pair_id for p in pairs}) == 419
    summary = replay_summary(pairs)
    assert len(summary["buckets"]) == 5


def test_llmbar_directory_with_several_runs_needs_a_filter():
    _require(LLMBAR)
    with pytest.raises(DataError, match=r"GPT-4/CoT, GPT-4/Metrics_Reference, GPT-4/Vanilla"):
        read_llmbar_results(LLMBAR / "Natural", judge="GPT-4")
    with pytest.raises(DataError, match="--judge and --strategy"):
        read_llmbar_results(LLMBAR, strategy="CoT")
    with pytest.raises(DataError, match=r"runs found: .*GPT-4/Vanilla"):
        read_llmbar_results(LLMBAR, judge="GPT-5", strategy="Vanilla")


# ---------------------------------------------------------------- small files


def _judgebench_row(pair_id="p1", label="A>B", source="mmlu-pro-law", judgments=None) -> dict:
    if judgments is None:
        judgments = [{"decision": "A>B"}, {"decision": "B>A"}]
    return {"pair_id": pair_id, "source": source, "label": label, "judgments": judgments}


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_judgebench_reader_frames_and_nulls(tmp_path):
    path = _write_jsonl(
        tmp_path / "out.jsonl",
        [
            _judgebench_row(
                "p1", "A>B", "mmlu-pro-law", [{"decision": "A>B"}, {"decision": "B>A"}]
            ),
            _judgebench_row("p2", "B>A", "livebench-math", [None, {"decision": "A=B"}]),
            _judgebench_row(
                "p3", "B>A", "livecodebench", [{"decision": None}, {"decision": "A>B"}]
            ),
        ],
    )
    assert read_judgebench_outputs(path) == [
        RecordedPair("p1", "mmlu-pro", "first", "first", "first"),
        RecordedPair("p2", "livebench-math", "second", None, "tie"),
        RecordedPair("p3", "livecodebench", "second", None, "second"),
    ]


def test_judgebench_reader_reports_every_problem(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [
        _judgebench_row("p1"),
        _judgebench_row("p2", label="A=B"),
        _judgebench_row("p3", judgments=[{"decision": "A>B"}]),
        _judgebench_row("p4", judgments=[{"decision": "A>>B"}, {"decision": "B>A"}]),
        _judgebench_row("p1"),
    ]
    unhashable = _judgebench_row("p6", judgments=[{"decision": ["A>B"]}, None])
    lines = [*map(json.dumps, rows), "{not json", json.dumps(unhashable)]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_judgebench_outputs(path)
    where = {(p.line, p.field) for p in caught.value.problems}
    assert where == {
        (2, "label"),
        (3, "judgments"),
        (4, "judgments[0].decision"),
        (5, "pair_id"),
        (6, None),
        (7, "judgments[0].decision"),  # a list, once a TypeError
    }
    assert all(p.file == str(path) for p in caught.value.problems)


def _llmbar_row(label=1, false_winner="1", true_winner="1", extra=()) -> dict:
    swaps = {
        "swap = False": {"completion": ["Output (a)", "stop"], "winner": false_winner},
        "swap = True": {"completion": ["Output (b)", "stop"], "winner": true_winner},
    }
    return {
        "input": "q",
        "output_1": "x",
        "output_2": "y",
        "label": label,
        "results": [*extra, swaps],
    }


def _llmbar_file(root: Path, subset: str, rows: list, judge="J", strategy="S") -> Path:
    path = root / subset / "evaluators" / judge / strategy / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_llmbar_reader_single_file_buckets_and_last_result(tmp_path):
    rows = [
        _llmbar_row(1, "1", "2"),
        _llmbar_row(2, None, "2", extra=("metrics", "reference")),
    ]
    path = _llmbar_file(tmp_path / "LLMBar", "Adversarial/Neighbor", rows)
    assert read_llmbar_results(path) == [
        RecordedPair("Adversarial/Neighbor#1", "Adversarial/Neighbor", "first", "first", "second"),
        RecordedPair("Adversarial/Neighbor#2", "Adversarial/Neighbor", "second", None, "second"),
    ]
    plain = _llmbar_file(tmp_path / "elsewhere", "Natural", rows)
    assert {p.bucket for p in read_llmbar_results(plain)} == {"Natural"}
    with pytest.raises(DataError, match="is the run J/S"):
        read_llmbar_results(path, judge="GPT-4")


def test_llmbar_reader_reports_record_numbers(tmp_path):
    rows = [
        _llmbar_row(),
        _llmbar_row(label=3),
        _llmbar_row(true_winner="3"),
        {"label": 1, "results": []},
        "not an object",
    ]
    path = _llmbar_file(tmp_path, "Natural", rows)
    with pytest.raises(DataError) as caught:
        read_llmbar_results(tmp_path)
    where = {(p.line, p.field) for p in caught.value.problems}
    assert where == {
        (2, "label"),
        (3, 'results[-1]["swap = True"].winner'),
        (4, "results"),
        (5, None),
    }
    assert all(p.file == str(path) for p in caught.value.problems)
    assert "record 3" in str(caught.value)


def test_llmbar_reader_rejects_broken_files(tmp_path):
    path = _llmbar_file(tmp_path, "Natural", [])
    path.write_text('[\n  {"label": 1,\n  oops\n]', encoding="utf-8")
    with pytest.raises(DataError, match="invalid JSON") as caught:
        read_llmbar_results(path)
    assert caught.value.problems[0].line == 3
    path.write_text('{"label": 1}', encoding="utf-8")
    with pytest.raises(DataError, match="expected a JSON list"):
        read_llmbar_results(path)
    with pytest.raises(DataError, match="not found"):
        read_llmbar_results(tmp_path / "missing")


# ---------------------------------------------------------------- replay summary


def test_replay_summary_by_hand():
    pairs = [
        RecordedPair("1", "x", "first", "first", "first"),  # consistent, right
        RecordedPair("2", "x", "first", "first", "second"),  # primacy
        RecordedPair("3", "y", "second", "first", "second"),  # primacy
        RecordedPair("4", "y", "second", "tie", "second"),  # official correct
        RecordedPair("5", "y", "first", "second", "first"),  # recency
        RecordedPair("6", "y", "first", None, None),  # no decision at all
    ]
    summary = replay_summary(pairs)
    assert summary["pairs"] == 6
    assert summary["official_counts"] == {"correct": 2, "incorrect": 0, "tie": 4}
    assert summary["judgebench_official"] == pytest.approx(100 * 2 / 6)
    assert summary["buckets"]["x"]["score"] == 50
    assert summary["buckets"]["y"]["score"] == 25
    assert summary["macro_accuracy"] == pytest.approx(37.5)
    assert summary["position_consistency"] == pytest.approx(100 / 6)
    assert (summary["primacy"], summary["recency"]) == (2, 1)
    assert summary["order1_accuracy"] == pytest.approx(200 / 6)
    assert summary["order2_accuracy"] == pytest.approx(400 / 6)
    assert summary["rules"] == {
        "order1": pytest.approx(200 / 6),
        "order2": pytest.approx(400 / 6),
        "agree_only": pytest.approx(100 / 6),
        "agree_or_decisive": pytest.approx(200 / 6),
    }
    assert summary["rule_abstentions"] == {
        "order1": 2,
        "order2": 1,
        "agree_only": 5,
        "agree_or_decisive": 4,
    }
    with pytest.raises(ValueError, match="no recorded pairs"):
        replay_summary([])
