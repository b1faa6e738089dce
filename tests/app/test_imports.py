"""The Import page's Hugging Face form (AppTest cannot drive the file upload; the upload's
import is tested in tests/runs/test_manage.py, its page in tests/e2e/test_import_upload.py)."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from pcf.analysis.markdown import escape_markdown
from pcf.labelling.audit import audit_log
from pcf.labelling.membership import local_actor
from pcf.store import get_dataset
from tests.app import local_app, open_page

datasets = pytest.importorskip("datasets")


def test_a_hub_dataset_with_a_bad_row_imports_nothing_and_a_sound_one_appears(
    session: Session, tmp_path, monkeypatch
):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    rows = [
        {
            "item_id": f"q{n}",
            "prompt": f"Is {n} *odd*?",
            "candidates": [{"id": "a", "text": "Yes."}, {"id": "b", "text": "No."}],
        }
        for n in (1, 2, 3)
    ]
    datasets.Dataset.from_list(rows).save_to_disk(tmp_path / "good")
    rows[1]["prompt"] = None
    datasets.Dataset.from_list(rows).save_to_disk(tmp_path / "bad")
    at = open_page(local_app(session), "imports")

    def submit(folder: str) -> None:
        at.text_input(key="imports_hub_source").set_value(str(tmp_path / folder))
        at.text_input(key="imports_hub_name").set_value(folder)
        next(b for b in at.button if b.label == "Import" and "hub" in b.form_id).click().run()
        assert not at.exception, at.exception

    submit("bad")
    (error,) = [e.value for e in at.error]
    problem = escape_markdown(f"{tmp_path / 'bad'}:2: prompt: missing")
    assert error == f"Nothing imported, 1 problem(s):\n\n- {problem}"
    submit("good")
    (success,) = [s.value for s in at.success]
    assert success.startswith("Imported dataset good \\(3 items\\)")
    assert at.sidebar.selectbox(key="dataset").options == ["good"]
    assert get_dataset("bad", session=session) is None
    log = audit_log(session=session, actor=local_actor(session=session))
    assert [(e["action"], e["target"]) for e in log][:1] == [("dataset_imported", "good")]
