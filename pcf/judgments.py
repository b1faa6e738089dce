"""Judgments: the parsed result of one call, and the ``judgments.jsonl`` interchange format."""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from pcf.errors import DataError, Problem
from pcf.files import (
    FieldChecker,
    json_line_at,
    json_lines_at,
    open_checked,
    open_data,
    read_json_lines,
)

CallKey = tuple[str, int, int]
"""A call's key: item id, execution, call index."""
INVALID_JUDGMENT = "invalid_judgment"
"""The error of an ok line whose scores, ranking or confidence are unusable."""


@dataclass(frozen=True)
class Judgment:
    """One call's judgment, with keys already mapped back to candidate ids.

    A failed call has ``ok=False``, its ``error`` reason, and empty scores; it is kept so that
    nothing is silently dropped, and it is left out of aggregation. ``backend`` and
    ``simulated`` say what made it (a file's line records them; a replay of a simulated judge's
    file stays simulated); they do not take part in comparisons.
    """

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
        out = {
            "item_id": self.item_id,
            "execution": self.execution,
            "call_index": self.call_index,
            "order": list(self.order),
            "ok": self.ok,
            "error": self.error,
            "factuality": self.factuality,
            "hallucination_risk": self.hallucination_risk,
            "ranking": list(self.ranking),
            "confidence": self.confidence,
        }
        if self.repaired:
            out["repaired"] = list(self.repaired)
        if self.backend is not None:
            out |= {"backend": self.backend, "simulated": self.simulated}
        return out


RECORDED_SETTING = "recorded"
"""A replay run's setting: :func:`recording_provenance` of the recording it answered from."""


def recording_provenance(judgments: Iterable[Judgment]) -> dict[str, Any]:
    """What made a recording: ``{"backends": [...], "simulated": bool}``, the backends its
    lines name and whether any line came from the simulated judge."""
    backends, simulated = set(), False
    for judgment in judgments:
        simulated |= judgment.simulated
        if judgment.backend is not None:
            backends.add(judgment.backend)
    return {"backends": sorted(backends), "simulated": simulated}


def write_judgments(judgments: Iterable[Judgment], out: TextIO) -> int:
    """Write judgments as JSON Lines; returns how many were written."""
    count = 0
    for j in judgments:
        out.write(json.dumps(j.to_dict(), ensure_ascii=False) + "\n")
        count += 1
    return count


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _index(obj: dict, key: str, line: int, problems: list[Problem], file: str) -> int | None:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        problems.append(Problem(file, line, key, f"must be an integer >= 0, got {value!r}"))
        return None
    return value


def _scores(
    obj: dict, key: str, order: tuple[str, ...], upper: float, line: int, file: str
) -> tuple[dict[str, float], list[Problem]]:
    raw = obj.get(key)
    if not isinstance(raw, dict):
        return {}, [Problem(file, line, key, "must be an object {candidate id: number}")]
    problems = []
    if set(raw) != set(order):
        problems.append(
            Problem(
                file, line, key, f"keys {sorted(raw)} differ from the order's ids {sorted(order)}"
            )
        )
    for cid, value in raw.items():
        if not _number(value) or not 0 <= value <= upper:
            problems.append(
                Problem(file, line, f"{key}.{cid}", f"must be in [0, {upper}], got {value!r}")
            )
    return {k: float(v) for k, v in raw.items() if _number(v)}, problems


def _judgment(
    obj: dict, call: tuple[str, int, int], order: tuple[str, ...], line: int, file: str
) -> Judgment:
    """An ok line's judgment, or a failed call naming what makes it unusable."""
    factuality, p1 = _scores(obj, "factuality", order, 10.0, line, file)
    risk, p2 = _scores(obj, "hallucination_risk", order, 1.0, line, file)
    ranking = obj.get("ranking")
    p3 = []
    if not isinstance(ranking, list) or sorted(map(str, ranking)) != sorted(order):
        p3 = [Problem(file, line, "ranking", "must list every id of the order exactly once")]
    confidence = obj.get("confidence")
    if confidence is not None and not (_number(confidence) and 0 <= confidence <= 1):
        p3.append(
            Problem(file, line, "confidence", f"must be in [0, 1] or null, got {confidence!r}")
        )
    if p1 or p2 or p3:
        # An unusable judgment is a failed call, as a run records one: kept with its reason.
        reason = "; ".join(str(p) for p in p1 + p2 + p3)
        return Judgment(*call, order, False, f"{INVALID_JUDGMENT}: {reason}")
    assert isinstance(ranking, list)  # checked with the other fields above
    return Judgment(
        *call,
        order,
        True,
        None,
        factuality,
        risk,
        tuple(ranking),
        None if confidence is None else float(confidence),
        tuple(obj.get("repaired") or ()),
    )


def read_judgments(path: str | Path) -> list[Judgment]:
    """Read ``judgments.jsonl``, checking every field of every line.

    A line marked ok whose scores, risks, ranking or confidence are unusable (a candidate
    missing, a value out of range, a ranking that does not list the order) is read as a failed
    call, as a run would record it: ``error`` is ``invalid_judgment: <file:line: field: what>``.

    Raises:
        DataError: with file, line and field of each problem that leaves a line unreadable (bad
            JSON, a missing or malformed id, execution, call_index, order or ok, a duplicate
            (item_id, execution, call_index), calls of one item over different candidates).
    """
    path, check = open_checked(path)
    out = [j for _, j in _checked(read_json_lines(path, check), check)]
    check.raise_if_any()
    return out


