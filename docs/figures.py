"""Write the figures page (docs/figures.md) from the commands and benchmarks that measure them.

Every figure on the page is printed by a command run here: the demo's runs, the recorded
judges' replays (from ``../shared/data``) and the scripts in ``benchmarks/`` (each prints one
JSON object on its last line). Nothing is typed by hand. Run it from the repository root with
``make figures`` (minutes: the adaptive budget and the browser's page loads dominate);
``--only NAME`` reruns one section and keeps the others as the page has them.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "figures.md"
SHARED = ROOT.parent / "shared" / "data"
O1_MINI = (
    "judgebench/outputs/dataset=judgebench,response_model=gpt-4o-2024-05-13,"
    "judge_name=arena_hard,judge_model=o1-mini-2024-09-12.jsonl"
)
HAIKU = (
    "judgebench/outputs/dataset=judgebench,response_model=claude-3-5-sonnet-20240620,"
    "judge_name=arena_hard,judge_model=claude-3-haiku-20240307.jsonl"
)

# name: (title, what it measures, arguments of `python`); a `{shared}` is ../shared/data.
SECTIONS: dict[str, tuple[str, str, str]] = {
    "demo": (
        "The demo's runs",
        "`pcf demo` on a new SQLite file: the four simulated runs of the demo dataset "
        "(simulated judges: they show the phenomenon, not the method's accuracy).",
        "-m pcf demo",
    ),
    "replay-o1-mini": (
        "Recorded judge: o1-mini on JudgeBench",
        "JudgeBench's official score and the swap-disagreement triage of the recorded calls.",
        "-m pcf replay judgebench {shared}/" + O1_MINI + " --triage",
    ),
    "replay-haiku": (
        "Recorded judge: claude-3-haiku on JudgeBench",
        "As above, for claude-3-haiku.",
        "-m pcf replay judgebench {shared}/" + HAIKU + " --triage",
    ),
    "replay-llmbar-gpt4": (
        "Recorded judge: LLMBar, GPT-4, Vanilla",
        "LLMBar's recorded GPT-4 verdicts in both orders, with the triage.",
        "-m pcf replay llmbar {shared}/llmbar/Dataset/LLMBar --judge GPT-4 --strategy Vanilla "
        "--triage",
    ),
    "replay-llmbar-chatgpt": (
        "Recorded judge: LLMBar, ChatGPT, Vanilla",
        "As above, for ChatGPT.",
        "-m pcf replay llmbar {shared}/llmbar/Dataset/LLMBar --judge ChatGPT --strategy Vanilla "
        "--triage",
    ),
    "adaptive_budget": (
        "Adaptive budgets",
        "Calls per item and winners kept by each stopping policy: the simulated judge over "
        "its seeds 0-4 on the demo and RewardBench 2, then the recorded judges made to break "
        "`confident` (300 items per family). A simulation: the saving and the promise kept.",
        "-m benchmarks.adaptive_budget --seeds 5",
    ),
    "adaptive_overlap": (
        "Adaptive labelling overlap",
        "Labels asked and gold obtained with two simulated annotators of 80% accuracy, fixed "
        "against adaptive overlap, over 5 seeds (a simulation).",
        "-m benchmarks.adaptive_overlap --seeds 5",
    ),
    "guarantees": (
        "Guarantees calibrated on data",
        "Calibrated `confident` stopping on six judge families made to break its score model "
        "(Cauchy score noise, random answers on a fifth of the calls, slot outliers, execution "
        "shifts, integer ties, stated risk against the truth; 200 items each): the realized "
        "change rate on the items outside the calibration sample, and the share of draws where "
        "it exceeds R (the finite-set promise: at most delta), with its standard error; and "
        "`pcf escalate` on the demo and "
        "RewardBench 2 simulated runs, each over 200 random calibration samples, delta 0.1 "
        "(simulations: whether the promises hold, not how a real judge behaves).",
        "-m benchmarks.guarantees --cases 200 --splits 200",
    ),
    "cli_startup": (
        "CLI start-up",
        "`pcf --help` and `pcf validate` as fresh processes (targets 0.5 s and 1.0 s).",
        "-m benchmarks.cli_startup",
    ),
    "consensus_throughput": (
        "Consensus throughput",
        "Decisions with flags for 100,000 random items, K=7, n=4 (target 200,000 items/s).",
        "-m benchmarks.consensus_throughput",
    ),
    "store_throughput": (
        "Store throughput",
        "Importing 10,000 items, and reading 70,000 stored calls back as judgments.",
        "-m benchmarks.store_throughput",
    ),
    "storage": (
        "Storage",
        "Database bytes per stored call: `pcf demo`, and a simulated PCF K=3 run of 2,000 "
        "synthetic items of 4 candidates of realistic length (target 2 KB per call).",
        "-m benchmarks.storage",
    ),
    "runner_throughput": (
        "Runner throughput",
        "300 items x 7 calls through the real OpenAI SDK against a local server answering "
        "after 200 ms, at concurrency 64 (target efficiency 0.9).",
        "-m benchmarks.runner_throughput",
    ),
    "parse_hostile": (
        "Hostile answers",
        "Brace bombs and other shapes through the answer parser, up to its cap.",
        "-m benchmarks.parse_hostile",
    ),
    "markdown_hostile": (
        "Hostile Markdown",
        "Single lines of hostile shapes made inert, at 20,000 to 1,000,000 characters.",
        "-m benchmarks.markdown_hostile",
    ),
    "app_latency": (
        "App latency",
        "Every page's cold load in headless Chromium (median of 3) beside a bare one-line "
        "Streamlit page's (the floor), on the demo and on 10,000 items, and the server time of "
        "a Review render and an adjudication save (targets 2 s, 3 s, 0.3 s, 0.05 s).",
        "-m benchmarks.app_latency",
    ),
}


class SectionError(Exception):
    """A section's command exited with an error."""


