"""`pcf judge` as a real process against the wire server: its dataset, command and environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from pcf.cli import app
from tests.factories import make_item
from tests.wire_server import WireServer


def import_dataset(folder: Path, items: int) -> None:
    """Import dataset ``ds``: ``items`` items of 4 candidates, through `pcf import`."""
    items_file = folder / "items.jsonl"
    items_file.write_text(
        "".join(json.dumps(make_item(f"q{i}").to_dict()) + "\n" for i in range(items)),
        encoding="utf-8",
    )
    imported = CliRunner().invoke(app, ["import", "jsonl", str(items_file), "--name", "ds"])
    assert imported.exit_code == 0, imported.output


def judge_command(server: WireServer, *extra: str, k: int, concurrency: int) -> list[str]:
    """`pcf judge ds --name r` with the OpenAI backend at the wire server."""
    return [
        *(sys.executable, "-m", "pcf", "judge", "ds", "--name", "r"),
        *("--backend", "openai", "--base-url", server.openai_base_url, "--model", "m"),
        *("--k", str(k), "--concurrency", str(concurrency)),
        *extra,
    ]


def environment() -> dict[str, str]:
    """This process's environment without provider settings, and a dummy OpenAI key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return env | {"OPENAI_API_KEY": "sk-dummy"}
