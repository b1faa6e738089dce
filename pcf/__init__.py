"""PCF Review: permutation-consensus factuality judging; the public API is :data:`_EXPORTS`.

Names load on first use (PEP 562), so importing :mod:`pcf` or a light submodule does not import
numpy or scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "pcf.choices": ("RULES", "SCHEDULES"),
    "pcf.consensus": ("JudgmentArrays", "consensus", "pack", "winners"),
    "pcf.decisions": ("Decisions", "aggregate", "decide"),
    "pcf.errors": ("DataError", "Problem"),
    "pcf.evaluation": ("compare_paired",),
    "pcf.flags": ("FLAGS", "FLAG_HELP"),
    "pcf.instability": ("slot_bias",),
    "pcf.items": ("ITEM_FORMATS", "Candidate", "Item", "load_dataset"),
    "pcf.judgments": ("Judgment", "read_judgments", "write_judgments"),
    "pcf.orderings": ("canonical_order", "schedule", "slot_coverage"),
    "pcf.pairwise": ("apoc_decide", "is_ballpark_question"),
    "pcf.parsing": ("parse_listwise", "parse_pairwise"),
    "pcf.prompts": ("neutral_keys", "render_listwise", "render_pairwise"),
    "pcf.weights": ("PRESETS", "Weights"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)  # noqa: PLE0605 - one list of names, in _EXPORTS


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'pcf' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
