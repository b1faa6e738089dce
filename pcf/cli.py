"""The `pcf` command line: a thin layer over the library.

Each command imports what it uses when it runs (pandas, scipy, the SDKs and the database are
slow to import), so that `pcf --help` and light commands start at once; see
``benchmarks/cli_startup.py``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TextIO

import typer

from pcf.access import operator
from pcf.choices import ITEM_FORMATS, RULES, SCHEDULES, SIMULATED_MODEL
from pcf.errors import DataError
from pcf.judges import BACKENDS, PROVIDERS, parse_model
from pcf.runs.spec import PROTOCOLS, RunSpec
from pcf.weights import DEFAULT_WEIGHTS, PRESETS, Weights, named_weights

# Arrow's own allocator keeps what a large run's stored results freed (~10% of a command's peak
# memory: 371 -> 335 MB on 60,000 items); read when pyarrow loads, so set before any command runs.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlmodel import Session

    from pcf.items import Item
    from pcf.runs.estimate import ReopenEstimate
    from pcf.runs.rows import Progress, RunReport
    from pcf.store import Run

DatasetArgument = Annotated[str, typer.Argument(metavar="DATASET", help="An imported dataset.")]
BackendOption = Annotated[
    str | None,
    typer.Option(help=f"One of: {', '.join(BACKENDS)}; then --model is the model's own name."),
]
ModelOption = Annotated[
    str,
    typer.Option(
        help=f"provider/name, the provider one of: {', '.join(PROVIDERS)} (openai/gpt-4o-mini, "
        "google/gemini-2.5-flash, azure/DEPLOYMENT, ollama/llama3.1); a name without a "
        "provider is the simulated judge's."
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        help="The model's server: OpenAI-compatible (vLLM, Ollama, ...), an Azure OpenAI "
        "endpoint, or a provider's proxy."
    ),
]
ConcurrencyOption = Annotated[int, typer.Option(help="Calls in flight at once.")]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Seconds to wait for each answer (default: PCF_TIMEOUT, else 60). A self-hosted "
        "server's timed-out call is not sent again (docs/local-model.md).",
    ),
]
LimitOption = Annotated[int | None, typer.Option(help="Judge the first N items only.")]
RunSeedOption = Annotated[
    int, typer.Option(help="Run seed: random schedules, simulated noise (not canonical orders).")
]
TemperatureOption = Annotated[float, typer.Option(help="Sampling temperature.")]
ReplayOption = Annotated[Path | None, typer.Option(help="judgments.jsonl for the replay backend.")]
ReplayReportOption = Annotated[
    Path | None,
    typer.Option("--report", help="Also write report.md, report.html and report.json here."),
]
ReplayTriageOption = Annotated[
    bool, typer.Option("--triage", help="Also the error-capture curves of review orders.")
]
AbstentionsOption = Annotated[
    str,
    typer.Option(
        help="With --triage, a single call's tie or no verdict: apart (counted, left out of "
        "the curves) or errors (errors in the curves, reviewed first)."
    ),
]
BatchOption = Annotated[
    bool,
    typer.Option(
        "--batch",
        help="Send the calls as provider batches at half price and return; "
        "`pcf batch collect` stores the answers.",
    ),
]
StructuredOption = Annotated[
    bool,
    typer.Option(
        "--structured-output/--no-structured-output",
        help="Ask the server for the answer's JSON schema (OpenAI's response_format, "
        "Anthropic's output format, Gemini's response schema); turn it off for a server that "
        "rejects one.",
    ),
]
BatchSizeOption = Annotated[
    int | None,
    typer.Option(help="--batch: most requests per batch (default: the provider's limit)."),
]
RiskOption = Annotated[
    float, typer.Option(help="confident: accepted chance that the full run differs.")
]


def _cost_cap(value: float | None) -> float | None:
    """``--max-cost``, refused unless a finite number >= 0."""
    if value is None:
        return None
    from pcf.runs.manage import CAP_RULE, is_cost_cap

    if not is_cost_cap(value):
        raise typer.BadParameter(f"{value}: {CAP_RULE}")
    return value


MaxCostOption = Annotated[
    float | None,
    typer.Option(
        callback=_cost_cap,
        help="Cost cap of each run in USD (default: PCF_MAX_COST_USD): a run estimated above "
        "it is refused, a request whose upper-bound price would pass it is not sent (the run "
        "stops 'capped' with its calls stored), and --batch sends nothing over it.",
    ),
]

app = typer.Typer(
    help="PCF Review: permutation-consensus factuality judging.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def group(name: str, help_text: str) -> typer.Typer:
    """The command group ``pcf NAME``."""
    commands = typer.Typer(help=help_text, no_args_is_help=True)
    app.add_typer(commands, name=name)
    return commands


replay_app = group("replay", "Score recorded pairwise judge outputs (both orders).")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error to stderr and stop with ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code)


def check_prices() -> None:
    """Stop with a one-line error, before the heavy imports, when ``PCF_PRICES`` is unusable."""
    from pcf.prices import price_table

    with refusing():
        price_table()


def check_out_folder(out: Path, option: str = "--out") -> None:
    """Stop with a one-line error when ``out`` is a file where a folder (made if missing) goes."""
    if out.exists() and not out.is_dir():
        fail(f"error: {option} {out} is a file; give a folder (it is made if missing)", 2)


@contextmanager
def refusing(prefix: str = "error: ", code: int = 2) -> Iterator[None]:
    """Stop with ``prefix`` and the message of a ValueError (a DataError too) in one line."""
    try:
        yield
    except ValueError as exc:
        fail(f"{prefix}{exc}", code)


@contextmanager
def writing(out: Path) -> Iterator[None]:
    """Stop with a one-line error when writing ``out`` fails (no permission, disk full...)."""
    try:
        yield
    except OSError as exc:
        fail(f"error: cannot write {out}: {exc.strerror or exc}")


def json_text(obj: object, *, indent: int | None = None) -> str:
    """``obj`` as valid JSON: a NaN or infinite number (an undefined figure) becomes null."""
    return json.dumps(finite(obj), ensure_ascii=False, indent=indent, allow_nan=False)


def finite(obj: Any) -> Any:
    """``obj`` with every float that is NaN or infinite, at any depth, replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(value) for value in obj]
    return obj


def emit(obj: object) -> None:
    """Print one JSON object on stdout."""
    typer.echo(json_text(obj, indent=2))


@app.command()
def aggregate(
    judgments: Annotated[Path, typer.Argument(help="judgments.jsonl (METHOD.md interchange).")],
    items: Annotated[
        Path | None, typer.Option(help="items.jsonl: its listing order breaks exact ties.")
    ] = None,
    preset: Annotated[str | None, typer.Option(help=f"One of: {', '.join(PRESETS)}.")] = None,
    weights: Annotated[str | None, typer.Option(help="Four weights ws,wB,wv,wu.")] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Keep the first K calls per execution.")
    ] = None,
    executions: Annotated[
        int | None, typer.Option(help="Keep each item's first N executions.")
    ] = None,
    rule: Annotated[
        str, typer.Option(help=f"One of: {', '.join(RULES)} (Kemeny: exact up to 6 candidates).")
    ] = "eq5",
) -> None:
    """Aggregate judgments into one decisions.jsonl line per item, on stdout.

    A line marked ok whose scores or ranking are unusable counts as a failed call (its reason
    is printed); beyond 6 candidates Kemeny is a local search, marked in each record.

    Example: pcf aggregate judgments.jsonl --items items.jsonl --preset uniform --k 3
    """
    from pcf.decisions import aggregate_file

    if preset and weights:
        fail("error: give --preset or --weights, not both", 2)
    if preset and preset not in PRESETS:
        fail(f"error: unknown preset {preset!r}; choose one of {', '.join(PRESETS)}", 2)
    with refusing("error: --weights: "):
        chosen = Weights.parse(weights) if weights else PRESETS[preset or "proposed"]
    if k is not None and k < 1:
        fail("error: --k must be at least 1", 2)
    if rule not in RULES:
        fail(f"error: unknown rule {rule!r}; choose one of {', '.join(RULES)}", 2)
    try:
        with aggregate_file(
            judgments, items=items, weights=chosen, k=k, executions=executions, rule=rule
        ) as (notes, decisions):
            for note in notes:
                typer.echo(f"note: read as a failed call: {note}", err=True)
            shutil.copyfileobj(decisions, sys.stdout)
    except ValueError as exc:
        fail(str(exc) if isinstance(exc, DataError) else f"error: {exc}")


