"""The `pcf` command line: every command documented with an example, and each one works."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from pcf.analysis.results import judgment_records, run_decisions
from pcf.cli import app
from pcf.decisions import aggregate
from pcf.items import Candidate, Item, load_dataset
from pcf.judgments import read_judgments, write_judgments
from pcf.store import add_adjudication, adjudication_records, get_run, load_items
from tests.shared_data import LLMBAR, O1_MINI
from tests.startup import heavy_modules_imported

from .factories import judgment, mixed_judgments, write_calls

runner = CliRunner()


def all_commands(group, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for name, command in group.commands.items():
        out.append((prefix + name, command))
        if hasattr(command, "commands"):
            out += all_commands(command, prefix + name + " ")
    return out


def test_every_command_has_help_with_an_example():
    commands = all_commands(get_command(app))
    assert {"aggregate", "validate"} <= {name for name, _ in commands}
    for name, command in commands:
        if hasattr(command, "commands"):
            assert command.help, name
            continue
        assert "Example: pcf " in (command.help or ""), f"{name} has no example"
        result = runner.invoke(app, [*name.split(), "--help"])
        assert result.exit_code == 0, name


def test_help_imports_no_heavy_library():
    pcf = Path(sys.executable).with_name("pcf")
    assert heavy_modules_imported([str(pcf), "--help"]) == []


def test_the_start_up_check_sees_a_heavy_library():
    assert "numpy" in heavy_modules_imported([sys.executable, "-c", "import pcf.consensus"])


@pytest.fixture
def judgments_file(tmp_path):
    calls = [
        judgment("q1", 0, "ab", {"a": 6, "b": 5}),
        judgment("q1", 1, "ba", {"a": 2, "b": 9}),
        judgment("q1", 2, "ab", {"a": 2, "b": 9}),
        judgment("q2", 0, "ab", {"a": 9, "b": 1}),
        judgment("q2", 1, "ba", {}, ok=False),
    ]
    path = tmp_path / "judgments.jsonl"
    with path.open("w") as fh:
        write_judgments(calls, fh)
    return path


def test_aggregate_writes_one_decision_per_item(judgments_file):
    result = runner.invoke(app, ["aggregate", str(judgments_file)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["item_id"] for d in lines] == ["q1", "q2"]
    q1, q2 = lines
    assert q1["winner"] == "b"
    assert q1["flags"] == ["order_unstable", "overrides_direct"]
    assert q2["flags"] == ["incomplete"]
    for key in (
        "top_agreement",
        "top_entropy",
        "kendall_w",
        "margin",
        "slot_following",
        "direct_winner",
    ):
        assert key in q1["metrics"]


def test_aggregate_k_and_weights(judgments_file):
    first = runner.invoke(app, ["aggregate", str(judgments_file), "--k", "1"])
    assert json.loads(first.stdout.splitlines()[0])["winner"] == "a"
    voted = runner.invoke(app, ["aggregate", str(judgments_file), "--weights", "0,0,1,0"])
    scored = runner.invoke(app, ["aggregate", str(judgments_file), "--preset", "vote-only"])
    assert voted.stdout == scored.stdout
    both = runner.invoke(
        app, ["aggregate", str(judgments_file), "--preset", "uniform", "--weights", "1,0,0,0"]
    )
    assert both.exit_code == 2
    assert "not both" in both.stderr
    bad = runner.invoke(app, ["aggregate", str(judgments_file), "--weights", "1,2"])
    assert bad.exit_code == 2
    assert "four numbers" in bad.stderr


def test_aggregate_reports_bad_lines(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"item_id": "q1"\n')
    result = runner.invoke(app, ["aggregate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:1: invalid JSON" in result.stderr


def test_aggregate_reads_an_unusable_ok_line_as_a_failed_call(judgments_file):
    lines = judgments_file.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["factuality"]["b"]
    lines[1] = json.dumps(broken)
    judgments_file.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["aggregate", str(judgments_file)])
    assert result.exit_code == 0, result.output
    q1, q2 = (json.loads(line) for line in result.stdout.splitlines())
    assert "incomplete" in q1["flags"]
    assert (q1["metrics"]["n_ok"], q1["metrics"]["n_calls"]) == (2, 3)
    assert f"invalid_judgment: {judgments_file}:2: factuality" in result.stderr
    assert q2["winner"] == "a"


def test_aggregate_kemeny_beyond_six_candidates(tmp_path):
    ids = [f"c{i}" for i in range(8)]
    calls = [judgment("q", i, ids[i:] + ids[:i], {c: float(c[1]) for c in ids}) for i in range(3)]
    path = tmp_path / "j.jsonl"
    with path.open("w") as fh:
        write_judgments(calls, fh)
    result = runner.invoke(app, ["aggregate", str(path), "--rule", "kemeny"])
    assert result.exit_code == 0, result.output
    [record] = (json.loads(line) for line in result.stdout.splitlines())
    assert record["ranking"] == ids[::-1]
    assert record["metrics"]["kemeny_search"] == "local"


def json_lines(records: list[dict]) -> str:
    """Records as ``pcf`` prints them, one JSON object a line."""
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def test_aggregate_prints_what_the_library_decides_for_a_big_shuffled_file(tmp_path):
    calls = mixed_judgments(items=1100)  # more items than the command decides at a time
    path = write_calls(tmp_path / "j.jsonl", calls)
    keys = list(dict.fromkeys(j.item_id for j in calls))[::-1][10:]
    orders = {j.item_id: sorted(j.order) for j in calls}
    items = tmp_path / "items.jsonl"
    items.write_text(
        json_lines(
            [Item(key, "?", tuple(Candidate(c, c) for c in orders[key])).to_dict() for key in keys]
        )
    )
    for options, library in [
        ([], {}),
        (["--items", str(items), "--k", "2", "--rule", "borda"], {"k": 2, "rule": "borda"}),
    ]:
        listed = load_dataset("jsonl", items) if options else None
        result = runner.invoke(app, ["aggregate", str(path), *options])
        assert result.exit_code == 0, result.output
        assert result.stdout == json_lines(aggregate(read_judgments(path), items=listed, **library))


def test_aggregate_stops_at_a_bad_line_far_into_the_file_and_prints_nothing(tmp_path):
    lines = write_calls(tmp_path / "j.jsonl", mixed_judgments(items=300)).read_text().splitlines()
    lines[949] = json.dumps(json.loads(lines[949]) | {"execution": -1})
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["aggregate", str(path)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == f"{path}:950: execution: must be an integer >= 0, got -1\n"


def test_export_prints_and_writes_the_whole_runs_records(mixed_runs, session, tmp_path):
    dataset_id = get_run("mixed/pcf", session=session).dataset_id
    first = load_items(dataset_id, session=session)[0]
    add_adjudication(first.metadata["db_id"], session=session, annotator="ann", choice="x1")
    session.commit()
    graded = Counter()
    for name in mixed_runs:
        run = get_run(name, session=session)
        gold = {i.item_id: i.gold for i in load_items(run.dataset_id, session=session)}
        decisions = [
            r
            | {
                "gold": gold[r["item_id"]],
                "correct": gold[r["item_id"]] and r["winner"] == gold[r["item_id"]],
            }
            for r in run_decisions(run, session=session)
        ]
        graded.update(str(r["correct"]) for r in decisions)
        for what, records in {
            "items": [item.to_dict() for item in load_items(run.dataset_id, session=session)],
            "judgments": judgment_records(run, session=session),
            "decisions": decisions,
            "adjudications": adjudication_records(run.dataset_id, session=session),
        }.items():
            printed = runner.invoke(app, ["export", name, "--what", what])
            assert printed.exit_code == 0, printed.output
            assert printed.stdout == json_lines(records), (name, what)
            out = tmp_path / name / f"{what}.jsonl"
            written = runner.invoke(app, ["export", name, "--what", what, "--out", str(out)])
            assert written.stderr == f"wrote {len(records)} lines to {out}\n"
            assert out.read_text(encoding="utf-8") == printed.stdout
    assert graded.keys() == {"True", "False", "None"}  # right, wrong, and without gold
    assert len(adjudication_records(dataset_id, session=session)) == 1


def test_validate_counts_and_errors(tmp_path):
    good = tmp_path / "items.jsonl"
    good.write_text(
        json.dumps(
            {
                "item_id": "a",
                "prompt": "P",
                "candidates": [{"id": "x", "text": "1"}, {"id": "y", "text": "2"}],
                "gold": "x",
                "bucket": "b1",
            }
        )
        + "\n"
    )
    result = runner.invoke(app, ["validate", "jsonl", str(good)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["items"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a"}\nnot json\n')
    result = runner.invoke(app, ["validate", "jsonl", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:1: prompt: missing" in result.stderr
    assert f"{bad}:2: invalid JSON" in result.stderr
    assert runner.invoke(app, ["validate", "yaml", str(bad)]).exit_code == 2


@pytest.mark.skipif(not O1_MINI.exists(), reason="../shared/data is absent")
def test_replay_judgebench_prints_the_official_score():
    result = runner.invoke(app, ["replay", "judgebench", str(O1_MINI)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["pairs"] == 350
    assert round(summary["judgebench_official"], 2) == 65.71
    for key in (
        "buckets",
        "macro_accuracy",
        "position_consistency",
        "primacy",
        "recency",
        "order1_accuracy",
        "order2_accuracy",
    ):
        assert key in summary


@pytest.mark.skipif(not O1_MINI.exists(), reason="../shared/data is absent")
def test_replay_llmbar_one_judge_and_a_clear_error_for_many():
    root = LLMBAR
    result = runner.invoke(
        app,
        ["replay", "llmbar", str(root / "Natural"), "--judge", "GPT-4", "--strategy", "Vanilla"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["pairs"], summary["primacy"], summary["recency"]) == (100, 3, 2)
    many = runner.invoke(app, ["replay", "llmbar", str(root)])
    assert many.exit_code == 1
    assert "--judge and --strategy" in many.stderr


def test_export_makes_the_out_folder_and_refuses_a_folder_in_one_line(demo_engine, tmp_path):
    out = tmp_path / "new" / "deeper" / "decisions.jsonl"
    result = runner.invoke(app, ["export", "demo-direct", "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = out.read_text().splitlines()
    assert written
    out.write_text("old")
    assert runner.invoke(app, ["export", "demo-direct", "--out", str(out)]).exit_code == 0
    assert out.read_text().splitlines() == written  # an existing file is replaced
    for target, code, message in [
        (tmp_path, 2, f"error: --out {tmp_path} is a folder; give a file name"),
        (out / "under-a-file.jsonl", 1, f"error: cannot write {out / 'under-a-file.jsonl'}: "),
        (tmp_path / "d.parquet", 2, "error: pcf export writes JSON Lines; --out d.parquet names"),
    ]:
        result = runner.invoke(app, ["export", "demo-direct", "--out", str(target)])
        assert result.exit_code == code
        assert result.stderr.startswith(message)
        assert len(result.stderr.splitlines()) == 1


def test_report_refuses_a_file_as_its_folder_in_one_line(demo_engine, tmp_path):
    taken = tmp_path / "report"
    taken.write_text("not a folder")
    result = runner.invoke(app, ["report", "demo-direct", "--out", str(taken)])
    assert result.exit_code == 2
    assert (
        result.stderr == f"error: --out {taken} is a file; give a folder (it is made if missing)\n"
    )
    assert taken.read_text() == "not a folder"
