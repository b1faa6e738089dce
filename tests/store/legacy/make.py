"""Build the legacy databases with commit f9302a1's own code (run once; the files are kept).

    .venv/bin/python -m tests.store.legacy.make                           # SQLite, decisions
    bash .ci/with-postgres .venv/bin/python -m tests.store.legacy.make    # and PostgreSQL

The release's ``pcf`` and ``data/`` are unpacked from git into a temporary folder and run as
that release's user would: ``pcf demo``, ``pcf import`` of a small file with hard text (every
script, quotes, a long answer), a PCF run on it, and labels by two annotators (one corrected).
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from tests.demo_database import TEST_DATABASE_URL_ENV, postgres_server
from tests.store.legacy import DECISIONS_FILE, POSTGRES_FILE, RELEASE, SQLITE_FILE

ROOT = Path(__file__).resolve().parents[3]
ITEMS = [
    {
        "item_id": "hard-text-1",
        "prompt": "Which city is the capital of Japan? 日本の首都はどこですか？",
        "candidates": [
            {"id": "tokyo", "text": "Tokyo (東京) is the capital. 🗼"},
            {"id": "kyoto", "text": "Kyoto (京都) was the capital until 1869."},
            {"id": "osaka", "text": 'Osaka, "the kitchen of the nation" \\ not the capital.'},
        ],
        "gold": "tokyo",
        "bucket": "geography",
    },
    {
        "item_id": "hard-text-2",
        "prompt": "ما هي عاصمة مصر؟ (What is the capital of Egypt?)",
        "candidates": [
            {"id": "cairo", "text": "القاهرة — Cairo, on the Nile.\nSecond line\twith a tab."},
            {"id": "alex", "text": "Alexandria (الإسكندرية) is the capital."},
        ],
        "gold": "cairo",
        "bucket": "geography",
    },
    {
        "item_id": "hard-text-3",
        "prompt": "Summarise the water cycle in detail.",
        "candidates": [
            {"id": "long", "text": "Evaporation, condensation, precipitation. " * 400},
            {"id": "short", "text": "Water evaporates and rains back down. e\u0301 ñ ß Ω ≠ ∞"},
            {"id": "wrong", "text": "Clouds are made of cotton; *rain* is `sugar`. <b>x</b>"},
            {"id": "none", "text": "I cannot answer that. \u200b(zero-width space)"},
        ],
        "gold": "long",
        "bucket": "science",
    },
    {
        "item_id": "hard-text-4",
        "prompt": "How many legs does a spider have?",
        "candidates": [
            {"id": "eight", "text": "Eight."},
            {"id": "six", "text": "Six, like every insect."},
        ],
        "gold": None,
        "bucket": None,
    },
]
LABELS = [
    # (dataset, item, annotator, choice, confidence, tags, notes)
    ("demo", "demo-003", "alice", None, 1.0, ["sure"], "checked the source"),
    ("demo", "demo-003", "bob", None, 0.5, [], ""),
    ("demo", "demo-001", "alice", "none_correct", None, ["ambiguous"], "both are wrong"),
    ("demo", "demo-001", "bob", "cannot_tell", 0.25, [], "no idea"),
    ("imported", "hard-text-1", "alice", "kyoto", 0.75, [], "first thought"),
    ("imported", "hard-text-1", "alice", "tokyo", 1.0, ["corrected"], "fixed: Tōkyō ✓"),
    ("imported", "hard-text-2", "bob", "cairo", 1.0, ["عربي"], "القاهرة"),
    ("imported", "hard-text-3", "bob", "short", 0.5, [], "line one\nline two"),
]
BUILD_LABELS = """
import sys
from pcf.store import add_adjudication, get_dataset, get_engine, item_db_ids, load_items
from pcf.store import write_with_retry
import json, pcf
assert pcf.__file__.startswith(sys.argv[1]), pcf.__file__
for dataset, item, annotator, choice, confidence, tags, notes in json.loads(sys.argv[2]):
    def work(session):
        found = get_dataset(dataset, session=session)
        db_id = item_db_ids(found.id, session=session)[item]
        chosen = choice or next(i for i in load_items(found.id, session=session)
                                if i.item_id == item).candidates[0].id
        add_adjudication(db_id, session=session, annotator=annotator, choice=chosen,
                         confidence=confidence, tags=tags, notes=notes)
    write_with_retry(get_engine(), work)