@app.command()
def validate(
    fmt: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"One of: {', '.join(ITEM_FORMATS)}; auto, the one the file's columns fit.",
        ),
    ],
    path: Annotated[Path, typer.Argument(help="The dataset file.")],
    subset: Annotated[
        str | None, typer.Option(help="RewardBench 2 subset or bucket to keep.")
    ] = None,
) -> None:
    """Check a dataset file: print counts, or every error with file, line and field.

    Example: pcf validate auto factuality.jsonl --subset Factuality
    """
    from pcf.items import stream_any

    if fmt not in (*ITEM_FORMATS, "auto"):
        fail(f"error: unknown format {fmt!r}; choose one of {', '.join(ITEM_FORMATS)}, auto", 2)
    sizes: Counter[int] = Counter()
    buckets: Counter[str] = Counter()
    with_gold = 0
    try:
        items, fmt = stream_any(None if fmt == "auto" else fmt, path, subset=subset)
        for item in items:  # counted as read: a large file is never held whole
            sizes[len(item.candidates)] += 1
            buckets.update([item.bucket] if item.bucket else [])
            with_gold += item.gold is not None
    except DataError as exc:
        notes = "".join(f"\n{note}" for note in getattr(exc, "__notes__", ()))
        problems = "\n".join(map(str, exc.problems))
        fail(f"{len(exc.problems)} problem(s) in {path}:\n{problems}{notes}")
    except ValueError as exc:
        fail(f"error: {exc}")
    emit(
        {
            "file": str(path),
            "format": fmt,
            "items": sizes.total(),
            "candidates_per_item": dict(sorted(sizes.items())),
            "with_gold": with_gold,
            "buckets": dict(buckets),
        }
    )


@replay_app.command("judgebench")
def replay_judgebench(
    path: Annotated[Path, typer.Argument(help="A JudgeBench outputs file (both orders).")],
    report: ReplayReportOption = None,
    triage: ReplayTriageOption = False,
    abstentions: AbstentionsOption = "apart",
) -> None:
    """Score a JudgeBench judge's recorded decisions by the official rule, per bucket.

    Example: pcf replay judgebench "outputs/judge_model=o1-mini-2024-09-12.jsonl" --triage
    """
    from pcf.connectors.recordings import read_judgebench_outputs

    with refusing("", 1):
        pairs = read_judgebench_outputs(path)
        emit_replay({"file": str(path)}, pairs, triage, abstentions)
    if report is not None:
        from pcf.reports.document import judgebench_source

        source = judgebench_source(path)
        title = f"Replay: JudgeBench, judge {source.get('judge_model', path.stem)}"
        write_replay_report(pairs, report, title=title, source=source)


@replay_app.command("llmbar")
def replay_llmbar(
    path: Annotated[Path, typer.Argument(help="An LLMBar result.json, or a folder of them.")],
    judge: Annotated[str | None, typer.Option(help="Evaluator folder, e.g. GPT-4.")] = None,
    strategy: Annotated[str | None, typer.Option(help="Prompt folder, e.g. Vanilla.")] = None,
    report: ReplayReportOption = None,
    triage: ReplayTriageOption = False,
    abstentions: AbstentionsOption = "apart",
) -> None:
    """Score an LLMBar judge's recorded decisions in both orders, per subset.

    Example: pcf replay llmbar Dataset/LLMBar --judge GPT-4 --strategy Vanilla --report out/
    """
    from pcf.connectors.recordings import read_llmbar_results

    with refusing("", 1):
        pairs = read_llmbar_results(path, judge=judge, strategy=strategy)
        emit_replay({"path": str(path)}, pairs, triage, abstentions)
    if report is not None:
        source = {"path": str(path), "judge": judge or "any", "strategy": strategy or "any"}
        title = f"Replay: LLMBar {path.name}, judge {judge or 'any'}"
        write_replay_report(pairs, report, title=title, source=source)


def emit_replay(source: dict[str, str], pairs: list, triage: bool, abstentions: str) -> None:
    """Print the figures of recorded pairs; with ``triage``, whether swaps find their errors."""
    from pcf.connectors.recordings import replay_summary

    figures = source | replay_summary(pairs)
    if triage:
        from pcf.analysis.triage import pair_triage

        figures["triage"] = pair_triage(pairs, abstentions=abstentions)
    emit(figures)


def write_replay_report(pairs: list, out: Path, *, title: str, source: dict[str, str]) -> None:
    """Write the pairwise report of recorded pairs into ``out``."""
    from pcf.reports.collect import pair_frame
    from pcf.reports.document import replay_report
    from pcf.reports.render import write_report

    check_out_folder(out, "--report")
    with writing(out):
        written = write_report(replay_report(pair_frame(pairs), title=title, source=source), out)
    typer.echo(f"wrote {written['markdown']}, {written['html']} and {written['json']}", err=True)


def stderr_progress(name: str, spec: RunSpec | None = None) -> Progress:
    """Progress of run ``name`` on stderr: one line redrawn on a terminal, else now and then;
    its cost ``unpriced`` when ``spec``'s model has no price."""
    from pcf.prices import cost_text, has_price

    priced = spec is None or spec.backend == "simulated" or has_price(spec.model)
    interval = 0.2 if sys.stderr.isatty() else 5.0  # not a terminal: a log, CI
    last = -interval

    def show(report: RunReport) -> None:
        nonlocal last
        finished = report.done >= report.to_do
        if not finished and time.monotonic() - last < interval:
            return
        last = time.monotonic()
        line = (
            f"judging {name}: {report.done}/{report.to_do} calls, {report.cache_hits} cache "
            f"hits, {report.failures} failed, " + cost_text(report.cost_usd if priced else None)
        )
        redraw(line, end="\n" if finished else "")

    return show


def redraw(line: str, end: str = "") -> None:
    """Redraw ``line`` (then ``end``) on a terminal's stderr, else print it as a line."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{line}\033[K{end}")
        sys.stderr.flush()
    else:
        typer.echo(line, err=True)


def say(line: str) -> None:
    """Print ``line`` on stderr, on a line of its own."""
    typer.echo(f"\n{line}" if sys.stderr.isatty() else line, err=True)


def check_runs(runs: list[tuple[str, RunReport]]) -> None:
    """Exit with 1 and a line per run stopped at its cost cap, else per run mostly failed; an
    interrupted run exits with 128 + the signal's number (130 for Ctrl-C)."""
    for name, r in runs:
        if r.interrupted:
            fail(
                f"error: run {name}: interrupted; {r.done} answers stored: run the same command "
                "to resume",
                128 + r.interrupted,
            )
    fail_lines(
        f"run {name}: stopped at its cost cap (${r.cost_usd:.4f} spent now); {r.capped} calls "
        "not made: raise --max-cost and run the same command to resume"
        for name, r in runs
        if r.capped
    )
    fail_lines(f"run {name}: {r.failure_cause()}" for name, r in runs if r.mostly_failed)


def fail_lines(lines: Iterable[str]) -> None:
    """Exit with 1 and each of ``lines`` as an error line, when there are any."""
    if lines := list(lines):
        fail("error: " + "\nerror: ".join(lines))


@contextmanager
def batch_errors() -> Iterator[None]:
    """Stop with one line: exit 1 when the batch API refused, 2 on a ValueError."""
    from pcf.judges.batch_api import BatchAPIError

    try:
        with refusing():
            yield
    except BatchAPIError as exc:
        fail(f"error: the batch API refused: {exc}")


