"""What a command imports as it starts: shared by the start-up test and
``benchmarks/cli_startup.py``."""

from __future__ import annotations

import os
import subprocess

HEAVY_MODULES = (
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",
    "statsmodels",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "psycopg",
    "pydantic",
    "httpx",
    "aiohttp",
    "openai",
    "anthropic",
    "altair",
    "vl_convert",
    "streamlit",
    "markdown_it",
)
"""Libraries that take tens of milliseconds or more to import; a light command loads none."""


def modules_imported(command: list[str]) -> set[str]:
    """Every module ``command`` (a Python program) imports, from Python's own import log."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    result = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    log = result.stderr.splitlines()
    rows = (line.split("|") for line in log if line.startswith("import time:"))
    return {row[2].strip() for row in rows if len(row) == 3} - {"package"}


def heavy_modules_imported(command: list[str]) -> list[str]:
    """The :data:`HEAVY_MODULES` that ``command`` imports, itself or through a submodule."""
    loaded = {name.split(".")[0] for name in modules_imported(command)}
    return [name for name in HEAVY_MODULES if name in loaded]