"""


def build(url: str, code: Path, work: Path) -> dict[str, list[dict]]:
    """Build the database at ``url`` with the release's code; its runs' decisions."""
    env = {**os.environ, "PYTHONPATH": str(code), "PCF_DATABASE_URL": url}

    def pcf(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "pcf", *args],
            cwd=code,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    pcf("demo")
    items = work / "hard-text.jsonl"
    items.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in ITEMS), "utf-8")
    pcf("import", "jsonl", str(items), "--name", "imported")
    pcf("judge", "imported", "--protocol", "direct", "--name", "imported-direct")
    pcf("judge", "imported", "--k", "3", "--executions", "2", "--name", "imported-pcf")
    subprocess.run(
        [sys.executable, "-c", BUILD_LABELS, str(code), json.dumps(LABELS)],
        cwd=code,
        env=env,
        check=True,
    )
    runs = [r["name"] for r in json.loads(pcf("runs"))["runs"]]
    decisions = {}
    for run in runs:
        out = work / "decisions.jsonl"
        pcf("export", run, "--what", "decisions", "--out", str(out))
        decisions[run] = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    return decisions


def unpack_release(folder: Path) -> Path:
    """The release's ``pcf`` and ``data`` folders, from git, in ``folder``."""
    archive = subprocess.run(
        ["git", "archive", RELEASE, "pcf", "data"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    code = folder / "code"
    code.mkdir()
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    return code


def pg_dump(url: str) -> str:
    """The database at ``url`` as SQL statements, without psql's backslash commands."""
    parsed = make_url(url)
    tool = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))[-1]
    dump = subprocess.run(
        [
            str(tool),
            "--inserts",
            "--rows-per-insert=200",
            "--no-owner",
            "--no-privileges",
            "--no-comments",
            f"--host={parsed.host}",
            f"--port={parsed.port}",
            f"--username={parsed.username}",
            parsed.database,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return "".join(line for line in dump.splitlines(keepends=True) if not line.startswith("\\"))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pcf-legacy-") as tmp:
        folder = Path(tmp)
        code = unpack_release(folder)
        database = folder / "legacy.db"
        decisions = build(f"sqlite:///{database}", code, folder)
        compact = folder / "compact.db"
        engine = create_engine(f"sqlite:///{database}", poolclass=NullPool)
        with engine.connect() as connection:
            connection.execute(text(f"VACUUM INTO '{compact}'"))
        engine.dispose()
        SQLITE_FILE.write_bytes(lzma.compress(compact.read_bytes(), preset=9))
        DECISIONS_FILE.write_bytes(lzma.compress(json.dumps(decisions).encode(), preset=9))
        print(f"wrote {SQLITE_FILE} and {DECISIONS_FILE}")
        if postgres_server() is None:
            print(f"no PostgreSQL ({TEST_DATABASE_URL_ENV} unset): kept {POSTGRES_FILE}")
            return
        admin = create_engine(postgres_server(), isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as connection:
            connection.execute(text("DROP DATABASE IF EXISTS pcf_legacy"))
            connection.execute(text("CREATE DATABASE pcf_legacy"))
        url = postgres_server().set(database="pcf_legacy").render_as_string(hide_password=False)
        if build(url, code, folder) != decisions:
            raise SystemExit("the release's decisions differ between SQLite and PostgreSQL")
        POSTGRES_FILE.write_bytes(lzma.compress(pg_dump(url).encode(), preset=9))
        with admin.connect() as connection:
            connection.execute(text("DROP DATABASE pcf_legacy WITH (FORCE)"))
        print(f"wrote {POSTGRES_FILE}")


if __name__ == "__main__":
    main()
