"""The files a user names, read with care and written whole (:func:`replaced`).

Only regular files are read, each kind under its cap, also while it is read (docs/reports.md,
"File limits"). Data files are read through a :class:`FieldChecker` that collects each problem
with its file, line and field and raises them together as one DataError.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO, TextIO, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, ValidationInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from pcf.errors import DataError, Problem

MB = 1 << 20
MAX_NESTING = 64
MAX_INT_DIGITS = 4300
"""Python's own limit on converting digits to an int."""
BOM = b"\xef\xbb\xbf"
PARQUET_BATCH = 1024
"""Rows of a Parquet file read at once."""


@dataclass(frozen=True)
class Limit:
    """A cap of ``default`` ``unit`` (each ``scale`` bytes or characters) that ``env`` changes."""

    env: str
    default: int
    unit: str
    scale: int = 1

    def value(self) -> int:
        """The cap in bytes or characters; ValueError if the variable is not a whole number > 0."""
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default * self.scale
        if not raw.isdigit() or int(raw) == 0:
            raise ValueError(f"{self.env}={raw!r}: expected a whole number of {self.unit} above 0")
        return int(raw) * self.scale

    def exceeded(self, size: int) -> str:
        """Why ``size`` is refused: the size, the limit and how to raise it."""
        shown = f"{size / self.scale:,.1f}" if self.scale > 1 else f"{size:,}"
        return (
            f"{shown} {self.unit}, over the limit of {self.value() // self.scale:,} {self.unit} "
            f"(set {self.env} to raise it)"
        )


DATA_FILE = Limit("PCF_MAX_FILE_MB", 1024, "MB", MB)
"""Datasets to import or validate, recordings to replay, judgments files to aggregate."""
PRICES_FILE = Limit("PCF_MAX_PRICES_MB", 1, "MB", MB)
"""The price table named by ``PCF_PRICES``: a few hundred bytes per model."""
GUIDELINES_FILE = Limit("PCF_MAX_GUIDELINES_MB", 1, "MB", MB)
"""A labelling plan's guidelines (Markdown); the plan keeps at most 100,000 characters."""


class InputFileError(ValueError):
    """A file that is not read: missing, not a regular file, or over its cap (one line)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@contextmanager
def open_input(path: str | Path, limit: Limit) -> Iterator[BinaryIO]:
    """``path`` opened for reading once it is known to be a regular file within ``limit``, else
    :class:`InputFileError`."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block here
    except FileNotFoundError:
        raise InputFileError(path, "file not found") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read it ({exc.strerror or exc})") from exc
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise InputFileError(path, f"not a regular file ({_kind(status.st_mode)})")
        if status.st_size > limit.value():
            raise InputFileError(path, limit.exceeded(status.st_size))
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        yield file


def read_input(path: str | Path, limit: Limit) -> bytes:
    """The bytes of a regular file of at most ``limit`` (see :func:`open_input`)."""
    with open_input(path, limit) as file:
        return read_capped(file, path, limit)


def read_capped(file: BinaryIO, path: str | Path, limit: Limit) -> bytes:
    """The rest of an open file, stopping with :class:`InputFileError` past ``limit`` bytes."""
    return b"".join(capped_blocks(iter(lambda: file.read(MB), b""), path, limit))


def capped_blocks(blocks: Iterable[bytes], path: str | Path, limit: Limit) -> Iterator[bytes]:
    """``blocks`` (lines or blocks of a file), stopping past ``limit`` (a file that grew)."""
    total, cap = 0, limit.value()
    for block in blocks:
        total += len(block)
        if total > cap:
            raise InputFileError(path, f"grew past the limit while read: {limit.exceeded(total)}")
        yield block


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary file in ``path``'s folder for any writer to write ``path`` to: renamed onto
    ``path`` once the block ends without an error, else removed, so a failed write (a full
    disk, say) leaves the previous file whole and no partial one. The new file keeps an
    existing file's permissions (else 0o666 less the umask); a symbolic link is followed."""
    target = Path(os.path.realpath(path))
    if target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(descriptor)
    try:
        yield Path(temporary)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def replacing(path: Path) -> Iterator[TextIO]:
    """``path`` written as UTF-8 text, whole or not at all (:func:`replaced`)."""
    with replaced(path) as temporary, temporary.open("w", encoding="utf-8") as file:
        yield file


