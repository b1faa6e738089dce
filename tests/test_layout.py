"""Project rules that hold across modules."""

from __future__ import annotations

import ast
from pathlib import Path

PCF = Path(__file__).resolve().parents[1] / "pcf"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_in_pcf_imports_streamlit():
    offenders = [str(p) for p in PCF.rglob("*.py") if "streamlit" in imported_modules(p)]
    assert offenders == []


def test_the_core_is_importable_with_its_public_api():
    import pcf

    assert all(hasattr(pcf, name) for name in pcf.__all__)