@contextmanager
def database() -> Iterator[Session]:
    """A session on the database of ``PCF_DATABASE_URL``, errors as :func:`storage_errors`."""
    from pcf.store import get_engine, session_scope

    with storage_errors(), session_scope(get_engine()) as session:
        yield session


@contextmanager
def storage_errors() -> Iterator[None]:
    """Stop with one line (exit 1) on a database this code cannot use, or not as it is."""
    from pcf.store import SchemaError, database_url, storage_problem

    try:
        yield
    except Exception as exc:
        problem = exc if isinstance(exc, SchemaError) else storage_problem(exc, database_url())
        if problem is None:
            raise
        fail(f"error: {problem}")


def existing(kind: Literal["run", "dataset"], name: str, *, session: Session) -> Any:
    """The run or dataset ``name``; without one, stop with the line that says where they are
    listed."""
    from pcf.store import get_dataset, get_run

    found = (get_run if kind == "run" else get_dataset)(name, session=session)
    if found is None:
        fail(f"error: no {kind} {name!r}; `pcf runs` lists them", 2)
    return found


def summary(run: Run, report: RunReport, *, session: Session) -> dict:
    """The run's summary and this command's report, after storing what the app's pages read."""
    from pcf.analysis.precompute import keep_results
    from pcf.analysis.results import run_summary

    keep_results(run, session=session)
    return run_summary(run, session=session) | {"this_invocation": report.as_dict()}


@app.command("import")
def import_dataset(
    fmt: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"One of: {', '.join(ITEM_FORMATS)}; auto, the one the file's columns fit; hf, a "
            "Hugging Face dataset; or inspect, an eval log of the inspect_ai task pcf/judge (its "
            "items as a dataset, its answers as a run).",
        ),
    ],
    path: Annotated[
        Path,
        typer.Argument(
            help="The dataset file; with hf a hub id, a local folder or a Parquet, JSON, JSON "
            "Lines or CSV file; the eval log."
        ),
    ],
    name: Annotated[
        str | None, typer.Option(help="Dataset name (default: file name; a log's dataset).")
    ] = None,
    subset: Annotated[str | None, typer.Option(help="Subset or bucket to keep.")] = None,
    limit: Annotated[int | None, typer.Option(help="Keep the first N items.")] = None,
    seed: Annotated[
        int, typer.Option(help="Dataset seed: the canonical orders every run of it shares.")
    ] = 0,
    config: Annotated[str | None, typer.Option(help="hf: the dataset's configuration.")] = None,
    split: Annotated[
        str | None, typer.Option(help="hf: the split to read (needed if it has several).")
    ] = None,
    revision: Annotated[str | None, typer.Option(help="hf: a hub branch, tag or commit.")] = None,
    column_map: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            metavar="FIELD=COLUMN",
            help="hf: read a layout's FIELD (e.g. prompt, item_id) from COLUMN; repeatable.",
        ),
    ] = None,
) -> None:
    """Import a dataset into the database, all or nothing.

    With auto and hf, the format is the one whose fields the columns hold (RewardBench 2's,
    JudgeBench's, items.jsonl's or, for a CSV file, a row per candidate), and it is named;
    when none fits or several do, they are named with what each lacks. --map names the columns
    of another layout for hf, which needs the hf extra.

    Example: pcf import auto factuality.jsonl --name rb2-fact --subset Factuality
    """
    from pcf.connectors.hf_datasets import load_hf
    from pcf.items import read_as, stream_any
    from pcf.runs.manage import import_dataset
    from pcf.store import database_url

    if fmt not in (*ITEM_FORMATS, "auto", "hf", "inspect"):
        known = ", ".join((*ITEM_FORMATS, "auto", "hf", "inspect"))
        fail(f"error: unknown format {fmt!r}; choose one of {known}", 2)
    if fmt != "hf" and (config or split or revision or column_map):
        fail("error: --config, --split, --revision and --map are for hf", 2)
    pairs = [entry.partition("=") for entry in column_map or ()]
    if any(not field or not column for field, _, column in pairs):
        fail("error: --map takes FIELD=COLUMN, e.g. --map prompt=question", 2)
    try:
        if fmt == "inspect":
            if subset or limit is not None or seed:
                fail("error: --subset, --limit and --seed are the log's own: leave them out", 2)
            import_inspect(path, name)
            return
        recognised = fmt in ("auto", "hf")
        if fmt == "hf":
            columns = {field: column for field, _, column in pairs}
            hub = {"config": config, "split": split, "revision": revision, "subset": subset}
            loaded, fmt = load_hf(str(path), columns=columns, **hub)
            items: Iterator[Item] = iter(loaded[:limit])
        else:  # read a row at a time, stored a chunk at a time: never held whole
            items, fmt = stream_any(None if recognised else fmt, path, subset=subset, limit=limit)
        if recognised:
            print(f"{path}: {read_as(fmt, recognised=True)}", file=sys.stderr)
        first = next(items, None)
        if first is None:
            fail(f"error: {path} has no items{' in subset ' + subset if subset else ''}")
        items = itertools.chain([first], items)
        with database() as session:
            dataset = import_dataset(
                items,
                session=session,
                actor=operator(),
                name=name or path.stem,
                fmt=fmt,
                source_path=path,
                seed=seed,
            )
            emit(
                {
                    "dataset": dataset.name,
                    "items": dataset.n_items,
                    "format": dataset.format,
                    "database": database_url(),
                }
            )
    except DataError as exc:
        notes = "".join(f"\n{note}" for note in getattr(exc, "__notes__", ()))
        fail(f"nothing imported: {len(exc.problems)} problem(s):\n{exc}{notes}")
    except ValueError as exc:
        fail(f"nothing imported: {exc}")


def import_inspect(path: Path, name: str | None) -> None:
    """``pcf import inspect LOG``: store the log's items and answers, print the run's summary."""
    try:
        from pcf.connectors.inspect_log import import_inspect_log
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "inspect_ai":
            raise
        fail("error: reading an inspect log needs inspect_ai: pip install 'pcf-review[inspect]'")
    with database() as session:
        run, report = import_inspect_log(
            path, session=session, actor=operator(), name=name, progress=stderr_progress(path.name)
        )
        emit(summary(run, report, session=session))


