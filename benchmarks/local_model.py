"""A small local model behind an OpenAI-compatible server (llama.cpp's ``llama-server``, Ollama):
parse rate, seconds per call and flags on 20 RewardBench 2 items, with and without structured
output. Opt-in, never in CI: it needs a running server, which it never starts.

Each variant is one ``pcf judge`` process (PCF, K=2, concurrency 1 unless told: a llama.cpp
server answers one request at a time by default) on a database of its own in a temporary folder,
so no answer of one variant is reused by the other; ``--together`` runs both at once (each
call's time then includes sharing the server with the other variant). The first variant asks
for the answer's JSON schema (the default); the second passes ``--no-structured-output``
(``--without`` names another flag, for a ``pcf`` whose option is spelled otherwise). Printed
per variant: calls, answers that parsed (after pcf's parse retry), the share that parsed, the
attempts they took, failures by reason, the median seconds per answered call (the stored
latency: at concurrency 1, a call's time at the server) and the items raising each flag; the
last line is the figures as JSON.

    llama-server -m SmolLM2-135M-Instruct-Q8_0.gguf --port 8080 &
    python benchmarks/local_model.py --base-url http://127.0.0.1:8080/v1 --model smollm2-135m
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from pcf.store import Call, get_engine

RB2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "rewardbench2"
ITEMS_FILE = RB2 / "factuality-first120.jsonl"
WITHOUT_FLAG = "--no-structured-output"
"""The ``pcf judge`` option that turns structured output off."""


def pcf(*args: str, database: str) -> subprocess.CompletedProcess[str]:
    """``pcf ARGS`` on ``database``, its output captured."""
    env = os.environ | {"PCF_DATABASE_URL": database}
    command = [sys.executable, "-m", "pcf", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def variant(name: str, extra: list[str], options: argparse.Namespace, folder: Path) -> dict:
    """One ``pcf judge`` of the items on a fresh database; its figures."""
    database = f"sqlite:///{folder / f'{name}.db'}"
    imported = pcf(
        "import", "rewardbench2", str(options.items_file), "--name", "rb2", database=database
    )
    if imported.returncode != 0:
        raise SystemExit(f"import failed: {imported.stderr.strip()}")
    command = [
        *("judge", "rb2", "--name", name, "--protocol", "pcf", "--k", str(options.k)),
        *("--model", f"openai-compatible/{options.model}", "--base-url", options.base_url),
        *("--limit", str(options.limit), "--concurrency", str(options.concurrency)),
        *("--timeout", str(options.timeout), *extra),
    ]
    judged = pcf(*command, database=database)
    try:
        summary = json.loads(judged.stdout)
    except ValueError:
        raise SystemExit(f"{name}: pcf judge printed no summary: {judged.stderr.strip()}") from None
    done = summary["this_invocation"]
    engine = get_engine(database)
    with Session(engine) as session:  # the calls made (all of them, unless interrupted)
        answers = session.exec(select(Call.ok, Call.latency_s)).all()
    engine.dispose()
    calls, parsed = len(answers), sum(ok for ok, _ in answers)
    latencies = [latency for _, latency in answers if latency > 0]  # the server's time
    return {
        "variant": name,
        "options": extra,
        "calls": calls,
        "attempts": done["attempts"],
        "parsed": parsed,
        "parse_rate": parsed / calls if calls else None,
        "errors": done["errors"],
        "seconds_per_call": statistics.median(latencies) if latencies else None,
        "items": summary["items"],
        "flagged": summary["flagged"],
        "judge": summary["judge"],
    }


def show(figures: dict[str, Any]) -> None:
    rate, seconds = figures["parse_rate"], figures["seconds_per_call"]
    print(f"{figures['variant']} ({' '.join(figures['options']) or 'defaults'}):")
    print(
        f"  {figures['parsed']} of {figures['calls']} calls parsed "
        f"({'n/a' if rate is None else f'{100 * rate:.0f}%'}) in {figures['attempts']} attempts "
        "(a parse retry or a transport retry is an attempt), "
        f"{'n/a' if seconds is None else f'{seconds:.1f}'} s per answered call (median)"
    )
    print(f"  failures by reason: {figures['errors'] or 'none'}")
    flags = {flag: n for flag, n in figures["flagged"].items() if n}
    print(f"  items flagged (of {figures['items']}): {flags or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base-url", required=True, help="The server, e.g. http://127.0.0.1:8080/v1"
    )
    parser.add_argument("--model", default="local", help="The model name the server expects.")
    parser.add_argument("--limit", type=int, default=20, help="RewardBench 2 items judged.")
    parser.add_argument("--k", type=int, default=2, help="Orderings per item.")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds per answer.")
    parser.add_argument("--items-file", type=Path, default=ITEMS_FILE)
    parser.add_argument(
        "--together",
        action="store_true",
        help="Judge both variants at once (for a server with two slots, --parallel 2).",
    )
    parser.add_argument(
        "--without",
        default=WITHOUT_FLAG,
        help=f"The pcf judge option that turns structured output off ({WITHOUT_FLAG}).",
    )
    options = parser.parse_args()
    if not options.items_file.exists():
        raise SystemExit(f"{options.items_file}: no such file (../shared/data/rewardbench2)")
    variants = [("structured", []), ("unstructured", [options.without])]
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(1 + options.together) as pool:
        results = list(pool.map(lambda v: variant(*v, options, Path(folder)), variants))
    print(f"{results[0]['judge']}, {options.limit} RewardBench 2 items, K={options.k}")
    for figures in results:
        show(figures)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
