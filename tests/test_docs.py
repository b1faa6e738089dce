"""The documentation cannot go stale: the CLI reference is the commands' own help, every
command's example runs, the Python API page's example prints what the page says, and the
demo's figures in the pages are the demo's."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from typer.testing import CliRunner

from pcf.analysis.results import run_summary
from pcf.cli import app
from pcf.store import get_run
from tests.judge_providers import OPENAI, use_environment
from tests.runs.test_batch import answer
from tests.shared_data import LLMBAR, O1_MINI, RB2
from tests.wire_server import WireServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The order the examples run in, each on what the earlier ones left (the demo first, deletes
# last). A new command needs its place here: the test fails until it has one.
EXAMPLE_ORDER = (
    "pcf demo",
    "pcf db current",
    "pcf db history",
    "pcf db upgrade",
    "pcf runs",
    "pcf validate",
    "pcf import",
    "pcf export",
    "pcf aggregate",
    "pcf judge",
    "pcf study",
    "pcf check",
    "pcf batch status",
    "pcf batch collect",
    "pcf batch cancel",
    "pcf batch forget",
    "pcf report",
    "pcf whatif",
    "pcf triage",
    "pcf escalate",
    "pcf replay judgebench",
    "pcf replay llmbar",
    "pcf members add",
    "pcf members list",
    "pcf tokens create",
    "pcf tokens list",
    "pcf tokens revoke",
    "pcf webhooks deliver",
    "pcf labels assign",
    "pcf members remove",
    "pcf labelling set",
    "pcf labels import",
    "pcf labels export",
    "pcf gold export",
    "pcf audit",
    "pcf runs delete",
    "pcf api",
)


def docs_script(name: str) -> ModuleType:
    """A script of ``docs/`` (not a package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli_reference = docs_script("cli_reference")


def documented() -> dict[str, str | None]:
    """Every command's path and the example its help gives (None without one)."""
    from typer.main import get_command

    root = get_command(app)
    found = cli_reference.commands(root, cli_reference.typer.Context(root, info_name="pcf"))
    return {ctx.command_path: cli_reference.example_of(command) for command, ctx in found}


def test_cli_reference_is_the_commands_help():
    committed = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert cli_reference.render() == committed, (
        "docs/cli.md differs from the commands' help: run `make cli-docs` and commit it"
    )


def test_cli_reference_changes_with_a_help_text(monkeypatch):
    """The page is made from the help texts themselves: another help text, another page."""
    command = next(c for c in app.registered_commands if c.name == "import")
    monkeypatch.setattr(command.callback, "__doc__", "Import a dataset, some other way.")
    page = cli_reference.render()
    assert "Import a dataset, some other way." in page
    assert page != (DOCS / "cli.md").read_text(encoding="utf-8")


def test_every_command_has_an_example_in_the_run_order():
    examples = documented()
    assert [path for path, example in examples.items() if example is None] == []
    assert sorted(EXAMPLE_ORDER) == sorted(examples)
    for path, example in examples.items():
        assert example.startswith(path + " ") or example == path, (path, example)


@pytest.fixture
def example_folder(tmp_path, monkeypatch, demo_engine) -> Path:
    """A working folder holding the files the examples name, on a copy of the demo database."""
    for path in (RB2, O1_MINI, LLMBAR):
        if not path.exists():
            pytest.skip(f"shared data missing: {path}")
    folder = tmp_path / "work"
    folder.mkdir()
    shutil.copy(RB2, folder / "factuality.jsonl")
    shutil.copy(ROOT / "data" / "demo" / "items.jsonl", folder / "items.jsonl")
    (folder / "outputs").mkdir()
    shutil.copy(O1_MINI, folder / "outputs" / "judge_model=o1-mini-2024-09-12.jsonl")
    (folder / "Dataset").mkdir()
    (folder / "Dataset" / "LLMBar").symlink_to(LLMBAR)
    (folder / "guidelines.md").write_text("Pick the most factual answer.\n", encoding="utf-8")
    (folder / "labels.csv").write_text("item_id,annotator,answer\ndemo-001,rater-1,cannot_tell\n")
    monkeypatch.chdir(folder)
    return folder


def test_every_command_example_runs(example_folder, monkeypatch):
    """Each example, as the reference prints it, exits 0 on the demo data; the provider
    examples reach the real OpenAI SDK's wire protocol on a local server. `pcf api`'s server
    is asked for and not run (the Pipelines page's test serves it)."""
    examples = documented()
    runner = CliRunner()
    served: list[dict] = []
    monkeypatch.setattr("uvicorn.run", lambda app, **options: served.append(options))
    with WireServer(answer) as server:
        use_environment(monkeypatch, OPENAI)
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        for path in EXAMPLE_ORDER:
            line, _, redirect = examples[path].partition(" > ")
            result = runner.invoke(app, shlex.split(line)[1:])
            assert result.exit_code == 0, f"{line}\n{result.output}"
            if redirect:
                (example_folder / redirect).write_text(result.stdout, encoding="utf-8")
            for written in re.findall(r"--(?:out|report) (\S+)", line):
                assert (example_folder / written).exists(), f"{line} wrote no {written}"
        assert server.request_count > 0
    assert served == [{"host": "127.0.0.1", "port": 8502, "log_level": "info"}]


def test_readme_tour_runs(demo_engine, tmp_path, monkeypatch):
    """The README's five-command tour, on the demo."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A five-command tour", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    lines = tour.strip().splitlines()
    assert len(lines) == 5
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for line in lines:
        result = runner.invoke(app, shlex.split(line)[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"


def test_demo_figures_on_getting_started_are_the_demo(db):
    """The accuracies the Getting started page quotes, computed from the demo's runs."""
    page = " ".join((DOCS / "getting-started.md").read_text(encoding="utf-8").split())
    mild = run_summary(get_run("demo-pcf", session=db), session=db)["accuracy"]
    strong = run_summary(get_run("demo-strong-bias-pcf", session=db), session=db)["accuracy"]
    assert (
        f"PCF is no better than direct: {100 * mild['method_accuracy']:.1f}% against "
        f"{100 * mild['direct_accuracy']:.1f}%." in page
    )
    assert (
        f"the direct verdict follows the first slot ({100 * strong['direct_accuracy']:.1f}%) "
        f"and the consensus over orderings recovers ({100 * strong['method_accuracy']:.1f}%, "
        f"{strong['improved']} improved, {strong['regressed']} regressed, McNemar p = "
        f"{strong['mcnemar_p']:.3f})." in page
    )


def test_ci_page_workflow_passes_its_gate_and_its_test(isolated_database, monkeypatch):
    """The CI page's workflow, its `pcf` steps on a fresh database: the gate passes with the
    figures the page quotes, and the page's test passes on the run they stored."""
    page = (DOCS / "ci.md").read_text(encoding="utf-8")
    blocks = dict(re.findall(r"```(yaml|python)\n(.*?)```", page, flags=re.DOTALL))
    steps = yaml.safe_load(blocks["yaml"])["jobs"]["gate"]["steps"]
    lines = [step["run"] for step in steps if step.get("run", "").startswith("pcf ")]
    assert [line.split()[1] for line in lines] == ["import", "study", "check"]
    monkeypatch.chdir(ROOT)
    for line in lines:
        result = CliRunner().invoke(app, shlex.split(line)[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
    checks = {c["figure"]: c["value"] for c in json.loads(result.stdout.splitlines()[-1])["checks"]}
    unstable, driven = checks["order_unstable"], checks["position_driven"]
    quoted = f"{100 * unstable:.1f}% order-unstable and {100 * driven:.1f}% position-driven"
    assert quoted in " ".join(page.split())
    test: dict = {}
    exec(blocks["python"], test)
    test["test_the_judge_holds_its_gate"]()


def api_example(page: str) -> tuple[str, str]:
    """The Python code block of the API page and the output block after it."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", page, flags=re.DOTALL)
    code = next(body for lang, body in blocks if lang == "python")
    output = next(body for lang, body in blocks if lang == "text")
    return code, output


def test_python_api_example_prints_what_the_page_says(tmp_path):
    code, expected = api_example((DOCS / "python-api.md").read_text(encoding="utf-8"))
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected


def test_pipelines_page_curl_and_python_examples_run(isolated_database, monkeypatch, capsys):
    """The Pipelines page's curl lines and Python example, against the API served alone on a
    free port with a token of the page's own commands: the Python prints what the page says."""
    import threading

    import uvicorn

    from pcf.api import standalone
    from tests.served_app import free_port

    page = (DOCS / "pipelines.md").read_text(encoding="utf-8")
    shell = re.findall(r"```bash\n(.*?)```", page, flags=re.DOTALL)
    python = re.search(r"```python\n(.*?)```", page, flags=re.DOTALL)[1]
    runner = CliRunner()
    for line in shell[0].strip().splitlines()[:2]:  # members add, tokens create
        result = runner.invoke(app, shlex.split(line.split("#")[0])[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
    port = free_port()
    config = uvicorn.Config(standalone(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the API did not start"
            thread.join(0.05)
        env = {
            "PCF_API_URL": f"http://127.0.0.1:{port}/api/v1",
            "PCF_API_TOKEN": result.stdout.strip(),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        for line in shell[1].strip().splitlines():
            done = subprocess.run(
                ["bash", "-c", f"{line} -w '%{{http_code}}' --fail-with-body"],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        exec(python, {})
        printed = capsys.readouterr().out
    finally:
        server.should_exit = True
        thread.join(30)
    assert f"It prints `{printed.strip()}`." in page
