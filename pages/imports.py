"""Import: a dataset from an uploaded file or from the Hugging Face hub, as `pcf import` does
(admins). The server's own files and folders are its operator's, through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st
from sqlmodel import Session

from pages.shared import engine, ensure_app_frame, require_permission
from pcf.access import Permission
from pcf.analysis.markdown import escape_markdown
from pcf.choices import ITEM_FORMATS
from pcf.connectors.hf_datasets import hub_id, load_hf
from pcf.errors import DataError
from pcf.items import FORMAT_NAMES, read_as
from pcf.runs.manage import import_dataset, import_upload
from pcf.store import Dataset, session_scope

NOTICE_KEY = "imports_notice"  # what the last import did, shown after the rerun it causes
IMPORTED_KEY = "imports_done"  # imports so far: the upload form's key, so an imported file goes


def run_import(load: Callable[[Session], Dataset], *, recognised: bool = False) -> None:
    """Import in one transaction; say what was imported and as what (``recognised``: in the
    format its columns fit), or every problem and nothing stored."""
    try:
        with session_scope(engine()) as s:
            dataset = load(s)
    except DataError as exc:
        problems = "\n".join(f"- {escape_markdown(line)}" for line in str(exc).splitlines())
        notes = "".join(f"\n\n{escape_markdown(n)}" for n in getattr(exc, "__notes__", ()))
        st.error(f"Nothing imported, {len(exc.problems)} problem(s):\n\n{problems}{notes}")
    except ValueError as exc:
        st.error(f"Nothing imported: {escape_markdown(str(exc))}")
    else:
        st.session_state[IMPORTED_KEY] = st.session_state.get(IMPORTED_KEY, 0) + 1
        st.session_state[NOTICE_KEY] = (
            f"Imported dataset {dataset.name} ({dataset.n_items} items), "
            f"{read_as(dataset.format, recognised=recognised)}: pick it in the sidebar and start "
            "a run on the Runs page."
        )
        st.rerun()


ensure_app_frame()
actor = require_permission(Permission.IMPORT)
st.title("Import")
st.caption(
    "A new dataset, all or nothing: the checks and size limits of `pcf import`; every problem "
    "is named by its line and field. Files and folders on the server are imported in its "
    "shell, by its operator: `pcf import FORMAT FILE`, `pcf import hf PATH`."
)
if notice := st.session_state.pop(NOTICE_KEY, None):
    st.success(escape_markdown(notice))

upload_tab, hub_tab = st.tabs(["File", "Hugging Face"])
# A file kept after a failed try; a new form (its widgets new and empty) after an import.
with upload_tab, st.form(f"imports_file_{st.session_state.get(IMPORTED_KEY, 0)}"):
    file = st.file_uploader("Dataset file", type=["jsonl", "json", "csv", "parquet"])
    fmt = st.selectbox(
        "Format",
        [None, *ITEM_FORMATS],
        format_func=lambda f: f"{FORMAT_NAMES[f]} ({f})" if f else "recognised by its columns",
    )
    name = st.text_input("Dataset name", placeholder="the file's name")
    if st.form_submit_button("Import", type="primary") and file is not None:
        data, filename = file.getvalue(), file.name
        run_import(
            lambda s: import_upload(
                data, filename, session=s, actor=actor, name=name or Path(filename).stem, fmt=fmt
            ),
            recognised=fmt is None,
        )
with hub_tab, st.form("imports_hub"):
    source = st.text_input(
        "Hugging Face dataset",
        key="imports_hub_source",
        placeholder="allenai/reward-bench-2",
        help="Its id on the hub (owner/name); never a path on the server.",
    )
    split = st.text_input("Split", placeholder="needed when it has several")
    hub_name = st.text_input("Dataset name", key="imports_hub_name", placeholder="its id's")
    if st.form_submit_button("Import", type="primary") and source:

        def from_hub(s: Session) -> Dataset:
            items, layout = load_hf(hub_id(source), split=split or None)
            return import_dataset(
                items,
                session=s,
                actor=actor,
                name=hub_name or Path(source).stem,
                fmt=layout,
                source_path=source,
            )

        run_import(from_hub, recognised=True)
