"""The plan of a run: which calls it makes (an item under one ordering, with its slot keys),
their prompts and their content keys, a chunk of items at a time."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pcf.files import DATA_FILE, InputFileError, open_input
from pcf.items import Item
from pcf.judges import judge_server
from pcf.orderings import canonical_order, schedule
from pcf.pairwise import is_ballpark_question, needs_confirmation
from pcf.prompts import Rendered, neutral_keys, render_listwise, render_pairwise
from pcf.runs.spec import RunSpec
from pcf.store import Call, datasets

Slot = tuple[int, int, int]
"""Where a call sits in a run: (item database id, execution, call index)."""


@dataclass(frozen=True)
class PlannedCall:
    """One call to make: an item under one ordering, with its slot keys."""

    item: Item
    item_db_id: int
    execution: int
    call_index: int
    order: tuple[str, ...]
    keys: tuple[str, ...] | None  # None: the default slot keys A, B, ...
    repeat_index: int
    pairwise: bool

    @property
    def slot(self) -> Slot:
        """Where the call sits in its run."""
        return self.item_db_id, self.execution, self.call_index

    def render(self, *, structured: bool = True) -> Rendered:
        """The prompt of this call; not ``structured``: without the answer's schema, so that
        its absence is part of the content key and of the recorded request too."""
        render = render_pairwise if self.pairwise else render_listwise
        rendered = render(self.item, self.order, self.keys)
        return rendered if structured else replace(rendered, schema=None)


Prepared = tuple[PlannedCall, Rendered, str]
"""A planned call with its rendered prompt and content key."""


def in_chunks(items: Iterable[Item]) -> Iterator[list[Item]]:
    """``items`` a chunk of :data:`~pcf.store.datasets.ITEM_CHUNK` at a time."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, datasets.ITEM_CHUNK)):
        yield chunk


def plan(
    items: Iterable[Item], db_ids: Mapping[str, int], spec: RunSpec, *, dataset_seed: int = 0
) -> list[PlannedCall]:
    """Every call of the run except APOCJudge's confirmation calls, which depend on answers.

    Canonical orders come from the dataset's seed, so every run of a dataset shares them;
    ``repeat_index`` counts earlier calls of the item with the same ordering, so identical
    prompts stay distinct calls in the cache."""
    out: list[PlannedCall] = []
    for item in items:
        seen: Counter[tuple[str, ...]] = Counter()
        if spec.protocol == "apoc":
            if len(item.candidates) != 2:
                raise ValueError(
                    f"item {item.item_id}: apoc needs pairs, got {len(item.candidates)}"
                )
            first = canonical_order(item.candidate_ids, dataset_seed, item.item_id)
            orders = [first, first[::-1]]
            executions = 1
        else:
            orders = schedule(
                spec.schedule,
                item.candidate_ids,
                spec.k,
                dataset_seed=dataset_seed,
                item_id=item.item_id,
                seed=spec.seed,
            )
            executions = spec.executions
        for execution in range(executions):
            for call_index, order in enumerate(orders):
                out.append(
                    PlannedCall(
                        item,
                        db_ids[item.item_id],
                        execution,
                        call_index,
                        order,
                        None,
                        seen[order],
                        spec.protocol == "apoc",
                    )
                )
                seen[order] += 1
    return out


def content_key(
    backend: str, model: str, rendered: Rendered, spec: RunSpec, repeat: int, *, server: bool = True
) -> str:
    """The cache key of a call: backend, model, prompt, sampling settings, repeat index, and
    what else makes another judge: the simulated judge's seed, a replay's recording, a
    provider's other server (``server=False``: the key from before servers were part of it)."""
    payload = [
        backend,
        model,
        rendered.system,
        rendered.user,
        rendered.schema,
        spec.temperature,
        spec.max_tokens,
        repeat,
    ]
    if backend == "simulated":
        payload.append(spec.seed)
    elif backend == "replay" and spec.replay is not None:
        payload.append(recording_digest(Path(spec.replay)))
    elif server and (address := judge_server(backend, spec.base_url)) is not None:
        payload.append(address)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def recording_digest(path: Path) -> str:
    """The SHA-256 of a replay recording, read once per version of the file."""
    try:
        stat = path.stat()
        return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError as exc:
        raise ValueError(f"replay recording {path}: {exc.strerror or exc}") from exc
    except InputFileError as exc:  # not a regular file, or over the cap
        raise ValueError(f"replay recording {exc}") from exc


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, size: int, modified_ns: int) -> str:
    """SHA-256 of a file's bytes; ``size`` and ``modified_ns`` key the cache to its version."""
    digest = hashlib.sha256()
    with open_input(path, DATA_FILE) as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def confirmations(
    planned: Sequence[PlannedCall], stored: dict[tuple[int, int, int], Call], spec: RunSpec
) -> list[PlannedCall]:
    """APOCJudge's confirmation calls not stored yet where the first two answers need one:
    call 3, the first order again with seeded neutral keys."""
    out = []
    for first in (p for p in planned if p.call_index == 0):
        if (first.item_db_id, 0, 2) in stored:
            continue
        calls = (stored.get((first.item_db_id, 0, i)) for i in (0, 1))
        verdicts = (None if c is None else c.verdict() for c in calls)
        ballpark = is_ballpark_question(first.item.prompt)
        if needs_confirmation(*verdicts, ballpark=ballpark, guard=spec.ballpark_guard):
            keys = neutral_keys(2, "apoc", spec.seed, first.item.item_id)
            out.append(PlannedCall(first.item, first.item_db_id, 0, 2, first.order, keys, 0, True))

    return out
