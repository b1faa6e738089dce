"""Items, candidates and the dataset loaders (RewardBench 2, JudgeBench, items.jsonl, CSV); rows
read elsewhere (:mod:`pcf.connectors.hf_datasets`) pass :func:`items_from_rows`.

Every loader reads the whole file and raises one :class:`~pcf.errors.DataError` with every
problem (file, line, field), so a bad file is never half used. What any file may hold is checked
in :mod:`pcf.files`; an item has 2 to :data:`MAX_CANDIDATES` candidates, none with a reserved id.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from pcf.choices import ITEM_FORMATS
from pcf.errors import DataError
from pcf.files import (
    FieldChecker,
    Limit,
    Text,
    capped,
    must,
    open_checked,
    open_data,
    read_json_lines,
    read_rows,
)

FORMAT_NAMES = {
    "rewardbench2": "RewardBench 2",
    "judgebench": "JudgeBench",
    "jsonl": "items.jsonl",
    "csv": "CSV (a row per candidate)",
}
"""What each of :data:`ITEM_FORMATS` is called where a person reads it."""
CSV_COLUMNS = ("item_id", "prompt", "candidate_id", "text", "gold", "bucket")
JUDGEBENCH_BUCKETS = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")
MAX_CANDIDATES = 26
"""One default slot key (A to Z) per candidate: see :data:`pcf.prompts.DEFAULT_KEYS`."""
NONE_CORRECT = "none_correct"
"""An annotator's or reviewer's choice: no candidate is correct."""
CANNOT_TELL = "cannot_tell"
"""An annotator's choice: they cannot tell which candidate is correct."""
RESERVED_CANDIDATE_IDS = (NONE_CORRECT, CANNOT_TELL)
"""An annotator's choices besides the candidates, so no candidate may be called that."""
PROMPT_CHARS = Limit("PCF_MAX_PROMPT_CHARS", 200_000, "characters")
CANDIDATE_CHARS = Limit("PCF_MAX_CANDIDATE_CHARS", 100_000, "characters")
"""The longest candidate answer: every judge call quotes each candidate."""
Prompt = Annotated[Text, capped(PROMPT_CHARS)]
Answer = Annotated[Text, capped(CANDIDATE_CHARS)]
JudgeBenchLabel = Annotated[
    str, must(lambda v: v in ("A>B", "B>A"), "must be 'A>B' or 'B>A', got {got}")
]
PREVIEW_WORDS = 8


@dataclass(frozen=True)
class Candidate:
    """One candidate answer with a stable id."""

    id: str
    text: str


@dataclass(frozen=True)
class Item:
    """A user prompt and its candidate answers, with an optional gold id and bucket."""

    item_id: str
    prompt: str
    candidates: tuple[Candidate, ...]
    gold: str | None = None
    bucket: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def candidate_ids(self) -> tuple[str, ...]:
        """Candidate ids in the order the item lists them."""
        return tuple(c.id for c in self.candidates)

    def text_of(self, candidate_id: str) -> str:
        """The text of one candidate."""
        for c in self.candidates:
            if c.id == candidate_id:
                return c.text
        raise KeyError(f"item {self.item_id} has no candidate {candidate_id!r}")

    def to_dict(self) -> dict[str, Any]:
        """The item in the ``items.jsonl`` interchange form."""
        out = asdict(self) | {"candidates": [asdict(c) for c in self.candidates]}
        del out["metadata"]
        return out


def letter_labels(candidate_ids: Sequence[str]) -> dict[str, str]:
    """``{candidate id: "A"}`` in listing order; ``#1``, ``#2``... beyond 26 candidates."""
    letters = string.ascii_uppercase
    many = len(candidate_ids) > len(letters)
    return {cid: f"#{i + 1}" if many else letters[i] for i, cid in enumerate(candidate_ids)}


def candidate_labels(item: Item) -> dict[str, str]:
    """Short labels of the item's candidates in listing order: ``A``, ``B``, ... (``#27``...)."""
    return letter_labels(item.candidate_ids)


def candidate_titles(item: Item, words: int = PREVIEW_WORDS) -> dict[str, str]:
    """``A · The first words of the answer…`` per candidate (:func:`distinguishing_words`)."""
    labels = candidate_labels(item)
    shown = distinguishing_words({c.id: c.text for c in item.candidates}, words)
    return {c.id: f"{labels[c.id]} · {shown[c.id]}" for c in item.candidates}


