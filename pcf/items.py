"""Items, candidates and the dataset loaders (RewardBench 2, JudgeBench, items.jsonl, CSV).

Every loader reads the whole file, collects every problem (file, line, field) and raises one
:class:`~pcf.errors.DataError` if there is any, so a bad file is never half used.

What any file may hold, checked in one place for every format (:func:`pcf.files.storable`):
UTF-8 text (a leading byte-order mark, as Excel writes, is skipped); no NUL character and no
lone surrogate in any string (PostgreSQL and UTF-8 refuse them); nesting at most
:data:`MAX_NESTING` deep; integers of at most :data:`MAX_INT_DIGITS` digits. An item has 2 to
:data:`MAX_CANDIDATES` candidates (a prompt labels them A to Z), and no candidate is called
``none_correct`` or ``cannot_tell`` (:data:`RESERVED_CANDIDATE_IDS`, the annotators' other
choices). A prompt has at most :data:`PROMPT_CHARS` characters and a candidate at most
:data:`CANDIDATE_CHARS` (each overridable by its environment variable), and a file must be a
regular file of at most :data:`~pcf.files.DATA_FILE` (:mod:`pcf.files`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcf.files import (
    BOM,
    DATA_FILE,
    FieldChecker,
    Limit,
    decode_utf8,
    open_checked,
    open_data,
    read_capped,
    read_json_lines,
    storable,
)

FORMATS = ("rewardbench2", "judgebench", "jsonl", "csv")
CSV_COLUMNS = ("item_id", "prompt", "candidate_id", "text", "gold", "bucket")
JUDGEBENCH_BUCKETS = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")
MAX_CANDIDATES = 26
"""One default slot key (A to Z) per candidate: see :data:`pcf.prompts.DEFAULT_KEYS`."""
RESERVED_CANDIDATE_IDS = ("none_correct", "cannot_tell")
"""An annotator's choices besides the candidates, so no candidate may be called that."""
PROMPT_CHARS = Limit("PCF_MAX_PROMPT_CHARS", 200_000, "characters")
"""The longest prompt an item may have (``PCF_MAX_PROMPT_CHARS`` changes it)."""
CANDIDATE_CHARS = Limit("PCF_MAX_CANDIDATE_CHARS", 100_000, "characters")
"""The longest candidate answer (``PCF_MAX_CANDIDATE_CHARS`` changes it): every judge call
quotes each candidate."""


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
        return {
            "item_id": self.item_id,
            "prompt": self.prompt,
            "candidates": [{"id": c.id, "text": c.text} for c in self.candidates],
            "gold": self.gold,
            "bucket": self.bucket,
        }


def letter_labels(candidate_ids: Sequence[str]) -> dict[str, str]:
    """``{candidate id: "A"}`` in listing order; ``#1``, ``#2``... beyond 26 candidates."""
    letters = string.ascii_uppercase
    many = len(candidate_ids) > len(letters)
    return {cid: f"#{i + 1}" if many else letters[i] for i, cid in enumerate(candidate_ids)}


def candidate_labels(item: Item) -> dict[str, str]:
    """Short labels of the item's candidates in listing order: ``A``, ``B``, ... (``#27``...)."""
    return letter_labels(item.candidate_ids)


def candidate_titles(item: Item, words: int = PREVIEW_WORDS) -> dict[str, str]:
    """``A · The first words of the answer…`` per candidate, from where the answers differ
    (:func:`distinguishing_words`): a label a reader can tell apart."""
    labels = candidate_labels(item)
    shown = distinguishing_words({c.id: c.text for c in item.candidates}, words)
    return {c.id: f"{labels[c.id]} · {shown[c.id]}" for c in item.candidates}


def _words(text: str) -> list[str]:
    """The words of ``text`` with Markdown marks dropped."""
    return re.sub(r"[#>|\[\]]+", " ", re.sub(r"[*_`]+", "", text)).split()


def first_words(text: str, words: int = PREVIEW_WORDS) -> str:
    """The first ``words`` words of ``text`` on one line, with ``…`` when there is more."""
    parts = _words(text)
    return " ".join(parts[:words]) + ("…" if len(parts) > words else "")