SECTION_MARK = re.compile(r"<!-- section (\S+) -->\n(.*?)(?=<!-- section |\Z)", re.DOTALL)


def last_json(stdout: str) -> object:
    """The JSON object on the last line of a benchmark's output, or a whole JSON document."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return json.loads(stdout.strip().splitlines()[-1])


def split(value: object, prefix: str = "") -> tuple[list, list]:
    """A JSON value as ``(dotted key, leaf)`` pairs, and its lists of records (``(dotted key,
    [dict, ...])``) apart, each to print as a table of its own."""
    if isinstance(value, dict):
        leaves, records = [], []
        for key, item in value.items():
            more_leaves, more_records = split(item, f"{prefix}{key}.")
            leaves += more_leaves
            records += more_records
        return leaves, records
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [], [(prefix.rstrip("."), value)]
    return [(prefix.rstrip("."), value)], []


def record_table(key: str, records: list[dict]) -> list[str]:
    """One list of records as a Markdown table, a column per field."""
    columns = list(dict.fromkeys(field for record in records for field in record))
    lines = [f"`{key}`:", "", "| " + " | ".join(columns) + " |"]
    lines.append("| " + " | ".join("---" for _ in columns) + " |")
    lines += ["| " + " | ".join(shown(r.get(c, "")) for c in columns) + " |" for r in records]
    return [*lines, ""]


def shown(value: object) -> str:
    """A figure as the page prints it: floats to 4 significant digits, shared data by its
    relative path."""
    if isinstance(value, float):
        return f"{value:.4g}"
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text.replace(str(SHARED), "../shared/data").replace("|", "\\|")


def demo_table(figures: dict) -> list[str]:
    """The demo's runs as one table (the full JSON is long)."""
    lines = [
        "| run | judge | items | calls | direct % | PCF % | improved | regressed | McNemar p |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in figures["runs"]:
        acc = run.get("accuracy") or {}
        cells = [run["run"], run["model"], run["items"], run["attempts"] + run["cache_hits"]]
        if acc:
            cells += [
                f"{100 * acc['direct_accuracy']:.1f}",
                f"{100 * acc['method_accuracy']:.1f}",
                acc["improved"],
                acc["regressed"],
                f"{acc['mcnemar_p']:.3g}",
            ]
        else:
            cells += ["", "", "", "", ""]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def run_section(name: str) -> str:
    """Run one section's command and return its Markdown."""
    title, what, args = SECTIONS[name]
    argv = shlex.split(args.replace("{shared}", str(SHARED)))
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        env["PCF_DATABASE_URL"] = f"sqlite:///{folder}/pcf.db"
        done = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise SectionError(f"{name} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    figures = last_json(done.stdout)
    shown_command = f"python {args}".replace("{shared}", "../shared/data")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [f"<!-- section {name} -->", f"## {title}", "", what, "", "```bash"]
    lines += [
        shown_command,
        "```",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average {load} after the run.",
        "",
    ]
    if name == "demo":
        lines += demo_table(figures)
    else:
        leaves, records = split(figures)
        if leaves:
            lines += ["| figure | value |", "| --- | --- |"]
            lines += [f"| `{key}` | {shown(value)} |" for key, value in leaves]
            lines.append("")
        for key, rows in records:
            lines += record_table(key, rows)
    return "\n".join(lines) + "\n\n"


def header() -> str:
    """The page's title and the machine the figures were measured on."""
    return (
        "# Figures\n\n"
        "<!-- Generated by docs/figures.py (`make figures`); do not edit by hand. -->\n\n"
        "Every figure below was printed by the command above it, run by `docs/figures.py`; "
        "the speed figures depend on the machine and how busy it was. Simulated judges and "
        "annotators show what the tool does, never the method's accuracy on a real judge.\n\n"
        f"Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}.\n\n"
    )


def main() -> None:
    """Write the page: every section, or with ``--only NAME...`` those, keeping the rest.

    The page is written again after each section, so a section that fails loses no other
    one; the script then exits 1 naming it.
    """
    only = sys.argv[sys.argv.index("--only") + 1 :] if "--only" in sys.argv else list(SECTIONS)
    if unknown := [n for n in only if n not in SECTIONS]:
        raise SystemExit(f"unknown section {unknown[0]}; choose from {', '.join(SECTIONS)}")
    old = dict(SECTION_MARK.findall(PAGE.read_text(encoding="utf-8"))) if PAGE.exists() else {}
    sections = {name: f"<!-- section {name} -->\n{text}" for name, text in old.items()}
    failed = []
    for name in only:
        print(f"running {name}...", file=sys.stderr, flush=True)
        try:
            sections[name] = run_section(name)
        except SectionError as exc:
            print(exc, file=sys.stderr)
            failed.append(name)
        ordered = [sections[n] for n in SECTIONS if n in sections]
        PAGE.write_text(header() + "".join(ordered).rstrip() + "\n", encoding="utf-8")
    print(f"wrote {PAGE}", file=sys.stderr)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)} (the page keeps their previous figures)")


if __name__ == "__main__":
    main()