@app.command()
def judge(
    dataset_name: DatasetArgument,
    protocol: Annotated[str, typer.Option(help=f"One of: {', '.join(PROTOCOLS)}.")] = "pcf",
    backend: BackendOption = None,
    model: ModelOption = SIMULATED_MODEL,
    base_url: BaseUrlOption = None,
    k: Annotated[int, typer.Option("--k", help="Orderings per item and execution.")] = 7,
    schedule_name: Annotated[
        str, typer.Option("--schedule", help=f"One of: {', '.join(SCHEDULES)}.")
    ] = "balanced",
    executions: Annotated[int, typer.Option(help="Independent executions.")] = 1,
    concurrency: ConcurrencyOption = 16,
    timeout: TimeoutOption = None,
    limit: LimitOption = None,
    seed: RunSeedOption = 0,
    temperature: TemperatureOption = 0.0,
    max_tokens: Annotated[int, typer.Option(help="Answer token limit.")] = 2048,
    replay: ReplayOption = None,
    name: Annotated[str | None, typer.Option(help="Run name; an existing run resumes.")] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Ask the run's failed calls again; each failed answer is kept for audit.",
        ),
    ] = False,
    adaptive: Annotated[
        str,
        typer.Option(help="Stop an item's calls once settled: off, certain or confident."),
    ] = "off",
    risk: RiskOption = 0.01,
    max_calls: Annotated[
        int | None, typer.Option(help="confident: most calls per item (may exceed the plan).")
    ] = None,
    stop_on: Annotated[
        str,
        typer.Option(
            help="Adaptive: the weights winners are settled on (a preset or ws,wB,wv,wu); "
            "the run is decided with them alone."
        ),
    ] = "proposed",
    recheck_stops: Annotated[
        bool,
        typer.Option(
            "--recheck-stops",
            help="Adaptive: ask today's stopping policy again about items an earlier version "
            "stopped (prints what it may cost first).",
        ),
    ] = False,
    structured_output: StructuredOption = True,
    batch: BatchOption = False,
    batch_size: BatchSizeOption = None,
    max_cost: MaxCostOption = None,
) -> None:
    """Judge a dataset: create a run, or resume the run of that name; prints a summary.

    Progress goes to stderr. Exits with 1 and the cause when most calls failed, and refuses a
    run that another live process is judging. With --batch (openai/, anthropic/) the calls go
    to the provider's batch API and the command returns; `pcf batch collect RUN` stores them.
    An adaptive run keeps the stops it recorded: judging it again makes no call for those
    items, whichever release stopped them, unless --recheck-stops.

    Example: pcf judge demo --protocol pcf --model openai/gpt-4o-mini --k 7
    """
    check_prices()
    from pcf.runs.estimate import reopen_estimate
    from pcf.runs.manage import judge_run

    with refusing():
        if recheck_stops and batch:
            fail("error: --recheck-stops works call by call, not with --batch", 2)
        if adaptive == "off" and named_weights(stop_on) != DEFAULT_WEIGHTS:
            fail("error: --stop-on names the weights an adaptive run stops on: add --adaptive", 2)
        spec = RunSpec(
            dataset_name,
            name,
            **parse_model(model, backend=backend, base_url=base_url)._asdict(),
            replay=replay,
            protocol=protocol,
            k=k,
            schedule=schedule_name,
            executions=executions,
            seed=seed,
            temperature=temperature,
            max_tokens=max_tokens,
            limit=limit,
            concurrency=concurrency,
            timeout_s=timeout,
            adaptive=adaptive,
            risk=risk,
            max_calls=max_calls,
            stop_on=named_weights(stop_on),
            structured_output=structured_output,
        )
        if batch:
            submit_batches(
                [spec], retry_failed=retry_failed, batch_size=batch_size, max_cost=max_cost
            )
            return
        with database() as session:
            reopening = reopen_estimate(spec, session=session)
            if recheck_stops and reopening:
                typer.echo(f"--recheck-stops: {reopen_line(reopening)}", err=True)
            run, report = judge_run(
                spec,
                session=session,
                actor=operator(),
                progress=stderr_progress(spec.run_name, spec),
                retry_failed=retry_failed,
                max_cost=max_cost,
                recheck_stops=recheck_stops,
                on_signal=say,
            )
            out = summary(run, report, session=session)
            if reopening and not recheck_stops:
                typer.echo(
                    f"kept the stops of run {run.name!r}; {reopen_line(reopening)}: pass "
                    "--recheck-stops to continue them",
                    err=True,
                )
                out["stopping"]["recheck"] = reopening.as_dict()
            emit(out)
    check_runs([(spec.run_name, report)])


def reopen_line(estimate: ReopenEstimate) -> str:
    """One line: which policy versions stopped a run's items, and what continuing them costs."""
    recorded, today = estimate.versions
    from pcf.prices import cost_text

    most = estimate.max_cost_usd
    cost = f", {cost_text(None)}" if most is None else f", at most {cost_text(most)}"
    return (
        f"{estimate.items} items were stopped by stopping policy version "
        f"{', '.join(map(str, recorded))}; today's version {today} would continue "
        f"{estimate.reopened} of them: {estimate.min_calls} to {estimate.max_calls} more "
        f"calls{cost}"
    )


def submit_batches(
    specs: list[RunSpec],
    *,
    retry_failed: bool = False,
    batch_size: int | None = None,
    max_cost: float | None = None,
) -> None:
    """Submit each run's calls as provider batches (none over its cost cap); print what."""
    from pcf.runs import batch
    from pcf.runs.batch_status import batch_overview

    out, lost = [], []
    with batch_errors(), database() as session:
        for spec in specs:
            run, report = batch.submit_batches(
                spec,
                session=session,
                actor=operator(),
                retry_failed=retry_failed,
                max_requests=batch_size,
                max_cost=max_cost,
            )
            out.append({"run": run.name, "status": run.status, **report.as_dict()})
            for row in batch_overview([run], session=session):
                lost += [lost_batch(run.name, batch_id) for batch_id in row["lost"]]
    for line in lost:
        typer.echo(f"note: {line}", err=True)
    names = " ".join(repr(item["run"]) for item in out)
    typer.echo(f"collect with: pcf batch collect {names} --wait", err=True)
    emit(out[0] if len(out) == 1 else {"runs": out})


@app.command()
def export(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A run name.")],
    what: Annotated[
        str, typer.Option(help="items, judgments, decisions or adjudications.")
    ] = "decisions",
    out: Annotated[
        Path | None, typer.Option(help="Output file (default: stdout); its folder is made.")
    ] = None,
) -> None:
    """Export a run's items, judgments, decisions or adjudications as JSON Lines.

    Example: pcf export demo-pcf --what judgments --out judgments.jsonl
    """
    from pcf.analysis.results import decision_chunks, judgment_chunks
    from pcf.files import replacing
    from pcf.store import DatasetItems, adjudication_records

    kinds = ("items", "judgments", "decisions", "adjudications")
    if what not in kinds:
        fail(f"error: --what must be one of {', '.join(kinds)}", 2)
    if out is not None and out.is_dir():
        fail(f"error: --out {out} is a folder; give a file name", 2)
    if out is not None and out.suffix.lower() in (".csv", ".parquet"):
        fail(f"error: pcf export writes JSON Lines; --out {out.name} names another format", 2)
    with database() as session:
        run = existing("run", run_name, session=session)
        chunks: Iterable[list[dict]]
        if what == "items":
            items = DatasetItems(run.dataset_id, session=session).chunks()
            chunks = ([item.to_dict() for item in chunk] for chunk in items)
        elif what == "judgments":
            chunks = judgment_chunks(run, session=session)
        elif what == "decisions":
            chunks = decision_chunks(run, session=session)
        else:
            chunks = [adjudication_records(run.dataset_id, session=session)]
        if out is None:
            write_lines(chunks, sys.stdout)
            return
        with writing(out):
            out.parent.mkdir(parents=True, exist_ok=True)
            with replacing(out) as file:
                count = write_lines(chunks, file)
    typer.echo(f"wrote {count} lines to {out}", err=True)


def write_lines(chunks: Iterable[list[dict]], file: TextIO) -> int:
    """Write records as JSON Lines, a chunk at a time; returns how many."""
    count = 0
    for records in chunks:
        file.write("".join(json_text(r) + "\n" for r in records))
        count += len(records)
    return count


runs_app = typer.Typer()
app.add_typer(runs_app, name="runs")


@runs_app.callback(invoke_without_command=True)
def runs(context: typer.Context) -> None:
    """List datasets and runs in the database, with their status, calls, failures and cost;
    `pcf runs delete RUN` deletes a run.

    A run whose process stopped before it finished (killed, crashed) is listed as
    `interrupted`; judging it again resumes it.

    Example: pcf runs
    """
    if context.invoked_subcommand is not None:
        return
    from pcf.analysis.results import run_listing_priced
    from pcf.judges import judge_label
    from pcf.prices import shown_cost
    from pcf.store import database_url, list_datasets

    def described(run: dict) -> dict:  # the server as the judge's label names it, not as given
        judge = judge_label(run["backend"], run["model"], run.pop("base_url"))
        attempts = run.pop("calls")
        return {"judge": judge, **run, "attempts": attempts}

    with database() as session:
        emit(
            {
                "database": database_url(),
                "datasets": [
                    {"name": d.name, "items": d.n_items, "format": d.format}
                    for d in list_datasets(session=session)
                ],
                "runs": [
                    described(run) | {"cost_usd": shown_cost(run["cost_usd"])}
                    for run in run_listing_priced(session=session)
                ],
            }
        )


