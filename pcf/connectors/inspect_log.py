"""``pcf import inspect LOG`` (docs/inspect.md): an eval log of
:func:`pcf.connectors.inspect_task.judge` stored as a dataset (the log's items) and a replay run
of the model's recorded answers."""

from __future__ import annotations

import dataclasses
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel
from sqlmodel import Session

from pcf.access import Actor
from pcf.choices import SCHEDULES
from pcf.connectors.inspect_task import CALLS, ITEM, recorded_judgments
from pcf.files import FieldChecker, must
from pcf.items import sound_items
from pcf.judgments import Judgment, write_judgments
from pcf.runs.manage import import_dataset, judge_run
from pcf.runs.rows import Progress, RunReport
from pcf.runs.spec import RunSpec
from pcf.store import Run

if TYPE_CHECKING:
    from inspect_ai.log import EvalSample

MOCK_PROVIDER = "mockllm/"
"""inspect's deterministic test model: a run of its answers is marked simulated."""
Whole = Annotated[int, must(lambda v: type(v) is int, "must be an integer, got {got}")]


class _TaskArgs(BaseModel):
    """The arguments of :func:`pcf.connectors.inspect_task.judge` the replay run takes."""

    k: Annotated[
        int, must(lambda v: type(v) is int and v >= 1, "must be an integer >= 1, got {got}")
    ]
    schedule: Annotated[
        str, must(lambda s: s in SCHEDULES, f"must be one of {', '.join(SCHEDULES)}, got {{got}}")
    ]
    dataset_seed: Whole
    seed: Whole


class _Log(BaseModel):
    task_args: _TaskArgs


def _check_samples(
    samples: list[EvalSample],
    position: dict[Any, int],
    k: int,
    epochs: int,
    check: FieldChecker,
) -> None:
    """A problem for each sample whose calls are not the task's K, and for each item not
    judged once in each of the log's epochs."""
    seen: dict[Any, list[int]] = defaultdict(list)
    for sample in samples:
        seen[sample.id].append(sample.epoch)
        calls = sample.metadata.get(CALLS)
        if isinstance(calls, list) and len(calls) != k:
            message = f"{len(calls)} calls in epoch {sample.epoch}, not the task's K of {k}"
            check.add(position.get(sample.id, 0), f"metadata.{CALLS}", message)
    for sample_id, got in seen.items():
        if sorted(got) != list(range(1, epochs + 1)):
            message = f"judged in epochs {sorted(got)}, not once in each of the log's {epochs}"
            check.add(position.get(sample_id, 0), "epoch", message)


def import_inspect_log(
    path: Path,
    *,
    session: Session,
    actor: Actor,
    name: str | None = None,
    progress: Progress | None = None,
) -> tuple[Run, RunReport]:
    """Store the log's items as dataset ``name`` and its answers as a replay run with the
    task's seeds, K and schedule (each epoch an execution), so its orderings are the model's."""
    from inspect_ai.log import read_eval_log  # noqa: PLC0415 - slow to import

    try:
        log = read_eval_log(str(path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not an inspect eval log: {exc}") from exc
    check = FieldChecker(path)
    logged = check.validate(_Log, {"task_args": log.eval.task_args}, None)
    # Samples in the dataset's order (the log keeps them as they finished), each numbered by
    # its position in the dataset.
    position = {sample_id: n for n, sample_id in enumerate(log.eval.dataset.sample_ids or [], 1)}
    samples = sorted(log.samples or [], key=lambda s: (s.epoch, position.get(s.id, 0)))
    firsts = [(position.get(s.id, 0), s.metadata.get(ITEM)) for s in samples if s.epoch == 1]
    items = {item.item_id: item for item in sound_items("jsonl", firsts, check)}
    simulated = log.eval.model.startswith(MOCK_PROVIDER)
    judgments: list[Judgment] = []
    for sample in samples:
        item = items.get(str(sample.id))
        try:
            calls = (
                recorded_judgments(item, sample.metadata[CALLS], sample.epoch - 1) if item else []
            )
        except (KeyError, TypeError, ValueError) as exc:
            message = f"not the pcf/judge task's calls ({exc!r})"
            check.add(position.get(sample.id, 0), f"metadata.{CALLS}", message)
            continue
        judgments += [dataclasses.replace(j, backend="inspect", simulated=simulated) for j in calls]
    if not samples:
        check.add(None, None, "the log has no samples")
    if logged is not None:
        _check_samples(samples, position, logged.task_args.k, log.eval.config.epochs or 1, check)
    check.raise_if_any()
    assert logged is not None  # a problem was raised otherwise
    args = logged.task_args
    dataset = import_dataset(
        list(items.values()),
        session=session,
        actor=actor,
        name=name or log.eval.dataset.name or path.stem,
        fmt="inspect",
        source_path=path,
        seed=args.dataset_seed,
    )
    with tempfile.TemporaryDirectory() as folder:
        recording = Path(folder) / "judgments.jsonl"
        with recording.open("w", encoding="utf-8") as out:
            write_judgments(judgments, out)
        spec = RunSpec(
            dataset.name,
            backend="replay",
            model=log.eval.model,
            replay=recording,
            k=args.k,
            schedule=args.schedule,
            executions=max(s.epoch for s in samples),
            seed=args.seed,
        )
        return judge_run(spec, session=session, actor=actor, progress=progress)
