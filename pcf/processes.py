"""This process and the others on its host: whether a process still exists (a run lease's
holder), the garbage collector held back while much is allocated at once, and freed memory
given back."""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` option: the size from which a block is mapped alone."""


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
    """Have glibc map each block of 128 KiB or more alone, so that freeing it gives it back at
    once. Its default threshold grows to the largest block freed (up to 32 MiB), after which a
    large run's decoded tables are carved from the heap and stay resident when freed: the
    summary step of a 60,000-item run peaked at 333 MB with that default, 308 MB with this.
    Elsewhere than glibc (macOS, musl, Windows), nothing."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # no mallopt; on Windows, no CDLL(None)
        return
    mallopt(M_MMAP_THRESHOLD, 128 * 1024)
