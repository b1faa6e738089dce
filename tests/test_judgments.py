"""The judgments.jsonl interchange reader and writer."""

from __future__ import annotations

import io
import json

import pytest

from pcf.errors import DataError
from pcf.judgments import read_judgments, write_judgments

from .factories import judgment

OK = {
    "item_id": "q1",
    "execution": 0,
    "call_index": 0,
    "order": ["a", "b"],
    "ok": True,
    "error": None,
    "factuality": {"a": 8, "b": 3},
    "hallucination_risk": {"a": 0.1, "b": 0.6},
    "ranking": ["a", "b"],
    "confidence": 0.9,
}


def test_round_trip(tmp_path):
    calls = [judgment("q1", 0, "ab", {"a": 8, "b": 3}), judgment("q1", 1, "ba", {}, ok=False)]
    buffer = io.StringIO()
    assert write_judgments(calls, buffer) == 2
    path = tmp_path / "j.jsonl"
    path.write_text(buffer.getvalue())
    assert read_judgments(path) == calls


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"execution": -1}, "execution: must be an integer >= 0"),
        ({"order": ["a"]}, "order: must list at least 2"),
        ({"ok": "yes"}, "ok: must be true or false"),
        ({"simulated": "yes"}, "simulated: must be true or false, got 'yes'"),
        ({"backend": 1}, "backend: must be a string"),
        ({"call_index": 0}, "call_index: duplicate call ('q1', 0, 0) (first on line 1)"),
        (
            {
                "call_index": 1,
                "order": ["a", "c"],
                "factuality": {"a": 1, "c": 2},
                "hallucination_risk": {"a": 0, "c": 0},
                "ranking": ["a", "c"],
            },
            "order: candidates differ from line 1",
        ),
    ],
)
def test_rejects_with_file_line_field(tmp_path, change, expected):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(OK) + "\n" + json.dumps(OK | {"call_index": 1} | change) + "\n")
    with pytest.raises(DataError) as info:
        read_judgments(path)
    assert any(
        str(p).startswith(f"{path}:2: ") and expected in str(p) for p in info.value.problems
    ), info.value


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"factuality": {"a": 11, "b": 3}}, "factuality.a: must be in [0, 10.0]"),
        ({"factuality": {"a": 1}}, "factuality: keys ['a'] differ"),
        ({"hallucination_risk": {"a": 0.1, "b": 2}}, "hallucination_risk.b: must be in [0, 1.0]"),
        ({"ranking": ["a", "a"]}, "ranking: must list every id"),
        ({"confidence": 3}, "confidence: must be in [0, 1]"),
    ],
)
def test_unusable_ok_line_is_a_failed_call_with_its_reason(tmp_path, change, expected):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(OK) + "\n" + json.dumps(OK | {"call_index": 1} | change) + "\n")
    first, second = read_judgments(path)
    assert first.ok
    assert not second.ok
    assert second.error.startswith(f"invalid_judgment: {path}:2: ")
    assert expected in second.error
