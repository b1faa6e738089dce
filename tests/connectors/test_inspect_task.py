"""PCF inside inspect_ai: ``inspect eval`` of the task with inspect's ``mockllm`` model (answers
made from the prompt it is shown, so no network and no order of calls matters), its scores
against ``pcf aggregate`` on the same answers, and ``pcf import inspect`` of the log on Review."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog, EvalSample, read_eval_log, write_eval_log
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

import pcf.connectors.inspect_task
from pcf.cli import app
from pcf.connectors.inspect_task import CALLS, judge
from pcf.labelling.membership import set_local_name
from tests.app import APP, LOCAL_NAME, open_page
from tests.app.test_review import frame_with, listed

runner = CliRunner()
HANG_S = 300
"""Bounds only a hang of the `inspect eval` process."""
ITEMS = [
    {
        "item_id": "capital",
        "prompt": "What is the capital of Australia?",
        "candidates": [
            {"id": "a", "text": "Canberra, chosen as a compromise in 1908."},
            {"id": "b", "text": "Sydney, the largest city."},
            {"id": "c", "text": "Melbourne, the seat of parliament until 1927, is the capital."},
        ],
        "gold": "a",
    },
    {
        "item_id": "boiling",
        "prompt": "At what temperature does water boil at sea level?",
        "candidates": [
            {"id": "w", "text": "About 100 degrees Celsius."},
            {"id": "x", "text": "100 degrees Celsius at 1 atm (212 Fahrenheit)."},
            {"id": "y", "text": "90 degrees Celsius."},
            {"id": "z", "text": "It depends only on the pot."},
        ],
        "gold": "x",
    },
    {
        "item_id": "moon",
        "prompt": "Who first walked on the Moon?",
        "candidates": [
            {"id": "p", "text": "Neil Armstrong, in July 1969."},
            {"id": "q", "text": "Yuri Gagarin, in 1961."},
        ],
        "gold": None,
    },
]
FACTUALITY = {"a": 8, "b": 3, "c": 5, "w": 6, "x": 6.5, "y": 2, "z": 1, "p": 9, "q": 2}
"""The mock judge's scores; it adds 3 to whichever candidate it sees first (a position bias)."""
TEXTS = {c["text"]: c["id"] for item in ITEMS for c in item["candidates"]}


def mock_judge(messages: list[ChatMessage], *_: object) -> ModelOutput:
    """A listwise answer to the prompt shown: slots found by where each candidate's text is;
    no JSON when Gagarin is shown first (a failed call)."""
    user = messages[-1].text
    shown = [
        cid for _, cid in sorted((user.index(t), cid) for t, cid in TEXTS.items() if t in user)
    ]
    keys = re.findall(r"Their keys are ([A-Z, ]+)\.", user)[0].split(", ")
    scores = {
        key: min(FACTUALITY[cid] + 3 * (slot == 0), 10)
        for slot, (key, cid) in enumerate(zip(keys, shown, strict=True))
    }
    answer = {
        "candidates": [
            {"key": k, "factuality": s, "hallucination_risk": 0.2, "rationale": "."}
            for k, s in scores.items()
        ],
        "ranking": sorted(scores, key=lambda k: -scores[k]),
        "confidence": 0.8,
    }
    text = "I would rather not say." if shown[0] == "q" else json.dumps(answer)
    output = ModelOutput.from_content("mockllm", text)
    output.usage = ModelUsage(input_tokens=len(user), output_tokens=len(text))  # no tokenizer
    return output


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory) -> tuple[Path, EvalLog]:
    """An eval of the task over :data:`ITEMS` (K=4, two epochs) and its log."""
    folder = tmp_path_factory.mktemp("inspect")
    items = folder / "rated.jsonl"
    items.write_text("".join(json.dumps(i) + "\n" for i in ITEMS), encoding="utf-8")
    [log] = inspect_eval(
        judge(items=str(items), k=4, dataset_seed=5, seed=3),
        model=get_model("mockllm/model", custom_outputs=mock_judge),
        epochs=2,
        log_dir=str(folder / "logs"),
        display="none",
    )
    assert log.status == "success", log.error
    return Path(log.location), read_eval_log(log.location)