def distinguishing_words(texts: Mapping[str, str], words: int = PREVIEW_WORDS) -> dict[str, str]:
    """A one-line preview of each text that tells it from the others: its first ``words`` words
    when they already differ from every other text's, else ``words`` words from the last word
    it shares with the text most like it (``…list of years from 2000 to 2010, then…``).

    Args:
        texts: ``{key: text}``, e.g. an item's candidates.
        words: how many words each preview shows.
    """
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
    """Load a dataset file in one of :data:`FORMATS`.

    Args:
        fmt: ``rewardbench2``, ``judgebench``, ``jsonl`` or ``csv``.
        path: the file (RewardBench 2 may also be Parquet).
        subset: keep only rows of this subset (RewardBench 2) or bucket (other formats).
        limit: keep at most this many items, in file order, after the subset filter.

    Raises:
        DataError: naming file, line and field of every problem found.
    """
    loaders = {
        "rewardbench2": load_rewardbench2,
        "judgebench": load_judgebench,
        "jsonl": load_items_jsonl,
        "csv": load_items_csv,
    }
    if fmt not in loaders:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    items = loaders[fmt](path, subset=subset)
    return items if limit is None else items[:limit]


def _finish_item(
    check: FieldChecker,
    line: int,
    seen: dict[str, int],
    item_id: str | None,
    prompt: str | None,
    candidates: list[Candidate] | None,
    gold: str | None,
    bucket: str | None,
    metadata: dict[str, Any] | None = None,
) -> Item | None:
    """Cross-field checks shared by every format; returns the item when it is sound."""
    ok = item_id is not None and prompt is not None and candidates is not None
    if item_id is not None:
        if item_id in seen:
            check.add(line, "item_id", f"duplicate id {item_id!r} (first on line {seen[item_id]})")
            ok = False
        else:
            seen[item_id] = line
    if candidates is not None:
        if len(candidates) < 2:
            check.add(line, "candidates", f"needs at least 2 candidates, got {len(candidates)}")
            ok = False
        if len(candidates) > MAX_CANDIDATES:
            message = (
                f"at most {MAX_CANDIDATES} candidates (slot keys A to Z), got {len(candidates)}"
            )
            check.add(line, "candidates", message)
            ok = False
        ids = [c.id for c in candidates]
        for dup in sorted(i for i, n in Counter(ids).items() if n > 1):
            check.add(line, "candidates.id", f"duplicate candidate id {dup!r}")
            ok = False
        for reserved in sorted(set(ids) & set(RESERVED_CANDIDATE_IDS)):
            check.add(line, "candidates.id", f"{reserved!r} is an annotator's choice, not an id")
            ok = False
        if gold is not None and gold not in ids:
            check.add(line, "gold", f"{gold!r} is not one of the candidate ids {ids}")
            ok = False
    if not ok:
        return None
    return Item(item_id, prompt, tuple(candidates), gold, bucket, metadata or {})  # type: ignore[arg-type]


def _bucket_filter(items: list[Item], subset: str | None) -> list[Item]:
    return items if subset is None else [i for i in items if i.bucket == subset]


# ---------------------------------------------------------------- items.jsonl


def load_items_jsonl(path: str | Path, *, subset: str | None = None) -> list[Item]:
    """Load METHOD.md's ``items.jsonl``; ``subset`` keeps one bucket."""
    path, check = open_checked(path)
    items = list(_items_jsonl(path, check))
    check.raise_if_any()
    return _bucket_filter(items, subset)