def write_whole(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path``, whole or not at all (:func:`replaced`)."""
    with replaced(path) as temporary:
        if isinstance(data, str):
            temporary.write_text(data, encoding="utf-8")
        else:
            temporary.write_bytes(data)


# ---------------------------------------------------------------- data files: JSON and problems


Row = TypeVar("Row", bound=BaseModel)


class FieldChecker:
    """Collects the problems of one file, and validates its rows with pydantic."""

    def __init__(self, path: str | Path) -> None:
        self.file = str(path)
        self.problems: list[Problem] = []

    def add(self, line: int | None, field_name: str | None, message: str) -> None:
        self.problems.append(Problem(self.file, line, field_name, message))

    def validate(
        self, model: type[Row], obj: object, line: int | None, *, note: str = "", **context: Any
    ) -> Row | None:
        """``obj`` as a ``model``, or None with a problem (after ``note``) at ``line`` and field
        for each pydantic error (:func:`_message`); ``context`` reaches the validators."""
        try:
            return model.model_validate(obj, context=context)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                loc = error["loc"]
                top = model.model_fields.get(str(loc[0])) if loc else None
                message = note + _message(error, top.description if top else None)
                self.add(line, _field(loc) or None, message)
            return None

    def raise_if_any(self) -> None:
        if self.problems:
            raise DataError(self.problems)


def _field(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a field path: ``candidates[1].text``, ``results["swap = True"]``."""
    parts = (f"[{p}]" if isinstance(p, int) else f'["{p}"]' if " " in p else f".{p}" for p in loc)
    return "".join(parts).removeprefix(".")


def _message(error: ErrorDetails, described: str | None) -> str:
    """A pydantic error in this project's words; ``described`` (a field's) with ``{got}``."""
    kind, value = error["type"], error["input"]
    if kind == "missing" or value is None:
        return "missing"
    if kind == "string_type":
        return f"must be a string, got {type(value).__name__}"
    if kind == "string_pattern_mismatch":  # the pattern of Text
        return "is empty"
    if kind != "pcf" and described:
        got = error.get("ctx", {}).get("actual_length", _shown(value))
        return described.replace("{got}", str(got))
    if kind == "model_type":
        return f"expected an object, got {type(value).__name__}"
    return error["msg"]


def _shown(value: Any) -> str:
    """A value in a message: short, or only its type."""
    plain = isinstance(value, str | int | float) and not isinstance(value, bool)
    return repr(value)[:40] if plain else type(value).__name__


def must(test: Callable[[Any], object], message: str) -> BeforeValidator:
    """A check of a raw value: failing ``test`` is ``message``, ``{got}`` the value."""

    def check(value: Any) -> Any:
        if not test(value):
            raise PydanticCustomError("pcf", message.replace("{got}", _shown(value)))
        return value

    return BeforeValidator(check)


def capped(limit: Limit) -> BeforeValidator:
    """A check that a text has at most ``limit`` characters, naming the context's ``item``."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and len(value) > limit.value():
            item = (info.context or {}).get("item")
            raise PydanticCustomError("pcf", f"item {item!r}: {limit.exceeded(len(value))}")
        return value

    return BeforeValidator(check)


Text = Annotated[str, Field(strict=True, pattern=r"[^\s\x1c-\x1f]")]
"""A required string that is not blank (some character is not one ``str.strip`` strips)."""


def _json_int(digits: str) -> int:
    """A JSON integer, refused past :data:`MAX_INT_DIGITS` digits with a clear message."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"a number of more than {MAX_INT_DIGITS} digits")
    return int(digits)


JSON_DECODER = json.JSONDecoder(parse_int=_json_int)


def decode_utf8(data: bytes, check: FieldChecker, line: int) -> str | None:
    """``data`` decoded as UTF-8, or None with the problem recorded on ``line``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line += data.count(b"\n", 0, exc.start)
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        check.add(line, None, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column}")
        return None


def read_json_lines(path: Path, check: FieldChecker) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; bad lines become problems."""
    return ((number, obj) for number, _, obj in json_lines_at(path, check))


def json_lines_at(path: Path, check: FieldChecker) -> Iterator[tuple[int, int, dict]]:
    """As :func:`read_json_lines`, with each line's byte offset (for :func:`json_line_at`)."""
    start = 0
    with open_data(path) as fh:
        for number, data in enumerate(capped_blocks(fh, path, DATA_FILE), start=1):
            at, start = start, start + len(data)
            raw = decode_utf8(data.removeprefix(BOM) if number == 1 else data, check, number)
            if raw is None or not raw.strip():
                continue
            try:
                obj = JSON_DECODER.decode(raw)
            except json.JSONDecodeError as exc:
                check.add(number, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            except ValueError as exc:
                check.add(number, None, f"invalid JSON: {exc}")
                continue
            except RecursionError:
                check.add(number, None, f"nested more than {MAX_NESTING} levels deep")
                continue
            if not isinstance(obj, dict):
                check.add(number, None, f"expected a JSON object, got {type(obj).__name__}")
                continue
            # JSON writes a NUL or a surrogate only as a \u escape; few brackets cannot nest deep.
            plain = "\\u" not in raw and raw.count("{") + raw.count("[") <= MAX_NESTING
            if plain or storable(obj, number, check):
                yield number, at, obj


def json_line_at(file: BinaryIO, start: int) -> dict:
    """The object on the line at byte ``start``, checked by :func:`json_lines_at` before."""
    file.seek(start)
    data = file.readline()
    return JSON_DECODER.decode((data.removeprefix(BOM) if start == 0 else data).decode("utf-8"))


def read_json_document(path: Path, check: FieldChecker) -> Any:
    """The whole file as one JSON value; problems (with the line) raise :class:`DataError`."""
    with open_data(path) as fh:
        data = read_capped(fh, path, DATA_FILE).removeprefix(BOM)
    text = decode_utf8(data, check, 1)
    check.raise_if_any()
    assert text is not None  # else _utf8 recorded a problem, raised just above
    try:
        return JSON_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        check.add(exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
    except ValueError as exc:
        check.add(None, None, f"invalid JSON: {exc}")
    except RecursionError:
        check.add(None, None, "invalid JSON: nested too deep")
    check.raise_if_any()


def storable(row: dict, line: int, check: FieldChecker) -> bool:
    """Whether ``row`` can be stored, recording why not: too deep, a NUL or a lone surrogate
    (walked iteratively: the depth is what is checked)."""
    sound = True
    pending: list[tuple[str, Any, int]] = [("", row, 0)]
    while pending:
        name, value, depth = pending.pop()
        if depth > MAX_NESTING:
            check.add(line, None, f"nested more than {MAX_NESTING} levels deep")
            return False
        texts: list[str] = []
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, dict):
            texts = [str(key) for key in value]
            inner = ((f"{name}.{key}" if name else str(key), v) for key, v in value.items())
            pending += [(path, v, depth + 1) for path, v in inner]
        elif isinstance(value, list):
            pending += [(f"{name}[{i}]", v, depth + 1) for i, v in enumerate(value)]
        problem = next(filter(None, map(_string_problem, texts)), None)
        if problem:
            check.add(line, name or None, problem)
            sound = False
    return sound


def _string_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"contains a lone surrogate (U+{ord(text[exc.start]):04X})"
    return None


def read_rows(
    path: Path, check: FieldChecker, required: Sequence[str] = ()
) -> Iterator[tuple[int, dict]]:
    """(line, row) of each storable row of a Parquet (line: row number), CSV or else JSON Lines
    file; DataError at once for an unreadable file or a CSV header without ``required``. JSON
    Lines and CSV are read a line at a time."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _csv_rows(path, check, required)
        return
    if suffix != ".parquet":
        yield from read_json_lines(path, check)
        return
    yield from _parquet_rows(path, check)


def _parquet_rows(path: Path, check: FieldChecker) -> Iterator[tuple[int, dict]]:
    """(row number, row) of each storable row of a Parquet file, read a row group's batch at a
    time on this thread alone (pyarrow's I/O threads may release the bytes after the
    interpreter began to exit, aborting the process: exit -6)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only Parquet needs it

    number = 0
    with open_data(path) as fh:
        try:
            batches = pq.ParquetFile(fh, pre_buffer=False).iter_batches(
                batch_size=PARQUET_BATCH, use_threads=False
            )
            for batch in batches:
                for row in batch.to_pylist():
                    number += 1
                    if storable(row, number, check):
                        yield number, row
        except (OSError, ValueError) as exc:  # pyarrow's errors are among these
            check.add(None, None, f"not a readable Parquet file: {exc}")
            check.raise_if_any()


def _csv_rows(
    path: Path, check: FieldChecker, required: Sequence[str]
) -> Iterator[tuple[int, dict]]:
    """(line, row) of each storable row of a CSV file, read a line at a time (a record may
    span lines: its line is where it ends)."""
    with open_data(path) as fh:
        reader = csv.DictReader(_utf8_lines(capped_blocks(fh, path, DATA_FILE), check))
        try:
            header = reader.fieldnames or []
            missing = [column for column in required if column not in header]
            if missing:
                check.add(1, ", ".join(missing), f"missing column(s); header is {header}")
                check.raise_if_any()
            for row in reader:
                if storable(row, reader.line_num, check):
                    yield reader.line_num, row
        except csv.Error as exc:  # e.g. a field over the csv module's size limit
            check.add(reader.line_num + 1, None, f"unreadable CSV: {exc}")  # the record it began
            check.raise_if_any()


def _utf8_lines(lines: Iterable[bytes], check: FieldChecker) -> Iterator[str]:
    """Each of ``lines`` as text (the first without a byte order mark); DataError at the first
    that is not UTF-8."""
    for number, data in enumerate(lines, start=1):
        text = decode_utf8(data.removeprefix(BOM) if number == 1 else data, check, number)
        if text is None:
            raise DataError(check.problems)
        yield text


def open_checked(path: str | Path) -> tuple[Path, FieldChecker]:
    """The file's path and a checker for its problems; DataError if it cannot be read."""
    path = Path(path)
    with open_data(path):
        pass
    return path, FieldChecker(path)


@contextmanager
def open_data(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened with :func:`open_input`; a refusal, then or later, is a DataError."""
    try:
        with open_input(path, DATA_FILE) as file:
            yield file
    except InputFileError as exc:
        raise DataError([Problem(exc.path, None, None, exc.reason)]) from None
