"""Recorded pairwise judge outputs in both orders (JudgeBench, LLMBar), for ``pcf replay``.

Readers return :class:`RecordedPair` rows, or raise one :class:`~pcf.errors.DataError` with every
problem (file, line or record, field).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from pcf.errors import DataError, Problem
from pcf.files import Text, must, open_checked, read_json_document, read_json_lines
from pcf.items import JudgeBenchLabel, judgebench_bucket
from pcf.pairwise import bucket_scores, official_outcome
from pcf.prompts import TIE

FIRST = "first"
SECOND = "second"
_OTHER = {FIRST: SECOND, SECOND: FIRST}

# JudgeBench decisions, per order, mapped to the original frame.
_JUDGEBENCH_ORDER1 = {"A>B": FIRST, "B>A": SECOND, "A=B": TIE, None: None}
_JUDGEBENCH_ORDER2 = {"A>B": SECOND, "B>A": FIRST, "A=B": TIE, None: None}
# LLMBar winners are already mapped back to the original output index.
_LLMBAR_LABEL = {"1": FIRST, "2": SECOND, 1: FIRST, 2: SECOND}
_LLMBAR_WINNER: dict[object, str | None] = {**_LLMBAR_LABEL, None: None}


@dataclass(frozen=True)
class RecordedPair:
    """One pair judged in original order (``d1``) and swapped (``d2``), the correct member
    (``label``) and both decisions in the pair's ORIGINAL frame: ``"first"`` or ``"second"``
    names the member whichever slot it was shown in; ``"tie"``; None for no decision."""

    pair_id: str
    bucket: str
    label: str
    d1: str | None
    d2: str | None


def recorded_outcome(label: str, d1: str | None, d2: str | None) -> int:
    """JudgeBench's official outcome (:func:`pcf.pairwise.official_outcome`) of a recorded
    pair whose correct member is ``label`` (``first`` or ``second``)."""
    return official_outcome(label, _OTHER[label], d1, d2)


class _Decision(BaseModel):
    decision: Annotated[
        str | None,
        must(
            lambda v: v in ("A>B", "B>A", "A=B", None),
            "must be 'A>B', 'B>A', 'A=B' or null, got {got}",
        ),
    ]


_OneOrder = Annotated[
    _Decision | None,
    must(
        lambda v: v is None or (isinstance(v, dict) and "decision" in v),
        "must be null or an object with 'decision'",
    ),
]


class _JudgeBenchOutput(BaseModel):
    """A line of a JudgeBench outputs file: a pair judged in order (A, B), then (B, A)."""

    pair_id: Text
    source: Text
    label: JudgeBenchLabel
    judgments: Annotated[
        tuple[_OneOrder, _OneOrder],
        must(
            lambda v: isinstance(v, list) and len(v) == 2,
            "must be a list of 2 judgments, order (A,B) then (B,A)",
        ),
    ]


def read_judgebench_outputs(path: str | Path) -> list[RecordedPair]:
    """Read a JudgeBench ``outputs/*.jsonl`` file: ``judgments[1]``, the swapped order, is
    flipped back to the original frame; a null judgment or decision is no decision."""
    path, check = open_checked(path)
    pairs: list[RecordedPair] = []
    seen: dict[str, int] = {}
    for line, obj in read_json_lines(path, check):
        row = check.validate(_JudgeBenchOutput, obj, line)
        if row is None:
            continue
        if (first := seen.setdefault(row.pair_id, line)) != line:
            check.add(line, "pair_id", f"duplicate id {row.pair_id!r} (first on line {first})")
            continue
        d1, d2 = (order.decision if order else None for order in row.judgments)
        label = FIRST if row.label == "A>B" else SECOND
        bucket = judgebench_bucket(row.source)
        pairs.append(
            RecordedPair(row.pair_id, bucket, label, _JUDGEBENCH_ORDER1[d1], _JUDGEBENCH_ORDER2[d2])
        )
    check.raise_if_any()
    return pairs


def read_llmbar_results(
    path: str | Path, judge: str | None = None, strategy: str | None = None
) -> list[RecordedPair]:
    """Read LLMBar ``result.json`` files: one file, or a directory's
    ``evaluators/<judge>/<strategy>/result.json`` where ``judge`` and ``strategy`` must leave
    exactly one run. The bucket is the subset path below the ``LLMBar`` folder (``Natural``,
    ``Adversarial/Neighbor``), else the folder holding ``evaluators``; pair ids are
    ``<bucket>#<record>``, and a record's problems name its number (from 1) as the line.
    """
    files = _llmbar_files(Path(path), judge, strategy)
    problems: list[Problem] = []
    pairs: list[RecordedPair] = []
    for file in files:
        try:
            pairs.extend(_read_llmbar_file(file))
        except DataError as exc:
            problems.extend(exc.problems)
    if problems:
        raise DataError(problems)
    return pairs


def _run_of(file: Path) -> tuple[str, str] | None:
    """(judge, strategy) of a result.json in the ``evaluators/<judge>/<strategy>`` layout."""
    parts = file.parts
    if len(parts) >= 4 and parts[-4] == "evaluators":
        return parts[-3], parts[-2]
    return None


def _llmbar_files(root: Path, judge: str | None, strategy: str | None) -> list[Path]:
    def fits(run: tuple[str, str]) -> bool:
        return all(w in (None, r) for w, r in zip((judge, strategy), run, strict=True))

    if root.is_file():
        run = _run_of(root)
        if run is not None and not fits(run):
            message = f"is the run {'/'.join(run)}, not {judge or '*'}/{strategy or '*'}"
            raise DataError([Problem(str(root), None, None, message)])
        return [root]
    if root.exists() and not root.is_dir():
        open_checked(root)  # a FIFO, a device: refused with what it is
    if not root.is_dir():
        raise DataError([Problem(str(root), None, None, "file or directory not found")])
    runs = {f: run for f in sorted(root.rglob("result.json")) if (run := _run_of(f)) is not None}
    chosen = {f: run for f, run in runs.items() if fits(run)}
    names = sorted({"/".join(run) for run in chosen.values()})
    if not names:
        available = ", ".join(sorted({"/".join(run) for run in runs.values()})) or "none"
        message = (
            f"no evaluators/{judge or '<judge>'}/{strategy or '<strategy>'}/result.json here; "
            f"runs found: {available}"
        )
        raise DataError([Problem(str(root), None, None, message)])
    if len(names) > 1:
        message = (
            f"holds {len(names)} judge/strategy runs ({', '.join(names)}); "
            "pick one with --judge and --strategy"
        )
        raise DataError([Problem(str(root), None, None, message)])
    return list(chosen)


def _llmbar_bucket(file: Path) -> str:
    subset = file.parts[:-4] if _run_of(file) is not None else file.parts[:-1]
    if "LLMBar" in subset:
        last = len(subset) - 1 - subset[::-1].index("LLMBar")
        below = subset[last + 1 :]
        if below:
            return "/".join(below)
    return subset[-1] if subset else file.stem


def _is_winner(value: object) -> bool:
    """A value LLMBar uses for an output index: "1", "2", 1, 2 or None (bools excluded)."""
    return type(value) in (str, int, type(None)) and value in _LLMBAR_WINNER


class _Swap(BaseModel):
    winner: Annotated[Any, must(_is_winner, "must be '1', '2' or null, got {got}")]


_SwapEntry = Annotated[
    _Swap, must(lambda v: isinstance(v, dict) and "winner" in v, "missing, or has no 'winner'")
]


class _Swaps(BaseModel):
    original: _SwapEntry = Field(alias="swap = False")
    swapped: _SwapEntry = Field(alias="swap = True")


class _LLMBarRecord(BaseModel):
    """A record of an LLMBar ``result.json``; its last result holds the winners of both orders."""

    label: Annotated[
        Any, must(lambda v: v is not None and _is_winner(v), "must be 1 or 2, got {got}")
    ]
    results: Annotated[
        dict[int, _Swaps],  # the last result, keyed -1: its problems name results[-1]
        BeforeValidator(lambda v: {-1: v[-1]}),
        must(
            lambda v: isinstance(v, list) and v and isinstance(v[-1], dict),
            "must be a list whose last entry holds the two swap orders",
        ),
    ]


def _read_llmbar_file(file: Path) -> list[RecordedPair]:
    """The pairs of one ``result.json``; a record's problems name its number as the line."""
    path, check = open_checked(file)
    rows = read_json_document(path, check)
    if not isinstance(rows, list):
        message = f"expected a JSON list of records, got {type(rows).__name__}"
        raise DataError([Problem(str(path), None, None, message)])
    bucket = _llmbar_bucket(path)
    pairs: list[RecordedPair] = []
    for record, row in enumerate(rows, start=1):
        fields = check.validate(_LLMBarRecord, row, record, note=f"record {record}: ")
        if fields is not None:
            swaps = fields.results[-1]
            winners = (_LLMBAR_WINNER[swap.winner] for swap in (swaps.original, swaps.swapped))
            label = _LLMBAR_LABEL[fields.label]
            pairs.append(RecordedPair(f"{bucket}#{record}", bucket, label, *winners))
    check.raise_if_any()
    return pairs


def _agree_or_decisive(d1: str | None, d2: str | None) -> str | None:
    if d1 == d2:
        return d1
    decisive = [d for d in (d1, d2) if d in (FIRST, SECOND)]
    return decisive[0] if len(decisive) == 1 else None


SWAP_RULES: dict[str, Callable[[str | None, str | None], str | None]] = {
    "order1": lambda d1, d2: d1,
    "order2": lambda d1, d2: d2,
    "agree_only": lambda d1, d2: d1 if d1 == d2 else None,
    "agree_or_decisive": _agree_or_decisive,
}
"""Swap-consensus rules, (d1, d2) to one decision (None = abstain). ``agree_or_decisive`` also
takes the one order's pick when the other said tie or nothing: its accuracy is JudgeBench's
official score by construction."""


def replay_summary(pairs: Sequence[RecordedPair]) -> dict:
    """Scores and position-bias counts of recorded pairs, rates in % of all pairs (ties and
    missing decisions count as wrong): the official score and counts, per bucket and macro;
    ``position_consistency`` (a double tie counts, two missing decisions do not, unlike
    LLMBar's "equal"); ``primacy`` / ``recency`` (the member shown first / second won in both
    orders); each order's and each :data:`SWAP_RULES` rule's accuracy and abstentions."""
    if not pairs:
        raise ValueError("no recorded pairs to summarise")
    n = len(pairs)
    outcomes = [recorded_outcome(p.label, p.d1, p.d2) for p in pairs]
    scores = bucket_scores(outcomes, [p.bucket for p in pairs])
    overall = scores["overall"]
    bias = Counter((p.d1, p.d2) for p in pairs)
    rule_decisions = {name: [rule(p.d1, p.d2) for p in pairs] for name, rule in SWAP_RULES.items()}
    return {
        "pairs": n,
        "judgebench_official": overall["score"],
        "official_counts": {k: overall[k] for k in ("correct", "incorrect", "tie")},
        "buckets": scores["buckets"],
        "macro_accuracy": scores["macro"],
        "position_consistency": 100 * sum(p.d1 == p.d2 and p.d1 is not None for p in pairs) / n,
        "primacy": bias[(FIRST, SECOND)],
        "recency": bias[(SECOND, FIRST)],
        "order1_accuracy": 100 * sum(p.d1 == p.label for p in pairs) / n,
        "order2_accuracy": 100 * sum(p.d2 == p.label for p in pairs) / n,
        "rules": {
            name: 100 * sum(d == p.label for d, p in zip(ds, pairs, strict=True)) / n
            for name, ds in rule_decisions.items()
        },
        "rule_abstentions": {
            name: sum(d not in (FIRST, SECOND) for d in ds) for name, ds in rule_decisions.items()
        },
    }
