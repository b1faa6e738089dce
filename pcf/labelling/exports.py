"""A dataset's human side for other tools: every label, and each item's human gold with its
labels and resolutions, with the item's texts (formats: docs/reviewing.md, "Exports").
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from sqlmodel import Session

from pcf.files import replaced, write_whole
from pcf.items import Item, candidate_titles
from pcf.labelling.adjudications import adjudications_jsonl, csv_text
from pcf.labelling.human_gold import dataset_gold, rule_text
from pcf.labelling.plan import Plan
from pcf.store import adjudication_records, current_labels, load_items, resolutions

GOLD_FORMATS = ("jsonl", "csv", "parquet", "hf")
SUFFIXES = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
HF_DATA = Path("data") / "train-00000-of-00001.parquet"  # the hub's name of split train's file
HF_SAVED = Path("train") / "data-00000-of-00001.arrow"  # save_to_disk's name of split train's file
HF_CONFIG = (
    "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
    f"    path: {HF_DATA.as_posix()}\n---\n\n"
)
"""The card's front matter: ``load_dataset`` reads the Parquet file alone, not the saved copy."""


def _strings(*names: str) -> pa.StructType:
    """A Parquet struct of text fields."""
    return pa.struct([(name, pa.string()) for name in names])


CANDIDATES = pa.list_(_strings("id", "text"))
LABEL_SCHEMA = pa.schema(
    [
        ("label_id", pa.int64()),
        ("item_id", pa.string()),
        ("prompt", pa.string()),
        ("candidates", CANDIDATES),
        ("annotator", pa.string()),
        ("choice", pa.string()),
        ("choice_text", pa.string()),
        ("choice_title", pa.string()),
        ("confidence", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("notes", pa.string()),
        ("created_at", pa.string()),
        ("supersedes", pa.int64()),
        ("source", pa.string()),
    ]
)
GOLD_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("prompt", pa.string()),
        ("candidates", CANDIDATES),
        ("human_gold", pa.string()),
        ("human_gold_text", pa.string()),
        ("human_gold_title", pa.string()),
        ("source", pa.string()),
        ("single_label", pa.bool_()),
        ("dataset_gold", pa.string()),
        ("labels", pa.list_(_strings("annotator", "choice"))),
        ("resolutions", pa.list_(_strings("choice", "reason", "resolved_by", "created_at"))),
    ]
)


def _item_texts(item: Item) -> dict[str, Any]:
    """The item's key, prompt and candidates, as every exported record holds them."""
    candidates = [{"id": c.id, "text": c.text} for c in item.candidates]
    return {"item_id": item.item_id, "prompt": item.prompt, "candidates": candidates}