def test_the_extension_is_registered_through_inspects_entry_point():
    [entry] = [e for e in entry_points(group="inspect_ai") if e.name == "pcf"]
    assert entry.load() is pcf.connectors.inspect_task


@pytest.mark.db
def test_scores_equal_pcf_aggregate_and_the_imported_run_shows_on_review(
    eval_log, session, tmp_path
):
    path, log = eval_log
    first = {s.id: s.scores["permutation_consensus"] for s in log.samples if s.epoch == 1}
    assert len(log.samples) == 2 * len(ITEMS)

    imported = runner.invoke(app, ["import", "inspect", str(path)])
    assert imported.exit_code == 0, imported.output
    summary = json.loads(imported.stdout)
    run = summary["run"]
    assert run == "rated/pcf/replay/mockllm/model/k4-balanced-x2-s3"
    assert (summary["simulated"], summary["items"], summary["attempts"]) == (True, 3, 24)

    for what in ("judgments", "items"):
        out = tmp_path / f"{what}.jsonl"
        assert runner.invoke(app, ["export", run, "--what", what, "--out", str(out)]).exit_code == 0
    aggregated = runner.invoke(
        app,
        [
            "aggregate",
            str(tmp_path / "judgments.jsonl"),
            "--items",
            str(tmp_path / "items.jsonl"),
            "--executions",
            "1",
        ],
    )
    assert aggregated.exit_code == 0, aggregated.output
    records = [json.loads(line) for line in aggregated.stdout.splitlines()]
    assert records == [first[i["item_id"]].metadata for i in ITEMS]
    for record in records:
        value = first[record["item_id"]].value
        assert value["winner"] == record["winner"]
        assert {f for f, raised in value.items() if raised is True} - {"correct"} == set(
            record["flags"]
        )
    by_id = {r["item_id"]: r for r in records}
    assert by_id["capital"]["winner"] == "a"  # the position bias does not beat 8 against 5
    assert "order_unstable" in by_id["boiling"]["flags"]
    assert "incomplete" in by_id["moon"]["flags"]
    metrics = log.results.scores[0].metrics
    graded = [first[i].value["correct"] for i in ("capital", "boiling")]
    assert metrics["accuracy"].value == sum(graded) / 2  # the item without gold left out
    assert metrics["incomplete"].value == pytest.approx(1 / 3)

    set_local_name(LOCAL_NAME, session=session)
    session.commit()
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.session_state["dataset"], at.session_state["run"] = "rated", run
    at = open_page(at.run(), "review", item="boiling")
    assert not at.exception
    assert sorted(listed(at)) == sorted(first)
    consensus = frame_with(at, "U")
    assert dict(zip(consensus["id"], consensus["C"], strict=True)) == by_id["boiling"]["consensus"]


@pytest.mark.db
def test_a_log_that_is_not_the_tasks_imports_nothing_and_says_where(
    eval_log, isolated_database, tmp_path, monkeypatch
):
    path, log = eval_log
    broken = log.model_copy(deep=True)
    sample = {(s.id, s.epoch): s for s in broken.samples}
    del sample["boiling", 1].metadata["item"]["prompt"]  # the 2nd item of the dataset
    del sample["moon", 2].metadata["pcf_calls"]  # the 3rd
    write_eval_log(broken, str(tmp_path / "broken.eval"))
    result = runner.invoke(app, ["import", "inspect", str(tmp_path / "broken.eval")])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[1:] == [
        f"{tmp_path / 'broken.eval'}:2: prompt: missing",
        f"{tmp_path / 'broken.eval'}:3: metadata.pcf_calls: not the pcf/judge task's calls "
        "(KeyError('pcf_calls'))",
    ]
    listed_runs = runner.invoke(app, ["runs"])
    assert json.loads(listed_runs.stdout)["datasets"] == []

    seeded = runner.invoke(app, ["import", "inspect", str(path), "--seed", "3"])
    assert (seeded.exit_code, seeded.stderr) == (
        2,
        "error: --subset, --limit and --seed are the log's own: leave them out\n",
    )
    not_a_log = runner.invoke(app, ["import", "inspect", str(tmp_path / "missing.eval")])
    assert not_a_log.exit_code == 1
    assert not_a_log.stderr.startswith(f"nothing imported: {tmp_path / 'missing.eval'} is not")

    for module in ("pcf.connectors.inspect_log", "pcf.connectors.inspect_task"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)
    missing = runner.invoke(app, ["import", "inspect", str(path)])
    assert missing.exit_code == 1
    assert missing.stderr == (
        "error: reading an inspect log needs inspect_ai: pip install 'pcf-review[inspect]'\n"
    )


