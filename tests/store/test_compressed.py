"""Compressed columns: long answers are stored zlib-compressed behind a header byte, short ones
plain, and every reader gets back exactly the text or JSON that was written."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from sqlalchemy import text
from sqlmodel import Session, select

from pcf.store import (
    PLAIN,
    ZLIB,
    Call,
    compress_text,
    decompress_text,
    import_items,
    insert_calls,
    item_db_ids,
)
from tests.factories import call_row, make_item, stored_run

ANSWER = json.dumps(
    {
        "candidates": [
            {"key": k, "factuality": 7.5, "hallucination_risk": 0.1, "rationale": "Consistent."}
            for k in "ABCD"
        ],
        "ranking": list("ABCD"),
        "confidence": 0.8,
    }
)


def test_a_long_text_is_compressed_and_a_short_one_stays_plain():
    packed = compress_text(ANSWER)
    assert packed[:1] == ZLIB
    assert len(packed) < len(ANSWER) / 2
    assert decompress_text(packed) == ANSWER
    assert compress_text("ok") == PLAIN + b"ok"
    assert decompress_text(compress_text("")) == ""


def test_a_text_zlib_cannot_shrink_stays_plain():
    noise = base64.b85encode(hashlib.sha512(b"noise").digest()).decode()  # 80 characters
    assert compress_text(noise) == PLAIN + noise.encode("utf-8")
    assert decompress_text(compress_text(noise)) == noise


def test_any_unicode_comes_back():
    for value in ("日本の首都 🗼 e\u0301 \u200b", "\ufffd" * 100, 'line\nline\t\\ "q"' * 20):
        assert decompress_text(compress_text(value)) == value


def test_stored_bytes_of_another_kind_are_refused():
    with pytest.raises(ValueError, match="not a stored text"):
        decompress_text(b"\x07abc")


def test_calls_store_packed_bytes_and_read_back_what_was_written(session: Session):
    dataset = import_items([make_item("q1")], session=session, name="ds", fmt="jsonl")
    run = stored_run(session, dataset.id, k=2)
    item_id = item_db_ids(dataset.id, session=session)["q1"]
    raw = {"id": "chatcmpl-1", "choices": [{"message": {"content": ANSWER}}], "nested": [None]}
    insert_calls(
        [
            call_row(run.id, item_id, 0, response_text=ANSWER, response_raw=raw),
            call_row(run.id, item_id, 1, response_text=None, response_raw=None, ok=False),
        ],
        session=session,
    )
    session.commit()
    stored = session.execute(
        text("SELECT response_text, response_raw FROM call ORDER BY call_index")
    ).all()
    assert bytes(stored[0][0])[:1] == ZLIB
    assert json.loads(decompress_text(bytes(stored[0][1]))) == raw
    assert tuple(stored[1]) == (None, None)
    session.expunge_all()
    first, second = session.exec(select(Call).order_by(Call.call_index)).all()
    assert (first.response_text, first.response_raw) == (ANSWER, raw)
    assert (second.response_text, second.response_raw) == (None, None)
