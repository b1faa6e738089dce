"""Column types that store long text compressed, transparently for readers: answers and raw
responses are hundreds of bytes to kilobytes each; SQLite compresses nothing and PostgreSQL's
TOAST only values over about 2 KB. These types store a header byte, ``\\x00`` then the UTF-8
text or ``\\x01`` then its zlib stream, the same on both databases (plain SQL sees bytes: read
them through :mod:`pcf.store`).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from sqlalchemy import Dialect, LargeBinary
from sqlalchemy.types import TypeDecorator

PLAIN = b"\x00"
ZLIB = b"\x01"
COMPRESS_FROM = 64  # bytes: zlib makes no shorter text smaller


def compress_text(text: str) -> bytes:
    """``text`` as stored: a header byte, then its UTF-8 bytes, compressed when that is smaller."""
    data = text.encode("utf-8")
    if len(data) >= COMPRESS_FROM:
        compressed = zlib.compress(data)
        if len(compressed) < len(data):
            return ZLIB + compressed
    return PLAIN + data


def decompress_text(stored: bytes) -> str:
    """The text :func:`compress_text` stored (ValueError for another header)."""
    header, body = stored[:1], stored[1:]
    if header == ZLIB:
        return zlib.decompress(body).decode("utf-8")
    if header == PLAIN:
        return body.decode("utf-8")
    raise ValueError(f"not a stored text: header {header!r}")


class CompressedText(TypeDecorator[str]):
    """A text column stored as :func:`compress_text` bytes (a BLOB, or BYTEA on PostgreSQL)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> bytes | None:
        return None if value is None else compress_text(value)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> str | None:
        return None if value is None else decompress_text(bytes(value))


class CompressedJSON(TypeDecorator[Any]):
    """A JSON column stored as :func:`compress_text` bytes of its JSON text; None is SQL NULL."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        return None if value is None else compress_text(json.dumps(value))

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(decompress_text(bytes(value)))