@pytest.mark.db
def test_a_log_whose_k_epochs_or_calls_disagree_with_its_samples_imports_nothing(
    eval_log, isolated_database, tmp_path
):
    """A real log edited: K changed, a sample's calls cut, a sample dropped, the epochs
    changed, ``task_args`` broken: each is refused whole, every problem on a line that names
    the log, the sample (its position in the dataset) and the field; nothing is stored."""
    _, log = eval_log

    def refused(name: str, edit: Callable[[EvalLog], object]) -> list[str]:
        edited = log.model_copy(deep=True)
        edit(edited)
        out = tmp_path / f"{name}.eval"
        write_eval_log(edited, str(out))
        result = runner.invoke(app, ["import", "inspect", str(out)])
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines()[0].startswith("nothing imported")
        prefix = f"{out}:"
        assert all(line.startswith(prefix) for line in result.stderr.splitlines()[1:])
        return [line.removeprefix(prefix) for line in result.stderr.splitlines()[1:]]

    def sample(edited: EvalLog, item: str, epoch: int) -> EvalSample:
        return next(s for s in edited.samples if (s.id, s.epoch) == (item, epoch))

    calls = "metadata.pcf_calls"
    assert refused("k", lambda e: e.eval.task_args.update(k=3)) == [
        f"{n}: {calls}: 4 calls in epoch {epoch}, not the task's K of 3"
        for epoch in (1, 2)
        for n in (1, 2, 3)
    ]
    cut = refused("cut", lambda e: sample(e, "boiling", 2).metadata[CALLS].pop())
    assert cut == [f"2: {calls}: 3 calls in epoch 2, not the task's K of 4"]
    dropped = refused("dropped", lambda e: e.samples.remove(sample(e, "moon", 2)))
    assert dropped == ["3: epoch: judged in epochs [1], not once in each of the log's 2"]
    epochs = refused("epochs", lambda e: setattr(e.eval.config, "epochs", 3))
    assert epochs == [
        f"{n}: epoch: judged in epochs [1, 2], not once in each of the log's 3" for n in (1, 2, 3)
    ]
    assert refused("no-k", lambda e: e.eval.task_args.pop("k")) == [" task_args.k: missing"]
    wrong = refused("args", lambda e: e.eval.task_args.update(k="4", schedule="nope", seed=1.5))
    assert wrong == [
        " task_args.k: must be an integer >= 1, got '4'",
        " task_args.schedule: must be one of balanced, random, exhaustive, repeated, got 'nope'",
        " task_args.seed: must be an integer, got 1.5",
    ]
    assert json.loads(runner.invoke(app, ["runs"]).stdout)["datasets"] == []


def test_the_quick_start_exits_non_zero_with_the_reason_when_mockllm_cannot_count_tokens(
    tmp_path,
):
    """`inspect eval pcf/judge --model mockllm/model` offline: tiktoken cannot fetch its
    encoding (here a proxy on a closed local port refuses it: nothing leaves the machine), so
    the task is not made and the command exits non-zero with the reason, not 0 after every
    sample failed."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(i) + "\n" for i in ITEMS), encoding="utf-8")
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env |= {"HTTPS_PROXY": closed, "HTTP_PROXY": closed, "TIKTOKEN_CACHE_DIR": str(tmp_path)}
    inspect = Path(sys.executable).parent / "inspect"
    task = f"{pcf.connectors.inspect_task.__file__}@judge"
    done = subprocess.run(
        [
            *(str(inspect), "eval", task, "-T", f"items={items}", "-T", "k=2"),
            *("--model", "mockllm/model", "--log-dir", str(tmp_path / "logs")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode != 0
    reason = " ".join((done.stdout + done.stderr).split())
    assert "mockllm/model cannot start: inspect counts its tokens with tiktoken's" in reason