_BLOCK_MARK = re.compile(r"^(?:#+|>+|\|)$")
_EMPHASIS_AROUND = re.compile(r"^[*_`]+|[*_`]+(?=\W*$)")


def _words(text: str) -> list[str]:
    """The words of ``text`` without Markdown's heading and quote marks and the emphasis marks
    around a word (``**Paris**,`` reads ``Paris,``; ``deadline_exceeded`` stays)."""
    words = (_EMPHASIS_AROUND.sub("", word) for word in text.split() if not _BLOCK_MARK.match(word))
    return [word for word in words if word]


def distinguishing_words(texts: Mapping[str, str], words: int = PREVIEW_WORDS) -> dict[str, str]:
    """A one-line preview of each text that tells it from the others: its first ``words`` words
    when they already differ from every other text's, else ``words`` words from the last word
    it shares with the text most like it (``…list of years from 2000 to 2010, then…``)."""
    split = {key: _words(text) for key, text in texts.items()}
    previews = {}
    for key, mine in split.items():
        shared = max((_shared_words(mine, split[k]) for k in split if k != key), default=0)
        start = 0 if shared < words else min(shared, len(mine)) - 1
        start = max(0, min(start, len(mine) - words))
        shown = " ".join(mine[start : start + words])
        previews[key] = ("…" if start else "") + shown + ("…" if start + words < len(mine) else "")
    return previews


def _shared_words(first: Sequence[str], second: Sequence[str]) -> int:
    """How many words two word lists share from their start."""
    return next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
        min(len(first), len(second)),
    )


def judgebench_bucket(source: str) -> str:
    """JudgeBench's reporting bucket for a row's ``source`` (all mmlu-pro-* share one)."""
    return "mmlu-pro" if source.startswith("mmlu-pro") else source


def load_dataset(
    fmt: str, path: str | Path, *, subset: str | None = None, limit: int | None = None
) -> list[Item]:
    """A dataset file in one of :data:`ITEM_FORMATS`: the items of one ``subset`` (bucket), the
    first ``limit`` of them; DataError naming file, line and field of every problem."""
    return list(stream_dataset(fmt, path, subset=subset, limit=limit))


def stream_dataset(
    fmt: str, path: str | Path, *, subset: str | None = None, limit: int | None = None
) -> Iterator[Item]:
    """:func:`load_dataset` an item at a time (a row-per-item file is read a row at a time, so
    a large file is never held whole): every row is still checked, past ``limit`` too, and the
    DataError comes once the file is read, after the sound items."""
    if fmt not in ITEM_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(ITEM_FORMATS)}")
    path, check = open_checked(path)
    if fmt == "csv":
        items: Iterator[Item] = (i for i in _csv_items(path, check) if subset in (None, i.bucket))
    else:  # a row per item, in a JSON Lines, Parquet or CSV file
        items = _row_items(fmt, read_rows(path, check), check, subset)
    kept = 0
    for item in items:  # every row read and checked, past the limit too
        if limit is None or kept < limit:
            kept += 1
            yield item


def load_any(
    fmt: str | None, path: str | Path, *, subset: str | None = None, limit: int | None = None
) -> tuple[list[Item], str]:
    """:func:`load_dataset` in ``fmt``, or else in the format the file's columns fit
    (:func:`recognise_format`), and the format read. Its DataError notes (``__notes__``) the
    format it recognised, or, when the file's columns fit another than ``fmt``, that one."""
    items, chosen = stream_any(fmt, path, subset=subset, limit=limit)
    return list(items), chosen


def stream_any(
    fmt: str | None, path: str | Path, *, subset: str | None = None, limit: int | None = None
) -> tuple[Iterator[Item], str]:
    """:func:`load_any` an item at a time (:func:`stream_dataset`)."""
    chosen = fmt or recognise_format(path)
    return _noted(
        stream_dataset(chosen, path, subset=subset, limit=limit), fmt, chosen, path
    ), chosen


def _noted(items: Iterator[Item], fmt: str | None, chosen: str, path: str | Path) -> Iterator[Item]:
    """``items``, their DataError noted with the format recognised or the one that fits."""
    try:
        yield from items
    except DataError as exc:
        if fmt is None:
            exc.add_note(read_as(chosen, recognised=True))
        elif (fits := _fitting(path)) not in (None, chosen):
            exc.add_note(f"its columns fit {FORMAT_NAMES[fits]}: choose {fits}")
        raise


