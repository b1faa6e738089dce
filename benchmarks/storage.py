"""Storage: database bytes per stored judge call, on SQLite files made by the ``pcf`` command.

Two measurements, each in a fresh temporary SQLite file:

- **demo**: ``pcf demo`` (52 items, three simulated runs); the file size over the calls stored.
- **synthetic**: ``--items`` items (2,000 by default) of 4 candidates with realistic lengths (a
  question of about 150 characters, answers of 300 to 1,200), words drawn from the demo's
  texts; ``pcf import``, then a simulated direct run and a simulated PCF run with K=3. The
  figure is the file's growth during the PCF run over the calls that run stored.

Sizes are taken after a WAL checkpoint (the main file then holds everything). Target: at most
2 KB per call. Run: ``.venv/bin/python -m benchmarks.storage [--items N]``. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_ITEMS = ROOT / "data" / "demo" / "items.jsonl"
CANDIDATES = 4
QUESTION_CHARS = 150
ANSWER_CHARS = (300, 1200)


def pcf(database: Path, *args: str) -> None:
    """Run the ``pcf`` command on ``database``."""
    env = {**os.environ, "PCF_DATABASE_URL": f"sqlite:///{database}"}
    subprocess.run([sys.executable, "-m", "pcf", *args], env=env, check=True, capture_output=True)


def size_and_calls(database: Path) -> tuple[int, int]:
    """The file's size in bytes after a WAL checkpoint, and the calls it stores."""
    with closing(sqlite3.connect(database)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (calls,) = connection.execute("SELECT count(*) FROM call").fetchone()
    return database.stat().st_size, calls


def vocabulary() -> list[str]:
    """The words of the demo's questions and answers."""
    words = []
    for line in DEMO_ITEMS.read_text("utf-8").splitlines():
        item = json.loads(line)
        texts = [item["prompt"], *(c["text"] for c in item["candidates"])]
        words += [w for text in texts for w in re.findall(r"\S+", text)]
    return words


def text_of(rng: random.Random, words: list[str], length: int) -> str:
    """Words drawn from ``words`` up to about ``length`` characters."""
    out: list[str] = []
    while sum(map(len, out)) + len(out) < length:
        out.append(rng.choice(words))
    return " ".join(out)


def synthetic_items(count: int, seed: int = 0) -> list[dict]:
    """``count`` items of :data:`CANDIDATES` candidates with realistic lengths."""
    rng, words = random.Random(seed), vocabulary()
    return [
        {
            "item_id": f"s{i:05d}",
            "prompt": text_of(rng, words, QUESTION_CHARS).rstrip(".") + "?",
            "candidates": [
                {"id": f"c{c}", "text": text_of(rng, words, rng.randint(*ANSWER_CHARS))}
                for c in range(CANDIDATES)
            ],
            "gold": "c0",
        }
        for i in range(count)
    ]


def demo(folder: Path) -> dict[str, float]:
    """Bytes per call of the demo database."""
    database = folder / "demo.db"
    pcf(database, "demo")
    size, calls = size_and_calls(database)
    return {"demo_bytes": size, "demo_calls": calls, "demo_bytes_per_call": round(size / calls)}


def synthetic(folder: Path, count: int) -> dict[str, float]:
    """Bytes per call stored by a PCF K=3 run on synthetic items (after a direct run)."""
    database, source = folder / "synthetic.db", folder / "items.jsonl"
    lines = (json.dumps(item) + "\n" for item in synthetic_items(count))
    source.write_text("".join(lines), "utf-8")
    pcf(database, "import", "jsonl", str(source), "--name", "synthetic")
    pcf(database, "judge", "synthetic", "--protocol", "direct", "--name", "direct")
    before, calls_before = size_and_calls(database)
    pcf(database, "judge", "synthetic", "--protocol", "pcf", "--k", "3", "--name", "pcf-k3")
    after, calls_after = size_and_calls(database)
    calls = calls_after - calls_before
    return {
        "synthetic_items": count,
        "synthetic_pcf_calls": calls,
        "synthetic_pcf_growth_bytes": after - before,
        "synthetic_bytes_per_call": round((after - before) / calls),
        "synthetic_database_bytes": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="synthetic items")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcf-storage-") as tmp:
        figures = demo(Path(tmp)) | synthetic(Path(tmp), args.items)
    print(
        f"demo: {figures['demo_calls']:,} calls, {figures['demo_bytes']:,} bytes, "
        f"{figures['demo_bytes_per_call']:,} bytes per call"
    )
    print(
        f"synthetic: {args.items:,} items x {CANDIDATES} candidates, PCF K=3 stored "
        f"{figures['synthetic_pcf_calls']:,} calls in {figures['synthetic_pcf_growth_bytes']:,} "
        f"bytes: {figures['synthetic_bytes_per_call']:,} bytes per call (target <= 2,048)"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