def _by_item(frame: pd.DataFrame, columns: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``{item key: its rows' columns as records}``, in the frame's order."""
    return {
        key: part[columns].to_dict("records") for key, part in frame.groupby("item_key", sort=False)
    }


def label_records(dataset_id: int, *, session: Session) -> list[dict[str, Any]]:
    """Every label of the dataset, corrections included, oldest first, with item texts."""
    items = {item.item_id: item for item in load_items(dataset_id, session=session)}
    titles = functools.cache(lambda key: candidate_titles(items[key]))  # per labelled item
    out = []
    for record in adjudication_records(dataset_id, session=session):
        item, choice = items[record["item_id"]], record["choice"]
        text = item.text_of(choice) if choice in item.candidate_ids else None
        title = titles(item.item_id).get(choice)
        out.append(
            {"label_id": record["id"], **_item_texts(item), "annotator": record["annotator"]}
            | {"choice": choice, "choice_text": text, "choice_title": title}
            | {name: record[name] for name in ("confidence", "tags", "notes", "created_at")}
            | {"supersedes": record["supersedes"], "source": record["source"]}
        )
    return out


def gold_records(dataset_id: int, *, session: Session) -> list[dict[str, Any]]:
    """One record per item with human gold (:class:`~pcf.labelling.human_gold.HumanGold`): the
    gold, its source, ``single_label``, its current labels and resolutions, the item's texts."""
    human = dataset_gold(dataset_id, session=session)
    current = current_labels(dataset_id, session=session)
    labels = _by_item(
        current.sort_values(["created_at", "adjudication_id"]), ["annotator", "choice"]
    )
    resolved = resolutions(dataset_id, session=session)
    resolved["created_at"] = resolved["created_at"].map(lambda at: at.isoformat())
    decided = _by_item(resolved, ["choice", "reason", "resolved_by", "created_at"])
    out = []
    for item in load_items(dataset_id, session=session):
        if item.item_id not in human.gold:
            continue
        gold = human.gold[item.item_id]
        out.append(
            _item_texts(item)
            | {
                "human_gold": gold,
                "human_gold_text": item.text_of(gold) if gold is not None else None,
                "human_gold_title": candidate_titles(item)[gold] if gold is not None else None,
                "source": human.source[item.item_id],
                "single_label": item.item_id in human.single_label,
                "dataset_gold": item.gold,
                "labels": labels.get(item.item_id, []),
                "resolutions": decided.get(item.item_id, []),
            }
        )
    return out


def export_format(path: Path, fmt: str | None) -> str:
    """The format to write ``path`` in: ``fmt``, else the one its suffix names, else JSON Lines.

    Raises:
        ValueError: an unknown ``fmt``, or a suffix that names another format.
    """
    named = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        return named or "jsonl"
    if fmt not in GOLD_FORMATS:
        raise ValueError(f"--format must be one of {', '.join(GOLD_FORMATS)}")
    if named is not None and named != fmt:
        raise ValueError(f"--out {path.name} names {named} but --format is {fmt}; make them agree")
    return fmt


def dataset_card(name: str, what: str, records: Sequence[Mapping[str, Any]], plan: Plan) -> str:
    """The README.md of an ``hf`` export of dataset ``name``'s ``labels`` or ``gold``: what it
    holds, the labelling plan, the gold rule and the counts."""
    items = len({r["item_id"] for r in records})
    if what == "labels":
        people = len({r["annotator"] for r in records})
        counts = f"{len(records)} labels (corrections included) of {items} items by {people} people"
    else:
        sources = Counter(r["source"] or "labels that give none" for r in records)
        counts = f"{items} items; gold from " + (
            ", ".join(f"{k}: {n}" for k, n in sources.items()) or "none"
        )
    later = ", the later ones only where labels disagree or the item is flagged"
    return (
        f"# {name}: {what} from PCF Review\n\n"
        f"Written by `pcf {what} export {name} --format hf`; "
        "`datasets.load_dataset(FOLDER)` and `datasets.load_from_disk(FOLDER)` read it as "
        "split `train`.\n\n"
        f"- Plan: {plan.labels_per_item} label(s) per item{later if plan.adaptive else ''}.\n"
        f"- Rule ({plan.gold_rule}): {rule_text(plan.gold_rule)}\n"
        f"- Counts: {counts}.\n"
    )


def write_records(
    records: Sequence[Mapping[str, Any]], path: Path, fmt: str, schema: pa.Schema, card: str = ""
) -> None:
    """Write ``records`` to ``path`` as ``fmt`` (Parquet following ``schema``; ``hf``: a folder
    of the Parquet file and ``card``).

    Raises:
        ValueError: an unknown format.
        OSError: the file cannot be written.
    """
    if fmt not in GOLD_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(GOLD_FORMATS)}")
    if fmt == "hf":
        (path / HF_DATA).parent.mkdir(parents=True, exist_ok=True)
        write_records(records, path / HF_DATA, "parquet", schema)
        write_whole(path / "README.md", HF_CONFIG + card)
        _write_saved(pa.Table.from_pylist(list(records), schema=schema), path)
        return
    if fmt == "parquet":
        with replaced(path) as temporary:
            pq.write_table(pa.Table.from_pylist(list(records), schema=schema), temporary)
        return
    if fmt == "jsonl":
        text = adjudications_jsonl(records)
    else:
        as_json = (
            {
                k: json.dumps(v, ensure_ascii=False) if isinstance(v, list | dict) else v
                for k, v in r.items()
            }
            for r in records
        )
        text = csv_text(as_json, schema.names)
    write_whole(path, text)


def _write_saved(table: pa.Table, folder: Path) -> None:
    """``table`` as split ``train`` of a dataset that ``save_to_disk`` would have written in
    ``folder`` (an Arrow stream and the two files that describe it), for ``load_from_disk``."""
    saved = folder / HF_SAVED
    saved.parent.mkdir(parents=True, exist_ok=True)
    with (
        replaced(saved) as temporary,
        pa.OSFile(str(temporary), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as stream,
    ):
        stream.write_table(table)
    fingerprint = hashlib.sha256(saved.read_bytes()).hexdigest()[:16]
    state: dict[str, Any] = {
        "_data_files": [{"filename": HF_SAVED.name}],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": "train",
    }
    write_whole(saved.parent / "state.json", json.dumps(state, indent=2))
    write_whole(saved.parent / "dataset_info.json", json.dumps({"description": ""}))
    write_whole(folder / "dataset_dict.json", json.dumps({"splits": ["train"]}))
