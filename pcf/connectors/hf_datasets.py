"""Items from Hugging Face datasets through the ``datasets`` library (the ``hf`` extra): on the
hub or in its cache, a ``save_to_disk`` folder, a folder of a dataset's Parquet or JSON files, or
one such file (Parquet, JSON, JSON Lines or CSV). The rows pass a file import's checks
(:func:`pcf.items.items_from_rows`), in the layout their columns fit
(:func:`pcf.items.recognise`), and fail with ``SOURCE[split]:row: field: message`` (rows count
from 1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pcf.errors import DataError, Problem
from pcf.files import DATA_FILE, FieldChecker, storable
from pcf.items import ROW_LAYOUTS, Item, items_from_rows, recognise

SAVED = ("dataset_dict.json", "state.json")
"""The files that make a folder one that ``save_to_disk`` wrote."""
FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}
"""The ``datasets`` builder that reads a single data file, by its suffix."""


def load_hf(
    source: str,
    *,
    config: str | None = None,
    split: str | None = None,
    revision: str | None = None,
    columns: Mapping[str, str] | None = None,
    subset: str | None = None,
) -> tuple[list[Item], str]:
    """The items of a dataset (a hub id, a local folder or file), all or none, and its rows' layout;
    ``split`` is needed only when there are several; ``columns`` (``{field: column}``) reads a
    layout's field from another column; ``subset`` keeps one bucket. ValueError when the dataset
    cannot be read or is no known layout; DataError when over the cap or for its rows' problems."""
    columns = dict(columns or {})
    dataset = _open(source, config, split, revision)
    one_split = dataset.split and not Path(source).is_file()
    name = f"{source}[{dataset.split}]" if one_split else source
    if dataset.data.nbytes > DATA_FILE.value():
        raise DataError([Problem(name, None, None, DATA_FILE.exceeded(dataset.data.nbytes))])
    for field, column in columns.items():
        if column not in dataset.column_names:
            raise ValueError(f"--map {field}={column}: {name} has no column {column!r}")
    layout = recognise([*dataset.column_names, *columns], tuple(ROW_LAYOUTS), source=name)
    check = FieldChecker(name)
    rows = (
        (i, {**row, **{field: row[column] for field, column in columns.items()}})
        for i, row in enumerate(dataset, start=1)
    )
    sound = ((i, row) for i, row in rows if storable(row, i, check))
    return items_from_rows(layout, sound, check, subset=subset), layout


def _open(source: str, config: str | None, split: str | None, revision: str | None) -> Any:
    """The one split to read, and only its files read: from a ``save_to_disk`` folder, or
    through ``load_dataset`` with the builder's data files narrowed to that split (``split=``
    alone would still prepare every split)."""
    try:
        import datasets  # noqa: PLC0415 - an optional extra
    except ImportError:
        raise ValueError(
            "Hugging Face datasets need the datasets library: pip install 'pcf-review[hf]'"
        ) from None
    folder = Path(source)
    saved = any((folder / name).is_file() for name in SAVED)
    if saved and (config or revision):
        raise ValueError("a save_to_disk folder has no --config or --revision")
    try:
        if folder.is_file():
            return _open_file(datasets, folder, config, split, revision)
        if (folder / "state.json").is_file():  # one saved dataset
            return datasets.load_from_disk(source)
        if saved:  # a saved dataset of splits, each in a folder of its name
            splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))
            chosen = _one_split(list(splits["splits"]), split, source)
            return datasets.load_from_disk(str(folder / chosen))
        builder = datasets.load_dataset_builder(source, config, revision=revision)
        files = builder.config.data_files or {}
        chosen = _one_split(list(files or builder.info.splits or {}), split, source)
        narrowed = {"data_files": {chosen: list(files[chosen])}} if files else {}
        return datasets.load_dataset(source, config, revision=revision, split=chosen, **narrowed)
    except SplitError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:  # not found, offline, no config
        raise ValueError(f"cannot read {source}: {exc}") from None
    except datasets.exceptions.DatasetGenerationError as exc:  # a file it cannot parse
        raise ValueError(f"cannot read {source}: {exc.__cause__ or exc}") from None


def _open_file(
    datasets: Any, path: Path, config: str | None, split: str | None, revision: str | None
) -> Any:
    """A single data file, read by the builder of its suffix as one split."""
    if config or split or revision:
        raise ValueError(f"{path} is one file: it has no --config, --split or --revision")
    builder = FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        kinds = ", ".join(FILE_BUILDERS)
        raise ValueError(f"{path}: a single file must be one of {kinds}, not {path.suffix!r}")
    return datasets.load_dataset(builder, data_files=str(path), split="train")


class SplitError(ValueError):
    """No split, or another than those the dataset has, was chosen."""


def _one_split(splits: list[str], split: str | None, source: str) -> str:
    """The split to read of ``splits``: ``split``, or the only one."""
    if split is None and len(splits) == 1:
        split = splits[0]
    if split not in splits or Path(split).name != split:
        wrong = f", not {split!r}" if split else ": choose one with --split"
        raise SplitError(f"{source} has splits {splits}{wrong}")
    return split


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