def item_listing(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Each item's candidate ids in listing order, in file order, from an ``items.jsonl``
    checked as :func:`load_items_jsonl` checks it; the texts are not kept."""
    path, check = open_checked(path)
    listing = {item.item_id: item.candidate_ids for item in _items_jsonl(path, check)}
    check.raise_if_any()
    return listing


def _items_jsonl(path: Path, check: FieldChecker) -> Iterator[Item]:
    """The sound items of an ``items.jsonl``, the problems of the others recorded."""
    seen: dict[str, int] = {}
    for line, obj in read_json_lines(path, check):
        item_id = check.text(obj, "item_id", line)
        prompt = check.text(obj, "prompt", line, limit=PROMPT_CHARS, item=item_id)
        candidates = _candidates_field(obj, line, check, item_id)
        gold = check.optional_text(obj, "gold", line)
        bucket = check.optional_text(obj, "bucket", line)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        item = _finish_item(check, line, seen, item_id, prompt, candidates, gold, bucket, meta)
        if item:
            yield item


def _candidates_field(
    obj: dict, line: int, check: FieldChecker, item_id: str | None
) -> list[Candidate] | None:
    raw = obj.get("candidates")
    if raw is None:
        check.add(line, "candidates", "missing")
        return None
    if not isinstance(raw, list):
        check.add(line, "candidates", "must be a list of {id, text} objects")
        return None
    out: list[Candidate] = []
    sound = True
    for index, cand in enumerate(raw):
        if not isinstance(cand, dict):
            check.add(line, f"candidates[{index}]", "must be an object with id and text")
            sound = False
            continue
        cid = check.text(cand, "id", line, name=f"candidates[{index}].id")
        text = check.text(
            cand,
            "text",
            line,
            name=f"candidates[{index}].text",
            limit=CANDIDATE_CHARS,
            item=item_id,
        )
        if cid is None or text is None:
            sound = False
            continue
        out.append(Candidate(cid, text))
    return out if sound else None


# ---------------------------------------------------------------- CSV


def load_items_csv(path: str | Path, *, subset: str | None = None) -> list[Item]:
    """Load a CSV with one row per candidate: ``item_id,prompt,candidate_id,text[,gold][,bucket]``.

    ``prompt``, ``gold`` and ``bucket`` repeat on every row of an item and must agree; an empty
    ``gold`` means no gold label. Items keep the order of their first row.
    """
    path, check = open_checked(path)
    with open_data(path) as fh:
        content = decode_utf8(read_capped(fh, path, DATA_FILE).removeprefix(BOM), check, 1)
    check.raise_if_any()
    reader = csv.DictReader(io.StringIO(content, newline=""))
    groups: dict[str, dict[str, Any]] = {}
    try:
        header = reader.fieldnames or []
        missing = [c for c in CSV_COLUMNS[:4] if c not in header]
        if missing:
            check.add(1, ", ".join(missing), f"missing column(s); header is {header}")
            check.raise_if_any()
        for row in reader:
            line = reader.line_num
            if not storable(row, line, check):
                continue
            item_id = check.text(row, "item_id", line)
            prompt = check.text(row, "prompt", line, limit=PROMPT_CHARS, item=item_id)
            cid = check.text(row, "candidate_id", line)
            text = check.text(row, "text", line, limit=CANDIDATE_CHARS, item=item_id)
            if item_id is None:
                continue
            group = groups.setdefault(
                item_id,
                {"line": line, "prompt": prompt, "gold": None, "bucket": None, "cands": []},
            )
            for key in ("gold", "bucket"):
                value = (row.get(key) or "").strip() or None
                if value is not None and group[key] not in (None, value):
                    check.add(line, key, f"differs from earlier rows of item {item_id!r}")
                group[key] = group[key] or value
            if prompt is not None and group["prompt"] not in (None, prompt):
                check.add(line, "prompt", f"differs from earlier rows of item {item_id!r}")
            if cid is not None and text is not None:
                group["cands"].append(Candidate(cid, text))
    except csv.Error as exc:  # e.g. a field over the csv module's size limit
        check.add(reader.line_num + 1, None, f"unreadable CSV: {exc}")  # the record it began
        check.raise_if_any()
    items: list[Item] = []
    seen: dict[str, int] = {}
    for item_id, g in groups.items():
        item = _finish_item(
            check, g["line"], seen, item_id, g["prompt"], g["cands"], g["gold"], g["bucket"]
        )
        if item:
            items.append(item)
    check.raise_if_any()
    return _bucket_filter(items, subset)


# ---------------------------------------------------------------- RewardBench 2


def _neutral_id(key: str) -> str:
    """A short id hashed from ``key``, so ids and listing order reveal nothing."""
    return "c" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:7]


def _rows_of(path: Path, check: FieldChecker) -> Iterable[tuple[int, dict]]:
    if path.suffix == ".parquet":
        import pandas as pd  # noqa: PLC0415 - only Parquet needs it

        try:
            with open_data(path) as fh:
                frame = pd.read_parquet(io.BytesIO(read_capped(fh, path, DATA_FILE)))
        except (OSError, ValueError) as exc:  # pyarrow's errors are among these
            check.add(None, None, f"not a readable Parquet file: {exc}")
            check.raise_if_any()
        records = enumerate(frame.to_dict(orient="records"), start=1)
        return ((i, rec) for i, rec in records if storable(_plain_row(rec), i, check))
    return read_json_lines(path, check)


def _plain_row(record: dict) -> dict:
    """A Parquet record with its arrays as lists, for :func:`~pcf.files.storable`."""
    return {key: _plain(value) for key, value in record.items()}


def load_rewardbench2(path: str | Path, *, subset: str | None = None) -> list[Item]:
    """Load RewardBench 2 rows (JSON Lines or Parquet); ``subset`` keeps e.g. ``Factuality``.

    RewardBench 2 stores the correct answer first in every row, so candidate ids are hashes of
    the texts and candidates are listed sorted by id: neither the ids nor the listing order
    (which breaks exact consensus ties) carries the label. Item ids are ``subset:id`` because
    ``id`` repeats across subsets. For Parquet files, "line" means row number.
    """
    path, check = open_checked(path)
    items: list[Item] = []
    seen: dict[str, int] = {}
    for line, row in _rows_of(path, check):
        row_subset = check.text(row, "subset", line)
        if subset is not None and row_subset != subset:
            continue
        raw_id = row.get("id")
        if raw_id is None or str(raw_id).strip() == "":
            check.add(line, "id", "missing")
        elif not isinstance(raw_id, str | int) or isinstance(raw_id, bool):
            check.add(line, "id", f"must be a string or an integer, got {type(raw_id).__name__}")
            raw_id = None
        key = f"{row_subset}:{raw_id}"
        prompt = check.text(row, "prompt", line, limit=PROMPT_CHARS, item=key)
        candidates = _rewardbench2_candidates(row, key, line, check)
        gold = candidates[0].id if candidates else None
        if candidates:
            candidates = sorted(candidates, key=lambda c: c.id)
        item_id = f"{row_subset}:{raw_id}" if raw_id is not None and row_subset else None
        meta = {"models": _plain(row.get("models")), "subset": row_subset}
        item = _finish_item(check, line, seen, item_id, prompt, candidates, gold, row_subset, meta)
        if item:
            items.append(item)
    check.raise_if_any()
    return items


def _plain(value: Any) -> Any:
    """Parquet gives numpy arrays where JSON gives lists."""
    return value.tolist() if hasattr(value, "tolist") else value


def _rewardbench2_candidates(
    row: dict, key: str, line: int, check: FieldChecker
) -> list[Candidate] | None:
    """Chosen first, then rejected; None when the row is unusable (problems recorded).

    Ids hash the row key and storage index, so rows holding the same text twice still work.
    """
    chosen, rejected = _plain(row.get("chosen")), _plain(row.get("rejected"))
    sound = True
    for name, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, list):
            check.add(line, name, "missing or not a list of strings")
            sound = False
    if not sound:
        return None
    if len(chosen) != 1:
        check.add(line, "chosen", f"must hold exactly 1 answer, got {len(chosen)}")
        sound = False
    if not rejected:
        check.add(line, "rejected", "must hold at least 1 answer")
        sound = False
    total = row.get("total_completions")
    if isinstance(total, int) and total != len(chosen) + len(rejected):
        check.add(
            line,
            "total_completions",
            f"says {total} but chosen+rejected hold {len(chosen) + len(rejected)}",
        )
        sound = False
    texts = [("chosen", i, t) for i, t in enumerate(chosen)]
    texts += [("rejected", i, t) for i, t in enumerate(rejected)]
    for name, index, text in texts:
        if not isinstance(text, str) or not text.strip():
            check.add(line, f"{name}[{index}]", "is empty or not a string")
            sound = False
        elif check.within(text, line, f"{name}[{index}]", CANDIDATE_CHARS, key) is None:
            sound = False
    if not sound:
        return None
    return [Candidate(_neutral_id(f"{key}:{i}"), t) for i, (_, _, t) in enumerate(texts)]


# ---------------------------------------------------------------- JudgeBench


def load_judgebench(path: str | Path, *, subset: str | None = None) -> list[Item]:
    """Load JudgeBench pairs (data or outputs files); candidates are ``response_A``/``B``.

    ``gold`` follows ``label`` (``A>B`` or ``B>A``); ``bucket`` is the JudgeBench bucket of
    ``source``; ``subset`` keeps one bucket.
    """
    path, check = open_checked(path)
    items: list[Item] = []
    seen: dict[str, int] = {}
    for line, row in read_json_lines(path, check):
        item_id = check.text(row, "pair_id", line)
        prompt = check.text(row, "question", line, limit=PROMPT_CHARS, item=item_id)
        source = check.text(row, "source", line)
        a = check.text(row, "response_A", line, limit=CANDIDATE_CHARS, item=item_id)
        b = check.text(row, "response_B", line, limit=CANDIDATE_CHARS, item=item_id)
        label = row.get("label")
        gold = (
            {"A>B": "response_A", "B>A": "response_B"}.get(label)
            if isinstance(label, str)
            else None
        )
        if label not in ("A>B", "B>A"):
            shown = repr(label)[:40] if isinstance(label, str | None) else type(label).__name__
            check.add(line, "label", f"must be 'A>B' or 'B>A', got {shown}")
        candidates = None
        if a is not None and b is not None:
            candidates = [Candidate("response_A", a), Candidate("response_B", b)]
        bucket = judgebench_bucket(source) if source else None
        meta = {
            "source": source,
            "original_id": row.get("original_id"),
            "response_model": row.get("response_model"),
        }
        item = _finish_item(check, line, seen, item_id, prompt, candidates, gold, bucket, meta)
        if item:
            items.append(item)
    check.raise_if_any()
    return _bucket_filter(items, subset)