batch_app = group("batch", "Provider batches of runs judged with --batch.")
RunsArgument = Annotated[list[str], typer.Argument(metavar="RUN...", help="Run names.")]


def lost_batch(run: str, batch_id: str) -> str:
    """One line on a batch the provider answers 404 for, and the way out."""
    return (
        f"run {run!r}: the provider answers 404 (not found) for batch {batch_id}; if it lost "
        f"the batch, `pcf batch forget {run!r}` makes its calls failed calls that "
        "`pcf judge ... --retry-failed` asks again"
    )


@batch_app.command("status")
def batch_status_command(runs: RunsArgument) -> None:
    """Show each run's batches: state, and the provider's progress for those not collected.

    Example: pcf batch status demo-study/pcf
    """
    from pcf.runs.batch_status import LOST_STATUS, batch_status

    with batch_errors(), database() as session:
        rows = {name: batch_status(name, session=session) for name in runs}
    emit(rows)
    for name, batches in rows.items():
        for row in batches:
            if row.get("provider_status") == LOST_STATUS:
                typer.echo(f"note: {lost_batch(name, row['batch_id'])}", err=True)


@batch_app.command("collect")
def batch_collect_command(
    runs: RunsArgument,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until every batch ended, with a progress bar.")
    ] = False,
    poll: Annotated[float, typer.Option(help="--wait: seconds between status checks.")] = 30.0,
) -> None:
    """Store the answers of the runs' ended batches as calls (batch price); safe to repeat.

    Failed, expired and cancelled requests are stored as failed calls with their reason;
    `pcf judge ... --retry-failed [--batch]` asks them again. An APOCJudge run's confirmation
    calls (an adaptive run's next wave) are submitted once its first answers are stored,
    unless they may pass the cost cap given to the run's last submit: the run is then capped
    (exit 1). A run with calls missing and no batch waiting (a submit refused at its cap) has
    nothing to collect (exit 1). A run done whose bills passed its cap (the provider billed above
    the bound its batch was reserved at) says so (exit 1).

    Example: pcf batch collect demo-study/direct demo-study/pcf --wait
    """
    from pcf.runs.batch import collect_runs

    def show(reports: list) -> None:
        finished, requests = sum(r.finished for r in reports), sum(r.requests for r in reports)
        width = 30
        filled = width * finished // requests if requests else width
        redraw(
            f"collect [{'#' * filled}{'.' * (width - filled)}] {finished}/{requests} requests, "
            f"{sum(r.stored for r in reports)} calls stored, "
            f"{sum(r.pending for r in reports)} batches running"
        )

    with batch_errors(), database() as session:
        reports = collect_runs(
            runs, session=session, actor=operator(), wait=wait, poll_s=poll, progress=show
        )
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        emit({name: r.as_dict() for name, r in zip(runs, reports, strict=True)})
    lost = [lost_batch(name, b) for name, r in zip(runs, reports, strict=True) for b in r.lost]
    fail_lines(lost + [line for r in reports for line in (r.capped, r.idle, r.over_cap) if line])


@batch_app.command("cancel")
def batch_cancel_command(runs: RunsArgument) -> None:
    """Cancel the runs' batches that have not ended; collect then stores what they answered
    and the rest as failed calls (batch_cancelled), which --retry-failed asks again.

    Example: pcf batch cancel demo-study/pcf
    """
    from pcf.runs.batch_status import cancel_runs

    with batch_errors(), database() as session:
        asked = cancel_runs(runs, session=session, actor=operator())
    emit(asked)
    fail_lines(lost_batch(name, b) for name, batches in asked["lost"].items() for b in batches)


@batch_app.command("forget")
def batch_forget_command(runs: RunsArgument) -> None:
    """Make the calls of the runs' batches that the provider no longer knows (it answers 404)
    failed calls (batch_lost), which `pcf judge ... --retry-failed [--batch]` asks again; every
    answer stored stays. Other batches are collected as usual, never forgotten. A key or
    --base-url other than the batch's gets 404 too: forget a batch once it is truly gone.

    Example: pcf batch forget demo-study/pcf
    """
    from pcf.runs.batch import collect_runs

    with batch_errors(), database() as session:
        reports = collect_runs(runs, session=session, actor=operator(), forget_lost=True)
    emit({name: r.as_dict() for name, r in zip(runs, reports, strict=True)})
    for name, report in zip(runs, reports, strict=True):
        forgotten = len(report.forgotten)
        typer.echo(
            f"run {name!r}: {forgotten} lost batch(es) forgotten, {report.failures} calls "
            "stored as failed; `pcf judge ... --retry-failed` asks them again"
            if forgotten
            else f"run {name!r}: no lost batch to forget",
            err=True,
        )


@runs_app.command("delete")
def delete_run_command(
    name: Annotated[str, typer.Argument(metavar="RUN", help="The run to delete.")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete without asking.")] = False,
) -> None:
    """Delete a run and its calls; adjudications (labels of items) are never deleted.

    Asks first unless --yes. Refused while a process is judging the run, or while other runs
    reuse its answers from the cache.

    Example: pcf runs delete demo-strong-bias-pcf --yes
    """
    from pcf.runs.manage import delete_run

    with database() as session:
        existing("run", name, session=session)
        question = f"Delete run {name!r} and its calls (adjudications stay)?"
        if not yes and not typer.confirm(question, err=True):
            fail("nothing deleted")
        with refusing(code=1):
            deleted = delete_run(name, session=session, actor=operator())
    emit({"deleted": name, **deleted})


@app.command()
def study(
    dataset_name: DatasetArgument,
    name: Annotated[str, typer.Option(help="Study name; its runs are NAME/direct, NAME/pcf...")],
    backend: BackendOption = None,
    model: ModelOption = SIMULATED_MODEL,
    base_url: BaseUrlOption = None,
    k: Annotated[int, typer.Option("--k", help="Orderings per item for PCF and repeated.")] = 7,
    executions: Annotated[int, typer.Option(help="Independent PCF executions.")] = 3,
    concurrency: ConcurrencyOption = 16,
    timeout: TimeoutOption = None,
    limit: LimitOption = None,
    seed: RunSeedOption = 0,
    temperature: TemperatureOption = 0.0,
    replay: ReplayOption = None,
    structured_output: StructuredOption = True,
    batch: BatchOption = False,
    batch_size: BatchSizeOption = None,
    max_cost: MaxCostOption = None,
) -> None:
    """Run the paper's study in one go: direct, PCF (K, executions) and repeated canonical;
    APOCJudge for pairs. Cached calls are reused, so running it again costs nothing. With
    --batch every run is submitted as provider batches (a prompt two runs share is sent once).

    Example: pcf study demo --name demo-study --model openai/gpt-4o-mini --batch
    """
    check_prices()
    from pcf.runs.manage import judge_run
    from pcf.runs.study import study_specs

    with refusing():
        base = RunSpec(
            dataset_name,
            **parse_model(model, backend=backend, base_url=base_url)._asdict(),
            replay=replay,
            k=k,
            executions=executions,
            seed=seed,
            temperature=temperature,
            limit=limit,
            concurrency=concurrency,
            timeout_s=timeout,
            structured_output=structured_output,
        )
        with database() as session:
            specs = study_specs(name, base, session=session)
        if batch:
            submit_batches(specs, batch_size=batch_size, max_cost=max_cost)
            return
        with database() as session:
            summaries, reports = [], []
            for spec in specs:
                run, report = judge_run(
                    spec,
                    session=session,
                    actor=operator(),
                    progress=stderr_progress(spec.run_name, spec),
                    max_cost=max_cost,
                    on_signal=say,
                )
                summaries.append(summary(run, report, session=session))
                reports.append((spec.run_name, report))
                if report.interrupted:
                    break
        emit({"study": name, "runs": summaries})
    check_runs(reports)


@app.command("check")
def check_command(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A stored run.")],
    max_failed: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="Most share of failed calls, and of items missing a judgment."
        ),
    ] = 0.05,
    max_order_unstable: Annotated[
        float | None,
        typer.Option(min=0, max=1, help="Most share of order_unstable items (complete ones)."),
    ] = None,
    max_position_driven: Annotated[
        float | None,
        typer.Option(min=0, max=1, help="Most share of position_driven items (complete ones)."),
    ] = None,
    min_kappa: Annotated[
        float | None,
        typer.Option(
            min=-1, max=1, help="Least chance-corrected agreement of PCF with human gold."
        ),
    ] = None,
    min_accuracy: Annotated[
        float | None, typer.Option(min=0, max=1, help="Least accuracy of PCF against human gold.")
    ] = None,
    min_items: Annotated[
        int, typer.Option(min=1, help="Fewest items (calls) a figure is accepted on.")
    ] = 20,
) -> None:
    """Gate a build on a stored run: one line per threshold (figure, value, threshold, pass or
    FAIL, and the items or calls it counts), then the same as JSON on the last line. The shares
    of failed calls and incomplete items are always checked; order figures count complete items
    with two judgments or more; a figure on fewer than --min-items is undefined and fails. Exits
    0 when every threshold holds, 1 when one fails, 2 on a usage error (kappa or accuracy
    without human gold).

    Example: pcf check demo-pcf --max-order-unstable 0.5 --max-position-driven 0.1
    """
    from pcf.analysis.gate import check_run

    with database() as session, refusing():
        run = existing("run", run_name, session=session)
        checks = check_run(
            run,
            session=session,
            min_items=min_items,
            max_failed=max_failed,
            max_order_unstable=max_order_unstable,
            max_position_driven=max_position_driven,
            min_kappa=min_kappa,
            min_accuracy=min_accuracy,
        )
    passed = all(c.passed for c in checks)
    for check in checks:
        typer.echo(check.line())
    typer.echo(json_text({"run": run_name, "passed": passed, "checks": list(map(asdict, checks))}))
    if not passed:
        raise typer.Exit(1)