def _call(
    obj: dict, line: int, check: FieldChecker
) -> tuple[CallKey, tuple[str, ...], bool] | None:
    """A line's call (item_id, execution, call_index), order and ok, checked on their own;
    None, with the problems recorded, when the line is unreadable."""
    file, problems = check.file, check.problems
    item_id = check.text(obj, "item_id", line)
    execution = _index(obj, "execution", line, problems, file)
    call_index = _index(obj, "call_index", line, problems, file)
    order = obj.get("order")
    if not (
        isinstance(order, list)
        and len(order) >= 2
        and all(isinstance(c, str) for c in order)
        and len(set(order)) == len(order)
    ):
        problems.append(Problem(file, line, "order", "must list at least 2 distinct candidate ids"))
        return None
    ok = obj.get("ok")
    if not isinstance(ok, bool):
        problems.append(Problem(file, line, "ok", f"must be true or false, got {ok!r}"))
        return None
    if item_id is None or execution is None or call_index is None:
        return None
    return (item_id, execution, call_index), tuple(order), ok


def _checked(
    lines: Iterable[tuple[int, dict]], check: FieldChecker
) -> Iterator[tuple[int, Judgment]]:
    """The judgments of ``lines`` (line number, object), each with its line.

    Each line is checked on its own (:func:`_call`), then against the lines before it of the
    same item: no call twice, the same candidates in every call of an item. An unreadable
    line is left out, with its problems recorded in ``check``.
    """
    file, problems = check.file, check.problems
    seen: dict[CallKey, int] = {}
    item_ids: dict[str, tuple[frozenset[str], int]] = {}
    for line, obj in lines:
        fields = _call(obj, line, check)
        if fields is None:
            continue
        key, order, ok = fields
        if key in seen:
            problems.append(
                Problem(
                    file, line, "call_index", f"duplicate call {key} (first on line {seen[key]})"
                )
            )
            continue
        seen[key] = line
        item_id = key[0]
        ids = frozenset(order)
        first = item_ids.setdefault(item_id, (ids, line))
        if first[0] != ids:
            problems.append(
                Problem(
                    file,
                    line,
                    "order",
                    f"candidates differ from line {first[1]} of item {item_id!r}",
                )
            )
            continue
        backend, simulated = obj.get("backend"), obj.get("simulated", False)
        if not isinstance(backend, str | None):
            problems.append(Problem(file, line, "backend", f"must be a name, got {backend!r}"))
            continue
        if not isinstance(simulated, bool):
            problems.append(
                Problem(file, line, "simulated", f"must be true or false, got {simulated!r}")
            )
            continue
        if not ok:
            error = obj.get("error")
            judgment = Judgment(*key, order, False, str(error or "failed"))
        else:
            judgment = _judgment(obj, key, order, line, file)
        yield line, replace(judgment, backend=backend, simulated=simulated)


class JudgmentLines:
    """A ``judgments.jsonl`` read back a few items at a time, whatever the order of its lines,
    with the checks and problems of :func:`read_judgments`.

    Opening it reads the file once, checking each line on its own and noting where each
    item's lines start (a few bytes a line, plus the item ids). :meth:`read` then reads the
    lines of some items and checks them against each other; :meth:`raise_if_any` raises every
    problem found so far, in line order, as :func:`read_judgments` would.

    Attributes:
        items: each item's number, in order of first appearance (0, 1, ...).
    """

    def __init__(self, path: str | Path) -> None:
        self.path, self._check = open_checked(path)
        self.items: dict[str, int] = {}
        item_of, starts, line_numbers = array("q"), array("q"), array("q")
        for line, start, obj in json_lines_at(self.path, self._check):
            fields = _call(obj, line, self._check)
            if fields is not None:
                item_of.append(self.items.setdefault(fields[0][0], len(self.items)))
                starts.append(start)
                line_numbers.append(line)
        items = np.frombuffer(item_of, dtype=np.int64)
        by_item = np.argsort(items, kind="stable")  # each item's lines together, in file order
        self._bounds = np.searchsorted(items[by_item], np.arange(len(self.items) + 1))
        self._starts = np.frombuffer(starts, dtype=np.int64)[by_item]
        self._lines = np.frombuffer(line_numbers, dtype=np.int64)[by_item]

    def read(self, items: Iterable[int]) -> list[tuple[int, Judgment]]:
        """The judgments of some items (their numbers in :attr:`items`), item after item, each
        item's in file order, with their lines; the problems found go to :meth:`raise_if_any`."""
        lines = []
        with open_data(self.path) as file:
            for item in items:
                span = slice(int(self._bounds[item]), int(self._bounds[item + 1]))
                lines += [
                    (line, json_line_at(file, start))
                    for line, start in zip(
                        self._lines[span].tolist(), self._starts[span].tolist(), strict=True
                    )
                ]
        return list(_checked(lines, self._check))

    def raise_if_any(self) -> None:
        """Raise :class:`DataError` with every problem found so far, in line order."""
        if self._check.problems:
            raise DataError(sorted(self._check.problems, key=lambda p: p.line or 0))