def _fitting(path: str | Path) -> str | None:
    """The one format the file's columns fit, else None."""
    try:
        return recognise_format(path)
    except ValueError:  # none fits, or several
        return None


def read_as(fmt: str, *, recognised: bool) -> str:
    """What a person is told of the format a file was read in."""
    return f"read as {FORMAT_NAMES[fmt]}" + (", recognised by its columns" if recognised else "")


def file_columns(path: str | Path) -> list[str]:
    """The columns of a data file: a CSV's header, a Parquet file's schema, or the fields of a
    JSON Lines file's first object (none when it has no readable row)."""
    path, check = open_checked(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415 - only Parquet needs it

        with open_data(path) as fh:
            try:
                return list(pq.ParquetFile(fh, pre_buffer=False).schema_arrow.names)
            except (OSError, ValueError) as exc:  # pyarrow's errors are among these
                check.add(None, None, f"not a readable Parquet file: {exc}")
                check.raise_if_any()
    first = next(read_rows(path, check), None)  # a CSV's rows hold its header's columns
    return [] if first is None else list(first[1])


def recognise_format(path: str | Path) -> str:
    """The format of :data:`ITEM_FORMATS` whose fields the file's columns (:func:`file_columns`)
    hold; a CSV may hold any, another file a layout of a row per item. A file without a
    readable row is read by its suffix (CSV, else JSON Lines), to name its problems. ValueError
    when no format fits or several do, naming them and the fields each lacks."""
    path = Path(path)
    columns = file_columns(path)
    csv = path.suffix.lower() == ".csv"
    if not columns:
        return "csv" if csv else "jsonl"
    return recognise(columns, ITEM_FORMATS if csv else tuple(ROW_LAYOUTS), source=path.name)


def recognise(columns: Iterable[str], formats: Sequence[str], *, source: str) -> str:
    """The one of ``formats`` whose fields (:func:`format_fields`) ``columns`` hold; ValueError
    naming the candidates when several fit, and what each lacks when none does."""
    held = set(columns)
    fits = [fmt for fmt in formats if held >= set(format_fields(fmt))]
    if len(fits) == 1:
        return fits[0]
    if fits:
        named = ", ".join(f"{FORMAT_NAMES[f]} ({f})" for f in fits)
        raise ValueError(f"{source}: its columns fit several formats: {named}; choose one")
    lacks = "; ".join(
        f"{FORMAT_NAMES[f]} ({f}) lacks {', '.join(c for c in format_fields(f) if c not in held)}"
        for f in formats
    )
    raise ValueError(f"{source}: columns {sorted(held)} fit no known format: {lacks}")


def format_fields(fmt: str) -> tuple[str, ...]:
    """The columns a file in format ``fmt`` must have: its rows' required fields."""
    if fmt == "csv":
        return CSV_COLUMNS[:4]
    model = _ROW_MODELS[fmt]
    return tuple(f.alias or name for name, f in model.model_fields.items() if f.is_required())


def _sound(check: FieldChecker, line: int, seen: dict[str, int], item: Item) -> bool:
    """Whether ``item`` passes the checks across fields and against the items ``seen`` before."""
    before, ids = len(check.problems), item.candidate_ids
    if (first := seen.setdefault(item.item_id, line)) != line:
        check.add(line, "item_id", f"duplicate id {item.item_id!r} (first on line {first})")
    if len(ids) < 2:
        check.add(line, "candidates", f"needs at least 2 candidates, got {len(ids)}")
    if len(ids) > MAX_CANDIDATES:
        message = f"at most {MAX_CANDIDATES} candidates (slot keys A to Z), got {len(ids)}"
        check.add(line, "candidates", message)
    for dup in sorted(i for i, n in Counter(ids).items() if n > 1):
        check.add(line, "candidates.id", f"duplicate candidate id {dup!r}")
    for reserved in sorted(set(ids) & set(RESERVED_CANDIDATE_IDS)):
        check.add(line, "candidates.id", f"{reserved!r} is an annotator's choice, not an id")
    if item.gold is not None and item.gold not in ids:
        check.add(line, "gold", f"{item.gold!r} is not one of the candidate ids {list(ids)}")
    return len(check.problems) == before


def item_listing(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Each item's candidate ids, from an ``items.jsonl`` checked as a load checks it."""
    path, check = open_checked(path)
    rows = read_json_lines(path, check)
    listing = {item.item_id: item.candidate_ids for item in sound_items("jsonl", rows, check)}
    check.raise_if_any()
    return listing


def _is_object(value: object) -> bool:
    return isinstance(value, dict)


class _CandidateRow(BaseModel):
    """A candidate of a line of ``items.jsonl``."""

    id: Text
    text: Answer


class _ItemLine(BaseModel):
    """A line of ``items.jsonl``."""

    item_id: Text
    prompt: Prompt
    candidates: Annotated[
        list[Annotated[_CandidateRow, must(_is_object, "must be an object with id and text")]],
        must(lambda v: isinstance(v, list), "must be a list of {id, text} objects"),
    ]
    gold: Text | None = None
    bucket: Text | None = None
    metadata: Annotated[dict, BeforeValidator(lambda v: v if _is_object(v) else {})] = {}


def _items_jsonl_item(obj: dict, line: int, check: FieldChecker) -> Item | None:
    """A line of ``items.jsonl`` as an item, or None with its problems recorded."""
    item_id = obj.get("item_id") if _is_object(obj) else None
    row = check.validate(_ItemLine, obj, line, item=item_id)
    if row is None:
        return None
    candidates = tuple(Candidate(c.id, c.text) for c in row.candidates)
    return Item(row.item_id, row.prompt, candidates, row.gold, row.bucket, row.metadata)


class _CsvRow(BaseModel):
    """A row of a dataset CSV: one candidate of an item; gold and bucket may be blank."""

    item_id: Text
    prompt: Prompt
    candidate_id: Text
    text: Answer
    gold: Annotated[str | None, BeforeValidator(lambda v: (v or "").strip() or None)] = None
    bucket: Annotated[str | None, BeforeValidator(lambda v: (v or "").strip() or None)] = None


def _csv_items(path: Path, check: FieldChecker) -> list[Item]:
    """A CSV with one row per candidate: ``item_id,prompt,candidate_id,text[,gold][,bucket]``;
    ``prompt``, ``gold`` and ``bucket`` repeat on every row of an item and must agree; an empty
    ``gold`` means no gold label. Items keep the order of their first row."""
    groups: dict[str, dict[str, Any]] = {}
    broken = set()  # items with a row in error: their other rows are not checked together
    for line, row in read_rows(path, check, CSV_COLUMNS[:4]):
        cells = check.validate(_CsvRow, row, line, item=row.get("item_id"))
        if cells is None:
            broken.add(row.get("item_id"))
            continue
        group = groups.setdefault(
            cells.item_id,
            {"line": line, "prompt": cells.prompt, "gold": None, "bucket": None, "cands": []},
        )
        for key in ("prompt", "gold", "bucket"):
            value = getattr(cells, key)
            if value is not None and group[key] not in (None, value):
                check.add(line, key, f"differs from earlier rows of item {cells.item_id!r}")
            group[key] = group[key] or value
        group["cands"].append(Candidate(cells.candidate_id, cells.text))
    items: list[Item] = []
    seen: dict[str, int] = {}
    for item_id, g in groups.items():
        item = Item(item_id, g["prompt"], tuple(g["cands"]), g["gold"], g["bucket"])
        if item_id not in broken and _sound(check, g["line"], seen, item):
            items.append(item)
    check.raise_if_any()
    return items


Answers = Annotated[
    list[Answer], must(lambda v: isinstance(v, list), "missing or not a list of strings")
]


class _RewardBench2Row(BaseModel):
    """A row of RewardBench 2: one chosen answer (the correct one) and the rejected ones; the
    hub's file holds every subset, a copy of one may have no ``subset`` column."""

    subset: Text | None = None
    id: Annotated[
        str | int,
        must(lambda v: str(v).strip(), "missing"),
        must(
            lambda v: isinstance(v, str | int) and not isinstance(v, bool),
            "must be a string or an integer, got {got}",
        ),
    ]
    prompt: Prompt
    chosen: Annotated[Answers, Field(min_length=1, max_length=1)] = Field(
        description="must hold exactly 1 answer, got {got}"
    )
    rejected: Annotated[Answers, Field(min_length=1)] = Field(
        description="must hold at least 1 answer"
    )
    total_completions: Any = None
    models: Any = None

    @field_validator("total_completions")
    @classmethod
    def _total(cls, total: Any, info: ValidationInfo) -> Any:
        held = len(info.data.get("chosen", ())) + len(info.data.get("rejected", ()))
        if isinstance(total, int) and {"chosen", "rejected"} <= info.data.keys() and total != held:
            raise PydanticCustomError("pcf", f"says {total} but chosen+rejected hold {held}")
        return total


def _rewardbench2_item(row: dict, line: int, check: FieldChecker) -> Item | None:
    """A RewardBench 2 row as an item ``subset:id`` (``id`` repeats across subsets; ``id``
    without a subset), or None with its problems recorded; ids and listing hide the label
    (docs/choices.md)."""
    subset = row.get("subset")
    key = f"{subset}:{row.get('id')}" if subset is not None else str(row.get("id"))
    fields = check.validate(_RewardBench2Row, row, line, item=key)
    if fields is None:
        return None
    answers = [*fields.chosen, *fields.rejected]
    hashed = (hashlib.sha256(f"{key}:{i}".encode()).hexdigest()[:7] for i in range(len(answers)))
    candidates = [Candidate(f"c{h}", text) for h, text in zip(hashed, answers, strict=True)]
    meta = {"models": fields.models, "subset": fields.subset}
    gold, ordered = candidates[0].id, tuple(sorted(candidates, key=lambda c: c.id))
    return Item(key, fields.prompt, ordered, gold, fields.subset, meta)


class _JudgeBenchRow(BaseModel):
    """A JudgeBench pair (data or outputs file)."""

    pair_id: Text
    question: Prompt
    source: Text
    response_a: Answer = Field(alias="response_A")
    response_b: Answer = Field(alias="response_B")
    label: JudgeBenchLabel
    original_id: Any = None
    response_model: Any = None


def _judgebench_item(obj: dict, line: int, check: FieldChecker) -> Item | None:
    """A JudgeBench pair (data or outputs file) as an item (candidates ``response_A``/``B``), or
    None with its problems recorded."""
    row = check.validate(_JudgeBenchRow, obj, line, item=obj.get("pair_id"))
    if row is None:
        return None
    a, b = Candidate("response_A", row.response_a), Candidate("response_B", row.response_b)
    gold = a.id if row.label == "A>B" else b.id
    meta = row.model_dump(include={"source", "original_id", "response_model"})
    return Item(row.pair_id, row.question, (a, b), gold, judgebench_bucket(row.source), meta)


ROW_LAYOUTS = {
    "rewardbench2": _rewardbench2_item,
    "judgebench": _judgebench_item,
    "jsonl": _items_jsonl_item,
}
"""Layouts of one item per row, and the row's reader."""
_ROW_MODELS: dict[str, type[BaseModel]] = {
    "rewardbench2": _RewardBench2Row,
    "judgebench": _JudgeBenchRow,
    "jsonl": _ItemLine,
}
"""The model of a row of each of :data:`ROW_LAYOUTS`: its required fields tell the layout."""


def items_from_rows(
    layout: str, rows: Iterable[tuple[int, dict]], check: FieldChecker, *, subset: str | None = None
) -> list[Item]:
    """The items of ``(line, row)`` pairs in a layout of :data:`ROW_LAYOUTS`, all or none (a
    DataError); ``subset`` keeps one bucket (:func:`_row_items`)."""
    return list(_row_items(layout, rows, check, subset))


def _row_items(
    layout: str, rows: Iterable[tuple[int, dict]], check: FieldChecker, subset: str | None
) -> Iterator[Item]:
    """The sound items of ``rows`` in ``subset`` (a bucket), one at a time, then the DataError
    of every problem, if any. RewardBench 2 rows of another subset are not read at all (their
    rows differ: Ties has several chosen answers)."""
    if layout == "rewardbench2" and subset is not None:
        rows = (
            (line, row)
            for line, row in rows
            if not isinstance(s := row.get("subset"), str) or not s.strip() or s == subset
        )
    for item in sound_items(layout, rows, check):
        if subset in (None, item.bucket):
            yield item
    check.raise_if_any()


def sound_items(
    layout: str, rows: Iterable[tuple[int, Any]], check: FieldChecker
) -> Iterator[Item]:
    """The sound items of ``(line, row)`` pairs in a layout, the others' problems recorded."""
    read = ROW_LAYOUTS[layout]
    seen: dict[str, int] = {}
    for line, row in rows:
        item = read(row, line, check)
        if item is not None and _sound(check, line, seen, item):
            yield item
