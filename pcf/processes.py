"""This process and the others on its host: whether a process still exists (a run lease's
holder), the garbage collector held back while much is allocated at once, and freed memory
given back to the system between large steps."""

from __future__ import annotations

import ctypes
import functools
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def process_exists(pid: int) -> bool:
    """Whether a process with id ``pid`` exists on this host (under any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small containers at once: hundreds
    of thousands of dicts and lists trigger repeated full heap scans, and they hold no cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Keep the objects that exist now (the SDKs, SQLAlchemy, pandas...) out of the cyclic garbage
    collector's scans meanwhile: a full scan stalls the event loop and every call in flight."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing where the
    C library has none), so that each step of a large run's end starts from what is live, not
    on top of what the steps before it freed: 60,000 items' end peaks at 290 MB, not 299."""
    if (trim := _malloc_trim()) is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """The process's ``malloc_trim``, looked up once among the symbols already loaded."""
    return getattr(ctypes.CDLL(None), "malloc_trim", None)
