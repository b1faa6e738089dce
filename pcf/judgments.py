"""Judgments: the parsed result of one call, and the ``judgments.jsonl`` interchange format."""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, TextIO

import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationInfo
from pydantic_core import PydanticCustomError

from pcf.errors import DataError
from pcf.files import (
    FieldChecker,
    Text,
    json_line_at,
    json_lines_at,
    must,
    open_checked,
    open_data,
    read_json_lines,
)
from pcf.run_settings import Recorded

CallKey = tuple[str, int, int]
"""A call's key: item id, execution, call index."""
INVALID_JUDGMENT = "invalid_judgment"
"""The error of an ok line whose scores, ranking or confidence are unusable."""


@dataclass(frozen=True)
class Judgment:
    """One call's judgment in candidate ids. A failed call (``ok=False``, its ``error``) is kept
    but left out of aggregation; ``backend`` and ``simulated`` say what made it (a replay of a
    simulated judge's file stays simulated) and take no part in comparisons."""

    item_id: str
    execution: int
    call_index: int
    order: tuple[str, ...]
    ok: bool
    error: str | None = None
    factuality: dict[str, float] = field(default_factory=dict)
    hallucination_risk: dict[str, float] = field(default_factory=dict)
    ranking: tuple[str, ...] = ()
    confidence: float | None = None
    repaired: tuple[str, ...] = ()
    backend: str | None = field(default=None, compare=False)
    simulated: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The judgment as one ``judgments.jsonl`` object."""
        out = asdict(self) | {
            key: list(getattr(self, key)) for key in ("order", "ranking", "repaired")
        }
        if not self.repaired:
            del out["repaired"]
        if self.backend is None:
            del out["backend"], out["simulated"]
        return out


def recording_provenance(judgments: Iterable[Judgment]) -> Recorded:
    """What made a recording: its backends, and whether any line was simulated (a replay run
    keeps it in its settings)."""
    made = [(j.backend, j.simulated) for j in judgments]
    backends = sorted({backend for backend, _ in made if backend is not None})
    return Recorded(backends=backends, simulated=any(simulated for _, simulated in made))


def write_judgments(judgments: Iterable[Judgment], out: TextIO) -> int:
    """Write judgments as JSON Lines; returns how many were written."""
    lines = [json.dumps(j.to_dict(), ensure_ascii=False) + "\n" for j in judgments]
    out.writelines(lines)
    return len(lines)


Index = Annotated[int, Field(strict=True, ge=0, description="must be an integer >= 0, got {got}")]


class _Call(BaseModel):
    """What makes a line readable: which call it is, over which candidates, whether it answered."""

    item_id: Text
    execution: Index
    call_index: Index
    order: Annotated[
        tuple[str, ...],
        must(
            lambda v: (
                isinstance(v, list)
                and all(isinstance(c, str) for c in v)
                and len(set(v)) == len(v) >= 2
            ),
            "must list at least 2 distinct candidate ids",
        ),
    ]
    ok: bool = Field(strict=True, description="must be true or false, got {got}")
    error: Any = None
    backend: str | None = Field(None, strict=True)
    simulated: bool = Field(False, strict=True, description="must be true or false, got {got}")

    @property
    def key(self) -> CallKey:
        return self.item_id, self.execution, self.call_index


def _same_ids(scores: dict[str, float], info: ValidationInfo) -> dict[str, float]:
    """``scores`` if they score the candidates of the line's order (the context's ``order``)."""
    order = (info.context or {})["order"]
    if set(scores) != set(order):
        message = f"keys {sorted(scores)} differ from the order's ids {sorted(order)}"
        raise PydanticCustomError("pcf", message)
    return scores


def _ranks_order(ranking: Any, info: ValidationInfo) -> Any:
    order = (info.context or {})["order"]
    if not isinstance(ranking, list) or sorted(map(str, ranking)) != sorted(order):
        raise PydanticCustomError("pcf", "must list every id of the order exactly once")
    return ranking


Score = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
_SCORES = (
    must(lambda v: isinstance(v, dict), "must be an object {candidate id: number}"),
    AfterValidator(_same_ids),
)


class _Answer(BaseModel):
    """An ok line's judgment, checked against its order (the context's ``order``)."""

    factuality: Annotated[dict[str, Annotated[Score, Field(le=10)]], *_SCORES] = Field(
        description="must be in [0, 10.0], got {got}"
    )
    hallucination_risk: Annotated[dict[str, Annotated[Score, Field(le=1)]], *_SCORES] = Field(
        description="must be in [0, 1.0], got {got}"
    )
    ranking: Annotated[tuple[Any, ...], BeforeValidator(_ranks_order)]
    confidence: Annotated[float | None, Field(strict=True, ge=0, le=1, allow_inf_nan=False)] = (
        Field(None, description="must be in [0, 1] or null, got {got}")
    )
    repaired: Annotated[tuple[str, ...], BeforeValidator(lambda v: v or ())] = ()


def _judgment(obj: dict, call: _Call, line: int, file: str) -> Judgment:
    """An ok line's judgment, or a failed call naming what makes it unusable."""
    check = FieldChecker(file)
    answer = check.validate(_Answer, obj, line, order=call.order)
    if answer is None:
        # An unusable judgment is a failed call, as a run records one: kept with its reason.
        reason = "; ".join(map(str, check.problems))
        return Judgment(*call.key, call.order, False, f"{INVALID_JUDGMENT}: {reason}")
    return Judgment(*call.key, call.order, True, None, **vars(answer))


