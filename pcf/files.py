"""The files a user names, read with care: regular files only, each kind with a size cap.

A device (``/dev/zero``), a FIFO or a folder is refused at once: opening does not wait for a
writer, and nothing is read from it. A file over its kind's cap is refused before it is read,
and a file that grows past the cap while it is read stops there. Each refusal is one line that
names the file and the limit. The caps (docs/reports.md lists them) fit the real data with room to
spare and can be raised, each by its environment variable:

- :data:`DATA_FILE`: datasets, recordings and judgments files, ``PCF_MAX_FILE_MB`` (1024 MB);
- :data:`PRICES_FILE`: the price table named by ``PCF_PRICES``, ``PCF_MAX_PRICES_MB`` (1 MB);
- :data:`GUIDELINES_FILE`: labelling guidelines, ``PCF_MAX_GUIDELINES_MB`` (1 MB).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MB = 1 << 20


@dataclass(frozen=True)
class Limit:
    """A cap that an environment variable can raise (or lower).

    Attributes:
        env: the variable, holding a whole number of ``unit``.
        default: the cap, in ``unit``, when the variable is not set.
        unit: what the variable counts (``MB``, ``characters``).
        scale: how many bytes or characters one ``unit`` is.
    """

    env: str
    default: int
    unit: str
    scale: int = 1

    def value(self) -> int:
        """The cap in bytes or characters.

        Raises:
            ValueError: the variable is set but is not a whole number above 0.
        """
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default * self.scale
        if not raw.isdigit() or int(raw) == 0:
            raise ValueError(f"{self.env}={raw!r}: expected a whole number of {self.unit} above 0")
        return int(raw) * self.scale

    def exceeded(self, size: int) -> str:
        """Why ``size`` is refused: the size, the limit and how to raise it."""
        shown = f"{size / self.scale:,.1f}" if self.scale > 1 else f"{size:,}"
        return (
            f"{shown} {self.unit}, over the limit of {self.value() // self.scale:,} {self.unit} "
            f"(set {self.env} to raise it)"
        )


DATA_FILE = Limit("PCF_MAX_FILE_MB", 1024, "MB", MB)
"""Datasets to import or validate, recordings to replay, judgments files to aggregate."""
PRICES_FILE = Limit("PCF_MAX_PRICES_MB", 1, "MB", MB)
"""The price table named by ``PCF_PRICES``: a few hundred bytes per model."""
GUIDELINES_FILE = Limit("PCF_MAX_GUIDELINES_MB", 1, "MB", MB)
"""A labelling plan's guidelines (Markdown); the plan keeps at most 100,000 characters."""


class InputFileError(ValueError):
    """A file that is not read: missing, not a regular file, or over its cap (one line).

    Attributes:
        path: the file.
        reason: why, without the file's name.
    """

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@contextmanager
def open_input(path: str | Path, limit: Limit) -> Iterator[BinaryIO]:
    """``path`` opened for reading, once it is known to be a regular file within ``limit``.

    Raises:
        InputFileError: the file is missing or unreadable, is not a regular file, or is over
            the limit; the message names the file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block here
    except FileNotFoundError:
        raise InputFileError(path, "file not found") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read it ({exc.strerror or exc})") from exc
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise InputFileError(path, f"not a regular file ({_kind(status.st_mode)})")
        if status.st_size > limit.value():
            raise InputFileError(path, limit.exceeded(status.st_size))
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        yield file


def read_input(path: str | Path, limit: Limit) -> bytes:
    """The bytes of a regular file of at most ``limit`` (see :func:`open_input`)."""
    with open_input(path, limit) as file:
        return read_capped(file, path, limit)


def read_capped(file: BinaryIO, path: str | Path, limit: Limit) -> bytes:
    """The rest of an open file, stopping with :class:`InputFileError` past ``limit`` bytes."""
    return b"".join(_capped(iter(lambda: file.read(MB), b""), path, limit))


def capped_lines(file: BinaryIO, path: str | Path, limit: Limit) -> Iterator[bytes]:
    """The lines of an open file, stopping with :class:`InputFileError` past ``limit`` bytes."""
    return _capped(file, path, limit)


def _capped(blocks: Iterable[bytes], path: str | Path, limit: Limit) -> Iterator[bytes]:
    """``blocks`` read on, until they add up to more than ``limit`` (a file that grew)."""
    total, cap = 0, limit.value()
    for block in blocks:
        total += len(block)
        if total > cap:
            raise InputFileError(path, f"grew past the limit while read: {limit.exceeded(total)}")
        yield block


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")
