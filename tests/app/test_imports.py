"""The Import page: an upload in the format its columns fit (a file that fits none or has a bad
row kept for another try, a sound one imported and gone) and the Hugging Face form, which reads
hub ids only: never a file or folder of the server."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.analysis.markdown import escape_markdown
from pcf.labelling.audit import audit_log
from pcf.labelling.membership import local_actor
from pcf.store import get_dataset
from tests.app import local_app, open_page

datasets = pytest.importorskip("datasets")
ROWS = [
    {
        "item_id": f"q{n}",
        "prompt": f"Is {n} *odd*?",
        "candidates": [{"id": "a", "text": "Yes."}, {"id": "b", "text": "No."}],
    }
    for n in (1, 2, 3)
]


def submit(at: AppTest, form: str) -> AppTest:
    """Press the Import button of the form whose key holds ``form``."""
    next(b for b in at.button if b.label == "Import" and form in b.form_id).click().run()
    assert not at.exception, at.exception
    return at


def test_an_upload_is_read_in_the_format_its_columns_fit_and_stays_after_a_failed_try(
    session: Session,
):
    """No format fits: each is named with what it lacks; a bad row: named, with the format
    read; every failed try keeps the file; a sound one imports, says its format, and goes."""
    sound = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
    at = open_page(local_app(session), "imports")
    at.file_uploader[0].set_value(("odd.jsonl", sound.replace(b'"candidates"', b'"answers"'), ""))
    (error,) = [e.value for e in submit(at, "file").error]
    assert error.startswith("Nothing imported: " + escape_markdown("odd.jsonl: columns "))
    for lacking in (
        "RewardBench 2 (rewardbench2) lacks id, chosen, rejected",
        "JudgeBench (judgebench) lacks pair_id",
        "items.jsonl (jsonl) lacks candidates",
    ):
        assert escape_markdown(lacking) in error
    assert at.file_uploader[0].value.name == "odd.jsonl"  # kept: no need to pick it again
    at.file_uploader[0].set_value(("odd.jsonl", sound.replace(b'"Is 2 *odd*?"', b"null"), ""))
    submit(at, "file")
    (error,) = [e.value for e in at.error]
    problem = escape_markdown("odd.jsonl:2: prompt: missing")
    plain = "read as items.jsonl, recognised by its columns"
    read = escape_markdown(plain)
    assert error == f"Nothing imported, 1 problem(s):\n\n- {problem}\n\n{read}"
    assert at.file_uploader[0].value.name == "odd.jsonl"
    assert get_dataset("odd", session=session) is None
    at.file_uploader[0].set_value(("odd.jsonl", sound, ""))
    submit(at, "file")
    (success,) = [s.value for s in at.success]
    assert success.startswith(escape_markdown(f"Imported dataset odd (3 items), {plain}"))
    assert at.file_uploader[0].value is None  # imported once: the form is empty again
    assert at.sidebar.selectbox(key="dataset").options == ["odd"]
    log = audit_log(session=session, actor=local_actor(session=session))
    assert [(e["action"], e["target"]) for e in log][:1] == [("dataset_imported", "odd")]


def test_the_hub_form_reads_no_file_or_folder_of_the_server(
    session: Session, tmp_path, monkeypatch
):
    """Sound datasets on the server's disk, by their path and by a relative folder named like a
    hub id, import nothing; an id reaches the hub (here offline: tests/conftest.py)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    datasets.Dataset.from_list(ROWS).save_to_disk(tmp_path / "owner" / "name")
    monkeypatch.chdir(tmp_path)
    at = open_page(local_app(session), "imports")
    assert "pcf import hf PATH" in at.caption[0].value
    shell = "a file or folder on the server is imported in its shell: pcf import hf PATH"
    for source, why in [
        (str(tmp_path / "owner" / "name"), "is no Hugging Face dataset id (owner/name)"),
        ("owner/name", "is also a folder of this server"),
        ("owner/../owner/name", "is no Hugging Face dataset id (owner/name)"),
        ("nobody/nothing", "cannot read nobody/nothing"),
    ]:
        at.text_input(key="imports_hub_source").set_value(source)
        at.text_input(key="imports_hub_name").set_value("name")
        (error,) = [e.value for e in submit(at, "hub").error]
        assert error.startswith("Nothing imported: ")
        assert escape_markdown(why) in error
        assert (escape_markdown(shell) in error) == (source != "nobody/nothing")
    assert get_dataset("name", session=session) is None
    assert not at.success
