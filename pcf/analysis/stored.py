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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from sqlmodel import Session

from pcf.files import read_parquet_bytes
from pcf.store import Run, result_revision, run_result, save_run_result

Parts = dict[str, Any]
"""A result's parts by name: data frames, arrays, or JSON values."""
READERS: dict[str, Callable[[bytes], Any]] = {
    "parquet": read_parquet_bytes,
    "npy": lambda data: np.load(io.BytesIO(data), allow_pickle=False),
    "json": json.loads,
}


def encode(parts: Mapping[str, pd.DataFrame | np.ndarray | Any]) -> bytes:
    """``parts`` as one ZIP archive: a frame as ``NAME.parquet``, an array as ``NAME.npy``,
    anything else as ``NAME.json``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, value in parts.items():
            member = io.BytesIO()
            if isinstance(value, pd.DataFrame):
                value.to_parquet(member, index=False)
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


def decode(data: bytes) -> Parts:
    """The parts of an archive made by :func:`encode`."""
    parts: Parts = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():
            name, _, suffix = member.rpartition(".")
            if suffix not in READERS:
                raise ValueError(f"a stored result holds an unknown part {member!r}")
            parts[name] = READERS[suffix](archive.read(member))
    return parts


def kept(
    run: Run,
    name: str,
    compute: Callable[[], Mapping[str, Any]],
    *,
    session: Session,
    labels: bool = False,
    inputs: Any = None,
) -> Parts:
    """The run's result ``name``: as stored when it was computed at the current revision of the
    run's calls (with ``labels``, of its dataset's labels too; with ``inputs``, a JSON value,
    for those inputs); else ``compute()``'s parts, stored first (flushed; the caller commits).

    The revision is read before computing, so a call or label that arrives meanwhile makes the
    stored result stale at once: it is never shown for the new revision. A result that depends
    on the labels only through a few values passes them as ``inputs`` instead of ``labels``, so
    that a label that leaves them as they were finds it stored.
    """
    revision = result_revision(run, session=session, labels=labels)
    if inputs is not None:
        digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        revision = f"{revision} {digest}"
    data = run_result(run.id, name, revision, session=session)
    if data is None:
        data = encode(compute())
        save_run_result(run.id, name, revision, data, session=session)
    return decode(data)
