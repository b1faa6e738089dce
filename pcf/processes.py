"""This process and the others on its host: whether a process still exists (a run lease's
holder), and the garbage collector held back while much is allocated at once."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager


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
