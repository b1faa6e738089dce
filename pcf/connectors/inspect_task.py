"""PCF inside inspect_ai (docs/inspect.md): a task that judges each item under K orderings
through inspect's model API, and a scorer that turns the answers into PCF's decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    ResponseSchema,
    get_model,
)
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, Value, metric, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import JSONSchema

from pcf.decisions import aggregate
from pcf.files import FieldChecker
from pcf.flags import FLAGS
from pcf.items import Item, load_dataset, sound_items
from pcf.judges.base import schema_without
from pcf.judgments import Judgment
from pcf.orderings import schedule
from pcf.parsing import parse_listwise
from pcf.prompts import render_listwise
from pcf.weights import named_weights

ITEM = "item"
"""The sample metadata holding the item (``items.jsonl`` form)."""
CALLS = "pcf_calls"
"""The sample metadata holding the calls made: each ordering and the model's raw answer."""


def item_of(metadata: Mapping[str, Any]) -> Item:
    """The item a sample's metadata holds (written by :func:`judge`, so sound)."""
    return next(sound_items("jsonl", [(0, metadata[ITEM])], FieldChecker("sample")))


def recorded_judgments(
    item: Item, calls: Sequence[Mapping[str, Any]], execution: int
) -> list[Judgment]:
    """The judgments of a sample's recorded calls: each answer parsed against its ordering."""
    out = []
    for index, call in enumerate(calls):
        order = tuple(call["order"])
        parsed = parse_listwise(call["answer"], render_listwise(item, order).key_to_id, order)
        out.append(Judgment(item.item_id, execution, index, order, **vars(parsed)))
    return out


@task
def judge(
    items: str,
    format: str = "jsonl",
    k: int = 7,
    schedule: str = "balanced",
    dataset_seed: int = 0,
    seed: int = 0,
    weights: str = "proposed",
) -> Task:
    """Judge every item of a dataset file under K orderings and decide it as PCF does.

    Args:
        items: the dataset file (``pcf import``'s formats).
        format: its format: jsonl, csv, rewardbench2 or judgebench.
        k: orderings per item (the first is the canonical one).
        schedule: balanced, random, exhaustive or repeated.
        dataset_seed: the seed of the canonical orders (as ``pcf import --seed``).
        seed: the seed of the schedule's random draws (as ``pcf judge --seed``).
        weights: the Eq. 5 weights: a preset's name or ``ws,wB,wv,wu``.
    """
    check_model_starts()
    samples = [
        Sample(input=i.prompt, target=i.gold or "", id=i.item_id, metadata={ITEM: i.to_dict()})
        for i in load_dataset(format, items)
    ]
    return Task(
        dataset=MemoryDataset(samples, name=Path(items).stem),
        solver=judge_orderings(k, schedule, dataset_seed, seed),
        scorer=permutation_consensus(weights),
    )


def check_model_starts() -> None:
    """Raise, with the reason, when the eval's model cannot answer: ``inspect eval`` exits 0
    when every sample fails, but non-zero when the task cannot be made.

    ``mockllm/model`` without custom outputs reports no usage, so inspect counts its tokens
    with tiktoken's ``o200k_base`` encoding, which tiktoken downloads on first use (offline,
    every call would fail). A task made outside an eval (no model yet) is not checked."""
    try:
        model = get_model()
    except ValueError:  # no model given yet: the eval that runs the task will name one
        return
    if not str(model).startswith("mockllm/") or "custom_outputs" in model.model_args:
        return
    import tiktoken  # noqa: PLC0415 - inspect_ai's own dependency, needed for mockllm alone

    try:
        tiktoken.get_encoding("o200k_base")
    except Exception as exc:  # a download or cache failure, whatever its class
        raise RuntimeError(
            f"{model} cannot start: inspect counts its tokens with tiktoken's o200k_base "
            f"encoding, which could not be loaded ({type(exc).__name__}: {exc}); tiktoken "
            "downloads it on first use: run once online, or point TIKTOKEN_CACHE_DIR at a "
            "folder that holds it"
        ) from exc


@solver
def judge_orderings(
    k: int = 7, schedule_name: str = "balanced", dataset_seed: int = 0, seed: int = 0
) -> Solver:
    """Ask the model PCF's listwise prompt once per scheduled ordering of the sample's item,
    keeping each ordering and raw answer in the sample's metadata (:data:`CALLS`)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        item = item_of(state.metadata)
        model, calls = get_model(), []
        for order in schedule(
            schedule_name,
            item.candidate_ids,
            k,
            dataset_seed=dataset_seed,
            item_id=item.item_id,
            seed=seed,
        ):
            rendered = render_listwise(item, order)
            # inspect sends one schema to every provider: the bound no strict mode rejects aside
            schema = JSONSchema.model_validate(schema_without(rendered.schema or {}, ["maxLength"]))
            output = await model.generate(
                [
                    ChatMessageSystem(content=rendered.system),
                    ChatMessageUser(content=rendered.user),
                ],
                config=GenerateConfig(
                    response_schema=ResponseSchema(name=rendered.schema_name, json_schema=schema)
                ),
            )
            calls.append({"order": list(order), "answer": output.completion})
        state.metadata[CALLS] = calls
        return state

    return solve


@metric
def pcf_shares() -> Metric:
    """Top-1 accuracy on the items with gold (an abstention is wrong) and the share of items
    raising each flag (over several epochs, inspect's reducer averages each item's first)."""

    def compute(scores: list[SampleScore]) -> Value:
        rows = [(s.score.as_dict(), (s.sample_metadata or {})[ITEM]["gold"]) for s in scores]
        graded = [float(v["correct"] or 0) for v, gold in rows if gold is not None]
        shares = {f: sum(float(v[f] or 0) for v, _ in rows) / len(rows) for f in FLAGS if rows}
        return ({"accuracy": sum(graded) / len(graded)} if graded else {}) | shares

    return compute


@scorer(metrics=[pcf_shares()])
def permutation_consensus(weights: str = "proposed") -> Scorer:
    """The sample's decision: value ``{"winner", "correct", <flag>: bool}``, answer the
    winner, metadata the whole ``decisions.jsonl`` record (consensus, flags, metrics)."""
    chosen = named_weights(weights)

    async def score(state: TaskState, target: Target) -> Score:
        item = item_of(state.metadata)
        calls = recorded_judgments(item, state.metadata[CALLS], 0)
        [record] = aggregate(calls, items=[item], weights=chosen)
        winner = record["winner"]
        value = {"winner": winner or "", "correct": winner == target.text if target.text else None}
        return Score(
            value=value | {flag: flag in record["flags"] for flag in FLAGS},
            answer=winner,
            explanation=", ".join(record["flags"]) or "stable",
            metadata=record,
        )

    return score
