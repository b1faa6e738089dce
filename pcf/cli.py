"""The `pcf` command line: a thin layer over the library."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from pcf.consensus import PRESETS, RULES, Weights
from pcf.decisions import aggregate as aggregate_judgments
from pcf.errors import DataError
from pcf.items import FORMATS, load_dataset
from pcf.judgments import read_judgments
from pcf.recordings import read_judgebench_outputs, read_llmbar_results, replay_summary

app = typer.Typer(
    help="PCF Review: permutation-consensus factuality judging.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
replay_app = typer.Typer(
    help="Score recorded pairwise judge outputs (both orders).", no_args_is_help=True
)
app.add_typer(replay_app, name="replay")


def fail(message: str, code: int = 1) -> None:
    """Print an error to stderr and stop with ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code)


def emit(obj: object) -> None:
    """Print one JSON object on stdout."""
    typer.echo(json.dumps(obj, ensure_ascii=False, indent=2))


def choose_weights(preset: str | None, weights: str | None) -> Weights:
    """The weights from ``--preset`` or ``--weights`` (not both); the proposed preset otherwise."""
    if preset and weights:
        fail("error: give --preset or --weights, not both", 2)
    if weights:
        try:
            return Weights.parse(weights)
        except ValueError as exc:
            fail(f"error: --weights: {exc}", 2)
    name = preset or "proposed"
    if name not in PRESETS:
        fail(f"error: unknown preset {name!r}; choose one of {', '.join(PRESETS)}", 2)
    return PRESETS[name]


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
    executions: Annotated[int | None, typer.Option(help="Keep the first N executions.")] = None,
    rule: Annotated[str, typer.Option(help=f"One of: {', '.join(RULES)}.")] = "eq5",
) -> None:
    """Aggregate judgments into one decisions.jsonl line per item, on stdout.

    Example: pcf aggregate judgments.jsonl --items items.jsonl --preset uniform --k 3
    """
    chosen = choose_weights(preset, weights)
    if k is not None and k < 1:
        fail("error: --k must be at least 1", 2)
    if rule not in RULES:
        fail(f"error: unknown rule {rule!r}; choose one of {', '.join(RULES)}", 2)
    try:
        records = read_judgments(judgments)
        listed = load_dataset("jsonl", items) if items else None
        decisions = aggregate_judgments(
            records, items=listed, weights=chosen, k=k, executions=executions, rule=rule
        )
    except DataError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(f"error: {exc}")
    for record in decisions:
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


@app.command()
def validate(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help=f"One of: {', '.join(FORMATS)}.")],
    path: Annotated[Path, typer.Argument(help="The dataset file.")],
    subset: Annotated[
        str | None, typer.Option(help="RewardBench 2 subset or bucket to keep.")
    ] = None,
) -> None:
    """Check a dataset file: print counts, or every error with file, line and field.

    Example: pcf validate rewardbench2 factuality.jsonl --subset Factuality
    """
    if fmt not in FORMATS:
        fail(f"error: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", 2)
    try:
        items = load_dataset(fmt, path, subset=subset)
    except DataError as exc:
        fail(f"{len(exc.problems)} problem(s) in {path}:\n" + "\n".join(map(str, exc.problems)))
    emit(
        {
            "file": str(path),
            "format": fmt,
            "items": len(items),
            "candidates_per_item": dict(sorted(Counter(len(i.candidates) for i in items).items())),
            "with_gold": sum(i.gold is not None for i in items),
            "buckets": dict(Counter(i.bucket for i in items if i.bucket)),
        }
    )


@replay_app.command("judgebench")
def replay_judgebench(
    path: Annotated[Path, typer.Argument(help="A JudgeBench outputs file (both orders).")],
) -> None:
    """Score a JudgeBench judge's recorded decisions by the official rule, per bucket.

    Example: pcf replay judgebench "outputs/dataset=judgebench,...,judge_model=o1-mini.jsonl"
    """
    try:
        emit({"file": str(path), **replay_summary(read_judgebench_outputs(path))})
    except (DataError, ValueError) as exc:
        fail(str(exc))


@replay_app.command("llmbar")
def replay_llmbar(
    path: Annotated[Path, typer.Argument(help="An LLMBar result.json, or a folder of them.")],
    judge: Annotated[str | None, typer.Option(help="Evaluator folder, e.g. GPT-4.")] = None,
    strategy: Annotated[str | None, typer.Option(help="Prompt folder, e.g. Vanilla.")] = None,
) -> None:
    """Score an LLMBar judge's recorded decisions in both orders, per subset.

    Example: pcf replay llmbar Dataset/LLMBar --judge GPT-4 --strategy Vanilla
    """
    try:
        pairs = read_llmbar_results(path, judge=judge, strategy=strategy)
        emit({"path": str(path), **replay_summary(pairs)})
    except (DataError, ValueError) as exc:
        fail(str(exc))


def main() -> None:
    """Entry point for ``python -m pcf``."""
    app()
