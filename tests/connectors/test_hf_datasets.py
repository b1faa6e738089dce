"""`pcf import hf`: Hugging Face datasets in the hub's layouts, read by the real `datasets`
library offline (tests/conftest.py sets HF_HUB_OFFLINE), become the items the file import makes."""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from pcf.cli import app
from pcf.connectors.hf_datasets import load_hf
from pcf.errors import DataError
from pcf.items import load_dataset
from pcf.store import get_dataset, load_items
from tests.shared_data import JUDGEBENCH_CLAUDE_PAIRS, JUDGEBENCH_PAIRS, RB2

SOURCE_MD = RB2.with_name("SOURCE.md")

datasets = pytest.importorskip("datasets")
needs_shared = pytest.mark.skipif(not RB2.exists(), reason="../shared/data is absent")


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """The library's cache of prepared datasets in the test's folder, not the user's."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def imported(session, name: str, *args: str) -> list:
    """The items of `pcf import ARGS --name NAME`, as stored."""
    done = CliRunner().invoke(app, ["import", *args, "--name", name])
    assert done.exit_code == 0, done.output
    return load_items(get_dataset(name, session=session).id, session=session)


def refused(*args: str) -> str:
    """The message of a `pcf import` that fails with exit code 1."""
    done = CliRunner().invoke(app, ["import", *args])
    assert done.exit_code == 1, done.output
    return done.output


@needs_shared
def test_rewardbench2_in_the_hubs_layouts_imports_as_the_file_does(session, tmp_path):
    rows = [json.loads(line) for line in RB2.read_text(encoding="utf-8").splitlines()]
    hub = tmp_path / "reward-bench-2"
    (hub / "data").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(hub / "data" / "test-00000-of-00001.parquet")
    saved = tmp_path / "saved"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(saved)

    expected = load_dataset("rewardbench2", RB2)
    assert len(expected) == 120
    assert imported(session, "parquet", "hf", str(hub)) == expected
    assert imported(session, "saved", "hf", str(saved), "--subset", "Factuality") == expected

    rows[4]["chosen"].append("A second chosen answer.")
    rows[9]["prompt"] = None
    bad = tmp_path / "bad"
    datasets.Dataset.from_list(rows).save_to_disk(bad)
    message = refused("hf", str(bad), "--name", "bad")
    assert "nothing imported: 2 problem(s)" in message
    assert f"{bad}:5: chosen: must hold exactly 1 answer, got 2" in message
    assert f"{bad}:10: prompt: missing" in message
    assert get_dataset("bad", session=session) is None
    assert "has splits ['test'], not 'dev'" in refused("hf", str(saved), "--split", "dev")


@needs_shared
def test_a_single_file_and_rewardbench2_without_subset_import(session, tmp_path):
    """One Parquet, JSON Lines or CSV file, not a folder; RewardBench 2's rows without their
    ``subset`` column are items named by their id alone, with the same candidates and gold."""
    rows = [json.loads(line) for line in RB2.read_text(encoding="utf-8").splitlines()]
    expected = load_dataset("rewardbench2", RB2)
    assert imported(session, "one-jsonl", "hf", str(RB2)) == expected
    parquet = tmp_path / "factuality.parquet"
    pd.DataFrame(rows).drop(columns="subset").to_parquet(parquet)
    bare = imported(session, "one-parquet", "hf", str(parquet))
    assert [i.item_id for i in bare] == [str(n) for n in range(120)]
    assert [(len(i.candidates), i.bucket) for i in bare] == [(4, None)] * 120
    assert [i.text_of(i.gold) for i in bare] == [row["chosen"][0] for row in rows]
    capitals = tmp_path / "capitals.csv"
    capitals.write_text("qid,question\nq1,Which city?\n")
    assert "fit no known format" in refused("hf", str(capitals))
    assert "it has no --config, --split or --revision" in refused(
        "hf", str(parquet), "--split", "test"
    )
    assert "a single file must be one of .parquet" in refused("hf", str(SOURCE_MD))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"item_id": "q", "prompt": "P?"\n')
    assert f"cannot read {broken}: JSON parse error" in refused("hf", str(broken))


@needs_shared
def test_judgebench_json_files_with_splits_import_as_the_file_does(session, tmp_path):
    hub = tmp_path / "JudgeBench"
    (hub / "data").mkdir(parents=True)
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: gpt\n    path: data/gpt.jsonl\n  - split: claude\n    path: data/claude.jsonl\n"
        "---\n"
    )
    shutil.copy(JUDGEBENCH_PAIRS, hub / "data" / "gpt.jsonl")
    shutil.copy(JUDGEBENCH_CLAUDE_PAIRS, hub / "data" / "claude.jsonl")

    assert "has splits ['gpt', 'claude']: choose one with --split" in refused("hf", str(hub))
    got = imported(session, "jb", "hf", str(hub), "--split", "claude", "--subset", "livecodebench")
    assert got == load_dataset("judgebench", JUDGEBENCH_CLAUDE_PAIRS, subset="livecodebench")
    assert {i.bucket for i in got} == {"livecodebench"}


def test_other_columns_are_named_with_map_and_nothing_tries_the_network(session, tmp_path):
    rows = [
        {
            "qid": f"q{n}",
            "question": "Which city is the capital of Australia?",
            "answers": [{"id": "a", "text": "Canberra"}, {"id": "b", "text": "Sydney"}],
            "right": "a",
        }
        for n in range(3)
    ]
    folder = tmp_path / "capitals"
    datasets.Dataset.from_list(rows).save_to_disk(folder)
    unknown = refused("hf", str(folder))
    assert "columns ['answers', 'qid', 'question', 'right'] fit no known format" in unknown
    assert "items.jsonl (jsonl) lacks item_id, prompt, candidates" in unknown
    mapped = ["--map", "item_id=qid", "--map", "prompt=question", "--map", "candidates=answers"]
    items = imported(session, "capitals", "hf", str(folder), *mapped, "--map", "gold=right")
    assert [(i.item_id, i.gold, i.text_of("a")) for i in items] == [
        (f"q{n}", "a", "Canberra") for n in range(3)
    ]
    assert "has no column 'nope'" in refused("hf", str(folder), *mapped, "--map", "gold=nope")
    # The hub, offline: a clear refusal at once, never a request.
    assert "cannot read nobody/nothing" in refused("hf", "nobody/nothing")
    assert "OfflineModeIsEnabled" in refused("hf", "nobody/nothing")


def test_the_size_cap_and_a_missing_library_are_one_line_errors(tmp_path, monkeypatch):
    long = "x" * 90_000
    row = {"item_id": "q", "prompt": "P?", "candidates": [{"id": "a", "text": long}] * 2}
    folder = tmp_path / "big"
    rows = [{**row, "item_id": f"q{n}"} for n in range(8)]  # 1.4 MB of text
    datasets.Dataset.from_list(rows).save_to_disk(folder)
    monkeypatch.setenv("PCF_MAX_FILE_MB", "1")
    with pytest.raises(DataError, match=r"over the limit of 1 MB \(set PCF_MAX_FILE_MB"):
        load_hf(str(folder))
    monkeypatch.setitem(sys.modules, "datasets", None)  # as when the hf extra is not installed
    with pytest.raises(ValueError, match=r"pip install 'pcf-review\[hf\]'"):
        load_hf(str(folder))


def test_the_hf_options_are_refused_for_files(tmp_path):
    done = CliRunner().invoke(app, ["import", "jsonl", str(tmp_path / "x.jsonl"), "--split", "a"])
    assert done.exit_code == 2
    assert "--config, --split, --revision and --map are for hf" in done.output
    done = CliRunner().invoke(app, ["import", "hf", str(tmp_path), "--map", "prompt"])
    assert done.exit_code == 2
    assert "--map takes FIELD=COLUMN" in done.output


def test_only_the_split_to_import_is_read(session, tmp_path):
    """A dataset whose other split is no Parquet at all, in a folder of the hub's layout and
    as a save_to_disk folder: importing the sound split never reads the other one."""
    rows = [
        {"item_id": f"q{n}", "prompt": "P?", "candidates": [{"id": c, "text": c} for c in "ab"]}
        for n in range(3)
    ]
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(hub / "train-00000-of-00001.parquet")
    (hub / "test-00000-of-00001.parquet").write_bytes(b"not Parquet, and would fail to read")
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows)}
    ).save_to_disk(saved)
    for arrow in (saved / "test").glob("*.arrow"):
        arrow.write_bytes(b"not Arrow either")
    for name, folder in (("hub", hub.parent), ("saved", saved)):
        got = imported(session, name, "hf", str(folder), "--split", "train")
        assert [i.item_id for i in got] == ["q0", "q1", "q2"]
        assert "has splits" in (unchosen := refused("hf", str(folder)))
        assert "'test'" in unchosen
        assert "choose one with --split" in unchosen