@app.command()
def whatif(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A stored listwise run.")],
    adaptive: Annotated[str, typer.Option(help="The policy: certain or confident.")] = "certain",
    risk: RiskOption = 0.01,
    stop_on: Annotated[
        str, typer.Option(help="The weights winners are settled on: a preset or ws,wB,wv,wu.")
    ] = "proposed",
) -> None:
    """Replay a stored full run under an adaptive stopping policy, without any judge call: calls
    per item, the share of winners equal to the full run's (both decided with --stop-on; for
    confident, on the items outside its calibration share), accuracy against gold and humans.

    Example: pcf whatif demo-pcf --adaptive confident --risk 0.01 --stop-on rank-only
    """
    from pcf.analysis.whatif import whatif as replay_policy
    from pcf.stopping import StoppingPolicy

    with refusing():
        policy = StoppingPolicy(adaptive, risk=risk, weights=named_weights(stop_on))
        with database() as session:
            run = existing("run", run_name, session=session)
            emit(replay_policy(run, policy, session=session))


@app.command()
def triage(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A stored listwise run.")],
    by: Annotated[
        list[str] | None,
        typer.Option(
            help="Review order(s): priority, top_entropy, margin, kendall_w, "
            "overrides, calibrated, random."
        ),
    ] = None,
    against: Annotated[str, typer.Option(help="gold or humans.")] = "gold",
    seed: Annotated[int, typer.Option(help="Seed of the random orders and the folds.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for triage.png, and reliability.csv/png for calibrated."),
    ] = None,
) -> None:
    """How many of the judge's errors each share of human review finds, per review order, with
    a seeded random baseline: error-capture and budget curves, their areas, JSON on stdout.

    Example: pcf triage demo-pcf --by priority --by calibrated --out triage/
    """
    from pcf.analysis.triage import ORDERS, calibrated_scores, curve_frame, reliability, run_triage
    from pcf.analysis.triage import summarize as summarize_triage

    orders = by or ["priority"]
    if unknown := [o for o in orders if o not in ORDERS]:
        fail(f"error: unknown order {unknown[0]!r}; choose from {', '.join(ORDERS)}", 2)
    with database() as session, refusing():
        run = existing("run", run_name, session=session)
        curves, wrong, table = run_triage(
            run, session=session, orders=orders, against=against, seed=seed
        )
    figures = {"run": run_name, "against": against, **summarize_triage(curves, wrong, seed=seed)}
    if out is not None:
        from pcf.files import write_whole
        from pcf.reports.charts import capture_chart, reliability_chart
        from pcf.reports.render import chart_png

        with writing(out):
            out.mkdir(parents=True, exist_ok=True)
            write_whole(
                out / "triage.png", chart_png(capture_chart(curve_frame(curves, wrong, seed=seed)))
            )
            if "calibrated" in orders:
                diagram = reliability(calibrated_scores(table, wrong, seed=seed), wrong)
                write_whole(out / "reliability.csv", diagram.to_csv(index=False))
                write_whole(out / "reliability.png", chart_png(reliability_chart(diagram)))
                figures["reliability"] = diagram.to_dict(orient="records")
        typer.echo(f"wrote {out / 'triage.png'}", err=True)
    emit(figures)


@app.command()
def escalate(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A stored listwise run.")],
    alpha: Annotated[float, typer.Option(help="Accepted share of disagreements.")] = 0.1,
    delta: Annotated[float, typer.Option(help="Accepted chance the guarantee fails.")] = 0.1,
    signal: Annotated[
        str, typer.Option(help="top_agreement, margin or calibrated.")
    ] = "top_agreement",
    calibration_labels: Annotated[
        str,
        typer.Option(
            help="gold (a random half of the dataset's gold) or humans (the human gold of the "
            "labelling plan's random calibration share, every item of it labelled)."
        ),
    ] = "gold",
    queue: Annotated[
        bool, typer.Option(help="Send the escalated items to the labelling queue, served next.")
    ] = False,
) -> None:
    """Which items the judge may decide alone: the threshold on --signal chosen on calibration
    items so that, with probability >= 1-delta, a new item like them at or above it agrees with
    the answers with probability >= 1-alpha (a promise per new item, not about the share of
    this run's decided items: the agreement realized on the held-out decided items is printed
    beside it, unbounded). Items without a winner are escalated; an adaptive run calibrates on
    and decides only its items judged in full at random. The decided and escalated items,
    beside the direct call's confidence on the same sample. JSON on stdout.

    Example: pcf escalate demo-pcf --alpha 0.1 --delta 0.1 --signal margin --queue
    """
    from pcf.analysis.escalate import escalate as split_items
    from pcf.labelling.plan import queue_escalated

    with database() as session, refusing():
        run = existing("run", run_name, session=session)
        figures = split_items(
            run,
            session=session,
            alpha=alpha,
            delta=delta,
            signal=signal,
            labels=calibration_labels,
        )
        if queue:
            queue_escalated(run, figures["escalated"], session=session, actor=operator())
        emit(figures)


@app.command("report")
def report_command(
    names: Annotated[
        list[str], typer.Argument(metavar="NAME...", help="Study names or run names.")
    ],
    out: Annotated[
        Path,
        typer.Option(help="Folder for report.md, report.html, report.json and charts/*.png."),
    ] = Path("report"),
    seed: Annotated[int, typer.Option(help="Seed of the paired bootstrap.")] = 0,
) -> None:
    """Write report.md, a self-contained report.html and report.json (every table as records;
    charts also as PNG) for studies or runs, from their stored judgments: no judge is called.

    Example: pcf report demo-study --out report/
    """
    from pcf.reports.collect import collect_report
    from pcf.reports.document import build_report, report_title
    from pcf.reports.render import write_report
    from pcf.runs.study import study_runs
    from pcf.store import get_run

    check_out_folder(out)
    with database() as session:
        chosen: dict[int, Run] = {}
        for name in names:
            run = get_run(name, session=session)
            found = [run] if run is not None else study_runs(name, session=session)
            if not found:
                fail(f"error: no run or study {name!r}; `pcf runs` lists them", 2)
            chosen |= {r.id: r for r in found}
        with refusing(code=1):
            data = collect_report(list(chosen.values()), session=session)
    with writing(out):
        written = write_report(build_report(data, title=report_title(names), seed=seed), out)
    emit(written)


