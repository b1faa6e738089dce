"""Project rules that hold across modules: the layer rule, SQL only in the store, no Streamlit
in the core, a small public API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PCF = ROOT / "pcf"
APPLICATION = ("runs", "analysis", "reports", "labelling")
SQL_NAMES = {"select", "insert", "update", "delete", "text", "func", "col", "or_", "and_"}
RAW_SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE TABLE)\b")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, typing: bool = True) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (with ``typing=False``, not
    those under ``if TYPE_CHECKING:``, which never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if not typing:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def layer(module: str) -> str:
    """``method`` (flat modules, judges, store), one of :data:`APPLICATION`, ``connectors``
    (other tools' formats), ``cli`` or ``api`` (the HTTP API, an edge beside the CLI)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "__main__":
        return "cli"
    if len(parts) > 1 and parts[1] in (*APPLICATION, "connectors", "cli", "api"):
        return parts[1]
    return "method"


ALLOWED = {
    "method": {"method"},
    "runs": {"method", "runs"},
    "labelling": {"method", "labelling"},
    "connectors": {"method", "runs", "labelling", "connectors"},
    "analysis": {"method", "labelling", "connectors", "analysis"},
    "reports": {"method", "labelling", "connectors", "analysis", "reports"},
    "cli": {"method", *APPLICATION, "connectors", "cli", "api"},
    "api": {"method", *APPLICATION, "connectors", "api"},
}
"""Which layers each layer may import: pages, cli and api -> analysis/reports -> connectors
(other tools' formats) -> runs, labelling -> the method (flat modules, judges, store). The
method never imports the connectors or the API."""


def product_files() -> list[Path]:
    return [
        *PCF.rglob("*.py"),
        *(ROOT / "pages").rglob("*.py"),
        ROOT / "app.py",
    ]


def upward_imports(module: str, imported: set[str]) -> set[str]:
    """The modules of ``imported`` that ``module``'s layer may not import."""
    allowed = ALLOWED[layer(module)]
    return {m for m in imported if m.split(".")[0] == "pcf" and layer(m) not in allowed}


@pytest.mark.parametrize("path", sorted(PCF.rglob("*.py")), ids=module_name)
def test_each_module_imports_only_the_layers_below_it(path: Path):
    assert upward_imports(module_name(path), imports(path)) == set()


PAGES = sorted([ROOT / "app.py", *(ROOT / "pages").rglob("*.py")])


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_import_the_application_never_the_cli_or_the_api(path: Path):
    """The app's pages sit beside the CLI: they reach the store through the application and
    mount the API (``app.py``) without importing its routes."""
    imported = {m for m in imports(path) if m.split(".")[0] == "pcf"}
    allowed = {"method", *APPLICATION, "connectors"}
    assert {m for m in imported if layer(m) not in allowed and m != "pcf.api"} == set()


def private_imports(module: str, imported: set[str]) -> set[str]:
    """The modules of ``imported`` private (``_name``) to a package ``module`` is not in."""
    found = set()
    for name in imported:
        parts = name.split(".")
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:depth])
                if not (module == owner or module.startswith(owner + ".")):
                    found.add(name)
                break
    return found


@pytest.mark.parametrize("path", [*sorted(PCF.rglob("*.py")), *PAGES], ids=str)
def test_no_module_imports_another_packages_private_module(path: Path):
    module = module_name(path) if path.is_relative_to(PCF) else path.stem
    assert private_imports(module, imports(path)) == set()


def test_private_imports_are_caught():
    assert private_imports("pcf.runs.live", {"pcf.judges._provider"}) == {"pcf.judges._provider"}
    assert private_imports("pcf.judges.openai_judge", {"pcf.judges._provider"}) == set()


def test_upward_and_sideways_imports_are_caught():
    assert upward_imports("pcf.consensus", {"pcf.runs.live"}) == {"pcf.runs.live"}
    assert upward_imports("pcf.runs.manage", {"pcf.analysis.results"}) == {"pcf.analysis.results"}
    assert upward_imports("pcf.reports.tables", {"pcf.analysis.results", "pcf.store"}) == set()
    assert upward_imports("pcf.analysis.agreement", {"pcf.labelling.human_gold"}) == set()
    assert upward_imports("pcf.labelling.exports", {"pcf.analysis.item_detail"}) == {
        "pcf.analysis.item_detail"
    }
    assert upward_imports("pcf.items", {"pcf.connectors.hf_datasets"}) == {
        "pcf.connectors.hf_datasets"
    }
    assert upward_imports("pcf.store.calls", {"pcf.api.routes"}) == {"pcf.api.routes"}
    assert upward_imports("pcf.runs.live", {"pcf.connectors.recordings"}) == {
        "pcf.connectors.recordings"
    }


