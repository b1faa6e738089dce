"""Results kept in the database: what a page shows of a large run is computed once per revision
of the run's calls (and, for figures against labels, of the labels), stored, and read back.

A stored result is a set of named parts in one ZIP archive: tables as Parquet, arrays as NumPy
``.npy`` (never pickles: the database is data, not code) and figures as JSON. :func:`kept`
reads a result stored at the current revision, or computes, stores and returns it.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from sqlmodel import Session

from pcf.store import Run, result_revision, run_result, save_run_result

Parts = dict[str, Any]
"""A result's parts by name: data frames, arrays, or JSON values."""
NewParts = Mapping[str, Any] | Iterable[tuple[str, Any]]
"""Parts to store: by name, or ``(name, value)`` pairs written as they come."""
READERS: dict[str, Callable[[bytes], Any]] = {
    "parquet": lambda data: arrow_frame(
        pq.read_table(io.BytesIO(data), use_threads=False, pre_buffer=False)
    ),
    "npy": lambda data: np.load(io.BytesIO(data), allow_pickle=False),
    "json": json.loads,
}


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a frame, read on this thread alone (pyarrow's threads may outlive the
    interpreter's exit, aborting it), list columns kept as Arrow lists (a column of Python lists
    holds each item in objects: ~17 MB more on 60,000 items of 4 candidates)."""
    return table.to_pandas(types_mapper=_arrow_lists, use_threads=False)


def _arrow_lists(dtype: pa.DataType) -> pd.ArrowDtype | None:
    return pd.ArrowDtype(dtype) if pa.types.is_list(dtype) else None


def encode(parts: NewParts) -> bytes:
    """``parts`` as one ZIP archive: a frame or Arrow table as ``NAME.parquet``, an array as
    ``NAME.npy``, anything else as ``NAME.json``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, value in pairs(parts):
            member = io.BytesIO()
            if isinstance(value, pd.DataFrame):
                value.to_parquet(member, index=False)
                suffix = ".parquet"
            elif isinstance(value, pa.Table):
                pq.write_table(value, member)
                suffix = ".parquet"
            elif isinstance(value, np.ndarray):
                np.save(member, value, allow_pickle=False)
                suffix = ".npy"
            else:
                member.write(json.dumps(value, default=_plain).encode())
                suffix = ".json"
            archive.writestr(name + suffix, member.getvalue())
    return buffer.getvalue()


def _plain(value: Any) -> Any:
    """A NumPy number as the Python number JSON writes."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a stored result cannot hold {type(value).__name__}")


def pairs(parts: NewParts) -> Iterable[tuple[str, Any]]:
    """``parts`` as ``(name, value)`` pairs."""
    return parts.items() if isinstance(parts, Mapping) else parts


def decode(data: bytes, names: Collection[str] | None = None) -> Parts:
    """The parts of an archive made by :func:`encode` (only those in ``names``, if given)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return read_parts(archive, names)


def read_parts(archive: zipfile.ZipFile, names: Collection[str] | None = None) -> Parts:
    """:func:`decode` of an archive already open: a caller that reads a large result a few
    parts at a time opens it once, not for each few."""
    parts: Parts = {}
    for member in archive.namelist():
        name, _, suffix = member.rpartition(".")
        if suffix not in READERS:
            raise ValueError(f"a stored result holds an unknown part {member!r}")
        if names is None or name in names:
            parts[name] = READERS[suffix](archive.read(member))
    return parts


def part_names(data: bytes) -> list[str]:
    """The names of the parts of an archive made by :func:`encode`, in their order."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [member.rpartition(".")[0] for member in archive.namelist()]


def kept(
    run: Run,
    name: str,
    compute: Callable[[], NewParts],
    *,
    session: Session,
    labels: bool = False,
    inputs: Any = None,
) -> Parts:
    """The run's result ``name``: as stored when it was computed at the current revision of the
    run's calls (with ``labels``, of its dataset's labels too; with ``inputs``, a JSON value,
    for those inputs); else ``compute()``'s parts, stored first (flushed; the caller commits).
    :func:`kept_archive` without decoding is for a caller that reads a large result in parts.

    The revision is read before computing, so a call or label that arrives meanwhile makes the
    stored result stale at once: it is never shown for the new revision. A result that depends
    on the labels only through a few values passes them as ``inputs`` instead of ``labels``, so
    that a label that leaves them as they were finds it stored.
    """
    tables: dict[str, pa.Table] = {}

    def computed() -> Iterator[tuple[str, Any]]:
        for part, value in pairs(compute()):
            if isinstance(value, pa.Table):
                tables[part] = value
            yield part, value

    data = kept_archive(run, name, computed, session=session, labels=labels, inputs=inputs)
    # An Arrow table just computed is the frame its Parquet reads back as; reading it again
    # would hold both (a 60,000-item decision table: about 20 MB more at a run's end).
    rest = decode(data, set(part_names(data)) - tables.keys()) if tables else decode(data)
    return rest | {part: arrow_frame(table) for part, table in tables.items()}


def kept_archive(
    run: Run,
    name: str,
    compute: Callable[[], NewParts],
    *,
    session: Session,
    labels: bool = False,
    inputs: Any = None,
) -> bytes:
    """:func:`kept`'s archive, not decoded (:func:`decode` reads the parts wanted)."""
    revision = result_revision(run, session=session, labels=labels)
    if inputs is not None:
        digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        revision = f"{revision} {digest}"
    data = run_result(run.id, name, revision, session=session)
    if data is None:
        data = encode(compute())
        save_run_result(run.id, name, revision, data, session=session)
    return data