@app.command()
def demo(
    if_missing: Annotated[
        bool, typer.Option("--if-missing", help="Do nothing when the demo runs exist.")
    ] = False,
) -> None:
    """Build the demo database: dataset `demo` and simulated direct, PCF and repeated runs.

    Example: pcf demo --if-missing
    """
    from pcf.runs.study import DEMO_RUNS, build_demo
    from pcf.store import database_url, get_run

    with database() as session:
        if not (if_missing and all(get_run(s.run_name, session=session) for s in DEMO_RUNS)):
            built = build_demo(session=session, actor=operator())
            summaries = [summary(run, report, session=session) for run, report in built]
            emit({"database": database_url(), "runs": summaries})
    typer.echo(f"demo database ready at {database_url()}", err=True)


members_app = group("members", "Who may sign in to the app, and with which role.")
EmailArgument = Annotated[str, typer.Argument(metavar="EMAIL", help="The email they sign in with.")]


@members_app.command("add")
def members_add(
    email: EmailArgument,
    role: Annotated[str, typer.Option(help="admin, reviewer, annotator or viewer.")] = "annotator",
) -> None:
    """Give EMAIL a role (a new member, or another role); the CLI acts as the operator.

    Example: pcf members add alice@example.com --role annotator
    """
    from pcf.labelling.membership import add_member

    with refusing(), database() as session:
        member = add_member(email, role, session=session, actor=operator())
        emit({"email": member.email, "role": member.role})


@members_app.command("list")
def members_list() -> None:
    """List the members and their roles.

    Example: pcf members list
    """
    from pcf.labelling.membership import members

    with database() as session:
        listed = members(session=session, actor=operator())
        fields = ("email", "role", "added_by", "added_at", "issuer", "subject")
        rows = [{field: getattr(m, field) for field in fields} for m in listed]
        emit([row | {"added_at": row["added_at"].isoformat()} for row in rows])


@members_app.command("remove")
def members_remove(email: EmailArgument) -> None:
    """Take EMAIL's access away; the labels they saved stay.

    Example: pcf members remove alice@example.com
    """
    from pcf.labelling.membership import remove_member

    with refusing(), database() as session:
        remove_member(email, session=session, actor=operator())
    typer.echo(f"removed {email}", err=True)


tokens_app = group("tokens", "Tokens of the HTTP API: each acts as one member, within a scope.")


@tokens_app.command("create")
def tokens_create(
    email: EmailArgument,
    scope: Annotated[
        str,
        typer.Option(
            help="read, label, run or admin (each holds the ones before); capped by "
            "the member's role."
        ),
    ],
    expires: Annotated[
        str | None, typer.Option(help="Refused after this long: 30d, 12h or 15m (default: never).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the token and its record as JSON.")
    ] = False,
) -> None:
    """Create a token acting as member EMAIL; it is printed once and stored only hashed.

    Example: pcf tokens create alice@example.com --scope label --expires 30d
    """
    from pcf.labelling.tokens import create_token, parse_duration

    with refusing(), database() as session:
        expires_in = None if expires is None else parse_duration(expires)
        token = create_token(email, scope, session=session, actor=operator(), expires_in=expires_in)
    if not as_json:
        typer.echo(token.secret)
        return
    record = asdict(token) | {"token": token.secret}
    del record["secret"]
    emit(record | {"expires_at": token.expires_at.isoformat() if token.expires_at else None})


@tokens_app.command("list")
def tokens_list() -> None:
    """List the tokens (never their secrets): id, member, scope, dates, whether revoked.

    Example: pcf tokens list
    """
    from pcf.labelling.tokens import tokens

    with database() as session:
        listed = tokens(session=session, actor=operator())
    fields = ("id", "email", "scope", "prefix", "created_by")
    dates = ("created_at", "expires_at", "revoked_at")
    emit(
        [
            {f: getattr(t, f) for f in fields}
            | {d: at.isoformat() if (at := getattr(t, d)) else None for d in dates}
            for t in listed
        ]
    )


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: Annotated[int, typer.Argument(metavar="ID", help="A token's id (pcf tokens list).")],
) -> None:
    """Revoke a token: its next request is refused.

    Example: pcf tokens revoke 1
    """
    from pcf.labelling.tokens import revoke

    with refusing(), database() as session:
        revoke(token_id, session=session, actor=operator())
    typer.echo(f"revoked token {token_id}", err=True)


webhooks_app = group("webhooks", "Webhooks: send the events queued for the API's subscriptions.")


@webhooks_app.command("deliver")
def webhooks_deliver(
    watch: Annotated[
        bool,
        typer.Option(help="Keep sending every PCF_WEBHOOK_POLL_S seconds until interrupted."),
    ] = False,
) -> None:
    """Send the webhook deliveries due now (each attempt logged, retried later on failure), for
    a pipeline with no API server running (the server sends them itself).

    Example: pcf webhooks deliver
    """
    from pcf.connectors.webhook_sender import Sender, deliver_due
    from pcf.store import get_engine

    with storage_errors():
        engine = get_engine()
        if not watch:
            sent = 0
            while made := deliver_due(engine):
                sent += made
            typer.echo(f"{sent} attempt(s) made", err=True)
            return
    sender = Sender(engine).start()
    try:
        while sender.thread.is_alive():
            sender.thread.join(1.0)
    except KeyboardInterrupt:
        sender.stop()


@app.command("api")
def api_command(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8502,
) -> None:
    """Serve the HTTP API alone at http://HOST:PORT/api/v1 (`make run` serves it beside the
    app); runs submitted before a restart are resumed.

    Example: pcf api --host 127.0.0.1 --port 8502
    """
    import uvicorn

    from pcf.api import standalone

    with storage_errors():
        from pcf.store import get_engine

        get_engine()  # an unusable database stops here, in one line
    uvicorn.run(standalone(), host=host, port=port, log_level="info")


@app.command()
def audit(
    limit: Annotated[int | None, typer.Option(help="The newest N events only.")] = None,
) -> None:
    """Print the audit log as JSON Lines, newest first: sign-ins, imports, runs, members.

    Example: pcf audit --limit 20 > audit.jsonl
    """
    from pcf.labelling.audit import audit_log

    with database() as session:
        events = audit_log(session=session, actor=operator(), limit=limit)
    write_lines([events], sys.stdout)


labelling_app = group("labelling", "A dataset's labelling plan.")