def test_no_two_modules_in_pcf_share_a_file_name():
    """A module's name says what it holds: one ``gold.py``, not one per package."""
    names = [p.name for p in PCF.rglob("*.py") if p.name != "__init__.py"]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle of ``graph`` (module -> the modules it imports), as the path that closes it."""
    cycles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append([*path[path.index(module) :], module])
        elif module not in done:
            for imported in sorted(graph.get(module, ())):
                visit(imported, [*path, module])
            done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return cycles


def test_no_import_cycle_joins_modules_of_pcf():
    modules = {module_name(p): p for p in PCF.rglob("*.py")}
    graph = {name: imports(path, typing=False) & modules.keys() for name, path in modules.items()}
    assert import_cycles(graph) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_module_in_pcf_imports_streamlit():
    offenders = [
        str(p) for p in PCF.rglob("*.py") if any(m.split(".")[0] == "streamlit" for m in imports(p))
    ]
    assert offenders == []


def sql_uses(path: Path) -> list[str]:
    """SQL outside the store: SQL builders imported, ``exec``/``execute`` called, raw SQL."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "sqlalchemy",
            "sqlmodel",
        ):
            found += [f"imports {a.name}" for a in node.names if a.name in SQL_NAMES]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("exec", "execute", "query"):
                found.append(f"calls .{node.func.attr}()")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and RAW_SQL.search(node.value)
        ):
            found.append(f"raw SQL {node.value[:40]!r}")
    return [f"{path.relative_to(ROOT)}:{use}" for use in found]


def test_every_sql_statement_lives_in_the_store():
    outside = [p for p in product_files() if PCF / "store" not in p.parents]
    assert [use for path in outside for use in sql_uses(path)] == []


def test_the_sql_check_finds_the_stores_sql():
    """The check above finds SQL where it is: in each module of the store's families."""
    for family in ("datasets", "calls", "leases", "people", "stored_results"):
        assert sql_uses(PCF / "store" / f"{family}.py"), family


def door_bypasses(path: Path) -> list[str]:
    """Imports of a module inside ``pcf.store`` from outside it (the one door is ``pcf.store``)."""
    return sorted(m for m in imports(path, typing=True) if m.startswith("pcf.store."))


def test_the_store_is_reached_through_its_one_door():
    outside = [
        p
        for p in [
            *product_files(),
            *(ROOT / "tests").rglob("*.py"),
            *(ROOT / "benchmarks").glob("*.py"),
        ]
        if PCF / "store" not in p.parents
    ]
    assert {str(p.relative_to(ROOT)): door_bypasses(p) for p in outside if door_bypasses(p)} == {}


def test_the_core_is_importable_with_its_public_api():
    import pcf

    assert all(hasattr(pcf, name) for name in pcf.__all__)


def magic_writes(source: str) -> list[int]:
    """Lines of ``source`` that Streamlit's "magic" would write to the page (a bare string or
    value, e.g. a docstring placed after a constant)."""
    from streamlit.runtime.scriptrunner.magic import add_magic

    return [
        node.lineno
        for node in ast.walk(add_magic(source, "page.py"))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "transparent_write"
    ]


def test_no_page_prints_a_stray_string_to_its_visitors():
    assert magic_writes('"""Docstring."""\nLIMIT = 1\n"""What LIMIT means."""\n') == [3]
    scripts = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    found = {p.name: lines for p in scripts if (lines := magic_writes(p.read_text()))}
    assert found == {}


SETTINGS_MODULE = PCF / "run_settings.py"
SUMMARY_NAMES = {"stopping", "answers_without_usage"}
"""Keys of the stored settings that also name fields of a run's summary and report (its
stopping, its answers without usage): outside the settings module they name those."""


def settings_key_uses(source: str) -> list[str]:
    """Where ``source`` reads a run's settings by string key (``x.settings[...]``,
    ``x.settings.get(...)``, ``... in x.settings``) or spells a stored key of
    :class:`pcf.run_settings.RunSettings` as a string: ``line: what``, in line order."""
    from pcf.run_settings import RunSettings

    keys = set(RunSettings.model_fields) - SUMMARY_NAMES
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in keys:
            found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Subscript | ast.Attribute) and (
            isinstance(node.value, ast.Attribute) and node.value.attr == "settings"
        ):
            if isinstance(node, ast.Subscript) or node.attr in ("get", "items", "keys"):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Attribute) and c.attr == "settings" for c in node.comparators
        ):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {use}" for line, use in sorted(found)]


def test_a_runs_settings_are_read_by_field_outside_their_module():
    """The stored keys of a run's settings are spelled in :mod:`pcf.run_settings` alone."""
    outside = [p for p in product_files() if p != SETTINGS_MODULE]
    found = {str(p.relative_to(ROOT)): settings_key_uses(p.read_text()) for p in outside}
    assert {path: uses for path, uses in found.items() if uses} == {}


def test_the_settings_key_check_finds_string_keys():
    sample = (
        "a = run.settings['stops']\nb = run.settings.get('x')\nc = 'k' in run.settings\n"
        "d = {'canonical_orders': 1}\ne = run.settings.stops\nf = {'stopping': 1}\n"
    )
    assert settings_key_uses(sample) == [
        "1: 'stops'",
        "1: run.settings['stops']",
        "2: run.settings.get",
        "3: 'k' in run.settings",
        "4: 'canonical_orders'",
    ]
    assert settings_key_uses(SETTINGS_MODULE.read_text())  # the module itself spells them
