"""Items from Hugging Face datasets through the ``datasets`` library (the ``hf`` extra): on the
hub or in its cache, a ``save_to_disk`` folder, or a folder of a dataset's Parquet or JSON files.
The rows pass a file import's checks (:func:`pcf.items.items_from_rows`), in a layout told by
their columns, and fail with ``SOURCE[split]:row: field: message`` (rows count from 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pcf.errors import DataError, Problem
from pcf.files import DATA_FILE, FieldChecker, storable
from pcf.items import Item, items_from_rows, layout_of

SAVED = ("dataset_dict.json", "state.json")
"""The files that make a folder one that ``save_to_disk`` wrote."""


def load_hf(
    source: str,
    *,
    config: str | None = None,
    split: str | None = None,
    revision: str | None = None,
    columns: Mapping[str, str] | None = None,
    subset: str | None = None,
) -> tuple[list[Item], str]:
    """The items of a dataset (a hub id or a local folder), all or none, and its rows' layout;
    ``split`` is needed only when there are several; ``columns`` (``{field: column}``) reads a
    layout's field from another column; ``subset`` keeps one bucket. ValueError when the dataset
    cannot be read or is no known layout; DataError when over the cap or for its rows' problems."""
    columns = dict(columns or {})
    dataset = _one_split(_open(source, config, revision), split, source)
    name = f"{source}[{dataset.split}]" if dataset.split else source
    if dataset.data.nbytes > DATA_FILE.value():
        raise DataError([Problem(name, None, None, DATA_FILE.exceeded(dataset.data.nbytes))])
    for field, column in columns.items():
        if column not in dataset.column_names:
            raise ValueError(f"--map {field}={column}: {name} has no column {column!r}")
    layout = layout_of([*dataset.column_names, *columns])
    check = FieldChecker(name)
    rows = (
        (i, {**row, **{field: row[column] for field, column in columns.items()}})
        for i, row in enumerate(dataset, start=1)
    )
    sound = ((i, row) for i, row in rows if storable(row, i, check))
    return items_from_rows(layout, sound, check, subset=subset), layout


def _open(source: str, config: str | None, revision: str | None) -> Any:
    """The dataset or its splits, from a ``save_to_disk`` folder or ``load_dataset``."""
    try:
        import datasets  # noqa: PLC0415 - an optional extra
    except ImportError:
        raise ValueError(
            "Hugging Face datasets need the datasets library: pip install 'pcf-review[hf]'"
        ) from None
    try:
        if any((Path(source) / saved).is_file() for saved in SAVED):
            if config or revision:
                raise ValueError("a save_to_disk folder has no --config or --revision")
            return datasets.load_from_disk(source)
        return datasets.load_dataset(source, config, revision=revision)
    except (OSError, ValueError) as exc:  # not found, offline, no such config
        raise ValueError(f"cannot read {source}: {exc}") from None


def _one_split(loaded: Any, split: str | None, source: str) -> Any:
    """The split to read of ``loaded`` (a dataset's splits are a dict)."""
    if not isinstance(loaded, dict):
        return loaded
    if split is None and len(loaded) == 1:
        split = next(iter(loaded))
    if split not in loaded:
        wrong = f", not {split!r}" if split else ": choose one with --split"
        raise ValueError(f"{source} has splits {list(loaded)}{wrong}")
    return loaded[split]


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", re.ASCII)
"""A dataset's id on the hub: ``owner/name``."""


def hub_id(source: str) -> str:
    """``source``, when it is a hub dataset's id (``owner/name``) that names no file or folder
    here: all the app may read (this server's files are its operator's, ``pcf import hf PATH``).

    Raises:
        ValueError: ``source`` is no such id.
    """
    shell = "a file or folder on the server is imported in its shell: pcf import hf PATH"
    if HUB_ID.fullmatch(source) is None or ".." in source:
        raise ValueError(f"{source!r} is no Hugging Face dataset id (owner/name); {shell}")
    if Path(source).exists():  # ``load_dataset`` would read the folder of that name here
        raise ValueError(f"{source!r} is also a folder of this server; {shell}")
    return source