@labelling_app.command("set")
def labelling_set(
    dataset_name: DatasetArgument,
    labels_per_item: Annotated[
        int | None, typer.Option(help="People's labels per item (1 to 10).")
    ] = None,
    guidelines: Annotated[
        Path | None, typer.Option(help="A Markdown file: what annotators read first.")
    ] = None,
    adaptive: Annotated[
        bool | None,
        typer.Option(
            "--adaptive/--fixed",
            help="Ask for the labels after the first only where labels disagree or the item "
            "is flagged (--adaptive), or always (--fixed).",
        ),
    ] = None,
    gold_rule: Annotated[
        str | None, typer.Option(help="unanimous, majority or dawid_skene.")
    ] = None,
    calibration_share: Annotated[
        float | None,
        typer.Option(
            help="A random share of the items (0 to 1, drawn by the dataset's seed) labelled "
            "first, regardless of doubt: the calibration sample of `pcf escalate "
            "--calibration-labels humans`."
        ),
    ] = None,
) -> None:
    """Set how DATASET is labelled; what is not given stays as it is.

    Example: pcf labelling set demo --labels-per-item 2 --guidelines guidelines.md
    """
    from pcf.files import GUIDELINES_FILE, InputFileError, read_input
    from pcf.labelling.plan import set_plan

    text = None
    if guidelines is not None:
        try:
            text = read_input(guidelines, GUIDELINES_FILE).decode("utf-8")
        except InputFileError as exc:
            fail(f"error: --guidelines {exc}", 2)
        except UnicodeDecodeError as exc:
            fail(f"error: --guidelines {guidelines}: not UTF-8 text ({exc.reason})", 2)
    with database() as session, refusing():
        found = existing("dataset", dataset_name, session=session)
        plan = set_plan(
            found.id,
            session=session,
            actor=operator(),
            labels_per_item=labels_per_item,
            adaptive=adaptive,
            gold_rule=gold_rule,
            guidelines=text,
            calibration_share=calibration_share,
        )
        fields = ("labels_per_item", "adaptive", "gold_rule", "calibration_share")
        shown = {field: getattr(plan, field) for field in fields}
        emit({"dataset": dataset_name, **shown, "guidelines_chars": len(plan.guidelines)})


labels_app = group("labels", "Every label of a dataset, for other tools.")
gold_app = group("gold", "A dataset's human gold, for other tools.")
ExportOut = Annotated[Path, typer.Option("--out", help="The file to write (its folder is made).")]
ExportFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="jsonl, csv, parquet, or hf: a folder that datasets.load_dataset and load_from_disk "
        "read, with a README.md card (default: the --out suffix's, or jsonl).",
    ),
]


def export_team(dataset_name: str, out: Path, fmt: str | None, what: str) -> None:
    """Write the dataset's labels or human gold to ``out`` (a file even when empty; for
    ``hf`` a folder with its dataset card)."""
    from pcf.labelling.exports import (
        GOLD_SCHEMA,
        LABEL_SCHEMA,
        dataset_card,
        export_format,
        gold_records,
        label_records,
        write_records,
    )
    from pcf.labelling.plan import labelling_plan

    with refusing():
        fmt = export_format(out, fmt)
    if out.is_dir() and fmt != "hf":
        fail(f"error: --out {out} is a folder; give a file name", 2)
    with database() as session:
        found = existing("dataset", dataset_name, session=session)
        records = (label_records if what == "labels" else gold_records)(found.id, session=session)
        plan = labelling_plan(found.id, session=session)
    card = dataset_card(dataset_name, what, records, plan)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        write_records(records, out, fmt, LABEL_SCHEMA if what == "labels" else GOLD_SCHEMA, card)
    typer.echo(f"wrote {len(records)} {what} records to {out}", err=True)


@labels_app.command("export")
def labels_export(dataset_name: DatasetArgument, out: ExportOut, fmt: ExportFormat = None) -> None:
    """Write every label of DATASET (corrections too) with the item's texts.

    Example: pcf labels export demo --out labels.parquet --format parquet
    """
    export_team(dataset_name, out, fmt, "labels")


@labels_app.command("import")
def labels_import(
    path: Annotated[
        Path, typer.Argument(help="JSON Lines, CSV or Parquet (by its suffix): one label a row.")
    ],
    dataset_name: Annotated[str, typer.Option("--dataset", help="An imported dataset.")],
    source: Annotated[
        str | None, typer.Option(help="Where the labels come from (default: the file's name).")
    ] = None,
) -> None:
    """Import labels given elsewhere, all or nothing: columns item_id, annotator, answer (a
    candidate id, none_correct or cannot_tell), and optional confidence, note, time.

    Example: pcf labels import labels.csv --dataset demo --source label-studio
    """
    from pcf.connectors.label_imports import import_labels

    with database() as session, refusing():
        found = existing("dataset", dataset_name, session=session)
        try:
            count = import_labels(
                path, found.id, session=session, actor=operator(), source=source or path.name
            )
        except DataError as exc:
            fail(f"{len(exc.problems)} problem(s) in {path}; nothing imported:\n{exc}")
    typer.echo(f"imported {count} labels into {dataset_name}", err=True)


@labels_app.command("assign")
def labels_assign(
    dataset_name: Annotated[str, typer.Option("--dataset", help="An imported dataset.")],
    to: Annotated[str, typer.Option(help="The member (email) who gets the items.")],
    items: Annotated[
        str | None, typer.Option(help="Item ids, comma-separated (taken from any other).")
    ] = None,
    first: Annotated[
        int, typer.Option(help="The first N items in file order nobody has or labelled.")
    ] = 0,
    share: Annotated[
        float, typer.Option(help="As --first, for this share of the items (0 to 1).")
    ] = 0.0,
    remove: Annotated[
        bool, typer.Option("--remove", help="Take back every item assigned to --to.")
    ] = False,
) -> None:
    """Assign items of DATASET to one annotator: her queue serves them first, and nobody
    else's until she labels them.

    Example: pcf labels assign --dataset demo --to alice@example.com --first 10
    """
    from pcf.labelling.queue import assign, unassign
    from pcf.store import item_positions

    with database() as session, refusing():
        found = existing("dataset", dataset_name, session=session)
        order = [(key, db_id) for key, db_id, _ in item_positions(found.id, session=session)]
        if remove:
            count = unassign(found.id, to, session=session, actor=operator())
        else:
            keys = [key.strip() for key in (items or "").split(",") if key.strip()]
            assigned = assign(
                found.id,
                order,
                session=session,
                actor=operator(),
                to=to,
                items=keys,
                first=first,
                share=share,
            )
            count = len(assigned)
    done = f"took back {count} items from" if remove else f"assigned {count} items to"
    typer.echo(f"{done} {to} in {dataset_name}", err=True)


@gold_app.command("export")
def gold_export(dataset_name: DatasetArgument, out: ExportOut, fmt: ExportFormat = None) -> None:
    """Write DATASET's human gold per item: where it came from, the labels, the resolutions.

    Example: pcf gold export demo --out gold.csv --format csv
    """
    export_team(dataset_name, out, fmt, "gold")


db_app = group("db", "The database's schema revision: show it, list revisions, upgrade.")


@contextmanager
def schema_engine() -> Iterator[Engine]:
    """The database's engine without a revision check, errors as :func:`storage_errors`."""
    from pcf.store import unchecked_engine

    engine = unchecked_engine()
    try:
        with storage_errors():
            yield engine
    finally:
        engine.dispose()


@db_app.command("current")
def db_current() -> None:
    """Show the database's schema revision and the newest this code knows.

    A database made before migrations existed shows the revision its tables match.

    Example: pcf db current
    """
    from pcf.store import database_url, head, state

    with schema_engine() as engine, engine.connect() as connection:
        stamped, recognised = state(connection)
    emit(
        {
            "database": database_url(),
            "revision": stamped,
            "matches": recognised,
            "head": head(),
            "up_to_date": stamped == head(),
        }
    )


@db_app.command("history")
def db_history() -> None:
    """List the schema revisions this code knows, oldest first.

    Example: pcf db history
    """
    from pcf.store import history

    for revision in history():
        typer.echo(f"{revision.revision}  {revision.title}")


@db_app.command("upgrade")
def db_upgrade(
    to: Annotated[str, typer.Option("--to", help="Revision to stop at (default: the newest).")] = (
        "head"
    ),
) -> None:
    """Upgrade the database's schema, keeping every row; a second run does nothing.

    A SQLite file is copied beside itself first (the copy's name is printed). On PostgreSQL
    take a backup (pg_dump) first; each revision is a transaction, so a failed upgrade stops
    at the revision before it and can simply be run again.

    Example: pcf db upgrade
    """
    from pcf.store import database_url, upgrade

    with schema_engine() as engine:
        report = upgrade(engine, to=to)
    emit(
        {
            "database": database_url(),
            "before": report.before,
            "after": report.after,
            "changed": report.changed,
            "backup": str(report.backup) if report.backup else None,
        }
    )