def read_judgments(path: str | Path) -> list[Judgment]:
    """Read ``judgments.jsonl``, checking every field of every line: an ok line with unusable
    scores, ranking or confidence is a failed call (``invalid_judgment: <file:line: field:
    what>``), as a run records one; an unreadable line (bad JSON or call fields, a duplicate
    call, an item's calls over different candidates) is a problem of the DataError raised."""
    path, check = open_checked(path)
    out = [j for _, j in _checked(read_json_lines(path, check), check)]
    check.raise_if_any()
    return out


def _checked(
    lines: Iterable[tuple[int, dict]], check: FieldChecker
) -> Iterator[tuple[int, Judgment]]:
    """The judgments of ``(line, object)`` with their lines, each checked on its own and against
    its item's lines before it; an unreadable line's problems go to ``check``."""
    seen: dict[CallKey, int] = {}
    item_ids: dict[str, tuple[frozenset[str], int]] = {}
    for line, obj in lines:
        call = check.validate(_Call, obj, line)
        if call is None:
            continue
        key = call.key
        if (earlier := seen.setdefault(key, line)) != line:
            check.add(line, "call_index", f"duplicate call {key} (first on line {earlier})")
            continue
        ids = frozenset(call.order)
        first = item_ids.setdefault(call.item_id, (ids, line))
        if first[0] != ids:
            message = f"candidates differ from line {first[1]} of item {call.item_id!r}"
            check.add(line, "order", message)
            continue
        if not call.ok:
            judgment = Judgment(*key, call.order, False, str(call.error or "failed"))
        else:
            judgment = _judgment(obj, call, line, check.file)
        yield line, replace(judgment, backend=call.backend, simulated=call.simulated)


class JudgmentLines:
    """A ``judgments.jsonl`` read back a few items at a time, whatever the order of its lines,
    with the checks of :func:`read_judgments`: opening it notes where each line starts (a few
    bytes a line), by item (:attr:`items`: each item's number, in order of first appearance)."""

    def __init__(self, path: str | Path) -> None:
        self.path, self._check = open_checked(path)
        self.items: dict[str, int] = {}
        item_of, where = array("q"), array("q")  # where: (line, start) of each line, flat
        for line, start, obj in json_lines_at(self.path, self._check):
            call = self._check.validate(_Call, obj, line)
            if call is not None:
                item_of.append(self.items.setdefault(call.item_id, len(self.items)))
                where.extend((line, start))
        items = np.frombuffer(item_of, dtype=np.int64)
        by_item = np.argsort(items, kind="stable")  # each item's lines together, in file order
        self._bounds = np.searchsorted(items[by_item], np.arange(len(self.items) + 1))
        self._where = np.frombuffer(where, dtype=np.int64).reshape(-1, 2)[by_item]

    def read(self, items: Iterable[int]) -> list[tuple[int, Judgment]]:
        """The judgments of some items (numbers of :attr:`items`), with their lines, in order."""
        lines = []
        with open_data(self.path) as file:
            for item in items:
                span = slice(int(self._bounds[item]), int(self._bounds[item + 1]))
                lines += [(n, json_line_at(file, at)) for n, at in self._where[span].tolist()]
        return list(_checked(lines, self._check))

    def raise_if_any(self) -> None:
        """Raise :class:`DataError` with every problem found so far, in line order."""
        if self._check.problems:
            raise DataError(sorted(self._check.problems, key=lambda p: p.line or 0))
