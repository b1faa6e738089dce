"""A database that cannot be used, met for real by `pcf judge` processes: a disk that fills up
mid-run (a small tmpfs), a read-only database (the immutable attribute, which stops root too,
and a read-only mount), and a database file moved away mid-run. Each gives one line and exit
code 1, never a traceback; nothing stored is lost or damaged, and the run resumes.

Mounting and ``chattr`` need root (CI runs as root); where they are refused the test is skipped.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from streamlit.testing.v1 import AppTest

from pcf.analysis.markdown import escape_markdown
from pcf.labelling.membership import set_local_name
from pcf.store import get_engine, session_scope, storage_problem
from tests.app import APP, LOCAL_NAME, open_page
from tests.demo_database import copy_demo
from tests.runs.processes import environment, import_dataset, judge_command
from tests.runs.test_batch import answer
from tests.wire_server import Scripted, WireRequest, WireServer

sqlite_only = pytest.mark.sqlite_only("full disks, read-only and moved files are SQLite's")

ITEMS, K = 4, 3
PLANNED = ITEMS * K
FAILS_AT = 5
"""The request during which the disk fills up (or the file moves away): 5 calls are stored."""
HANG_S = 300  # only catches a hang: a loaded machine is slow, not wrong
RESUMES = "try again: a run resumes where it stopped"


def root_command(*command: str) -> None:
    """Run a command that needs root, or skip the test where it is refused."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"`{' '.join(command)}` is refused here: {done.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 2 MB tmpfs of its own."""
    disk = tmp_path / "disk"
    disk.mkdir()
    root_command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk))
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Give paths the immutable attribute (``chattr +i``: not even root may write them); it is
    taken off again after the test."""
    made: list[Path] = []

    def make(path: Path) -> None:
        root_command("chattr", "+i", str(path))
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def use_database(monkeypatch: pytest.MonkeyPatch, path: Path) -> str:
    url = f"sqlite:///{path}"
    monkeypatch.setenv("PCF_DATABASE_URL", url)
    return url


def imported(monkeypatch: pytest.MonkeyPatch, database: Path, folder: Path) -> None:
    """Dataset ``ds`` in the SQLite file ``database``, with no connection of this process left
    open on it."""
    url = use_database(monkeypatch, database)
    import_dataset(folder, ITEMS)
    get_engine(url).dispose()


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, env=environment(), capture_output=True, text=True, timeout=HANG_S, check=False
    )


def judge(server: WireServer) -> subprocess.CompletedProcess:
    """`pcf judge` of run ``r`` at the server, one call at a time."""
    return run(judge_command(server, k=K, concurrency=1))


def stored_calls(database: Path) -> tuple[int, str]:
    """How many calls the file holds, and its integrity check."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as connection:
        calls = connection.execute("SELECT count(*) FROM call").fetchone()[0]
        return calls, connection.execute("PRAGMA integrity_check").fetchone()[0]


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The error line of a command that failed with exit code 1 and no traceback."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    *progress, error = done.stderr.splitlines()
    assert all(line.startswith("judging r: ") for line in progress), done.stderr
    return error


def fill(path: Path) -> None:
    """Take every free byte of the disk ``path`` is on."""
    disk = os.statvfs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, disk.f_bavail * disk.f_frsize)
    finally:
        os.close(fd)
    assert os.statvfs(path.parent).f_bavail == 0


def resumed(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["this_invocation"]


@sqlite_only
def test_a_full_disk_stops_a_run_in_one_line_and_it_resumes_once_there_is_room(
    small_disk, monkeypatch, tmp_path
):
    database, filler = small_disk / "pcf.db", small_disk / "filler"
    imported(monkeypatch, database, tmp_path)

    def fill_then_answer(request: WireRequest) -> Scripted:
        if request.index == FAILS_AT:
            fill(filler)
        return answer(request)

    with WireServer(fill_then_answer) as server:
        full = judge(server)
        stored, integrity = stored_calls(database)
        filler.unlink()
        again = resumed(judge(server))
        asked = server.counts
    assert one_line_error(full) == (
        f"error: the disk that holds the database {database} is full; nothing stored was "
        f"lost. Free some space, then {RESUMES}"
    )
    assert (stored, integrity) == (FAILS_AT, "ok")
    assert (again["already_stored"], again["attempts"]) == (FAILS_AT, PLANNED - FAILS_AT)
    assert sum(asked.values()) == PLANNED + 1  # the answer that met the full disk, again


@sqlite_only
def test_a_read_only_database_file_refuses_the_run_in_one_line_and_can_be_read(
    immutable, monkeypatch, tmp_path
):
    database = tmp_path / "pcf.db"
    imported(monkeypatch, database, tmp_path)
    immutable(database)
    with WireServer(answer) as server:
        refused = judge(server)
        listed = run([sys.executable, "-m", "pcf", "runs"])
        sent = server.request_count
    assert one_line_error(refused) == (
        f"error: the database {database} is read-only (its file or its file system cannot be "
        "written), so nothing was written. Make it writable, or point PCF_DATABASE_URL at a "
        "writable copy, and try again"
    )
    assert sent == 0
    assert listed.returncode == 0, listed.stderr
    assert [d["name"] for d in json.loads(listed.stdout)["datasets"]] == ["ds"]
    assert stored_calls(database) == (0, "ok")


@sqlite_only
def test_a_database_on_a_read_only_file_system_cannot_be_opened_and_says_why(
    small_disk, monkeypatch, tmp_path
):
    database = small_disk / "pcf.db"
    imported(monkeypatch, database, tmp_path)
    root_command("mount", "-o", "remount,ro", str(small_disk))
    with WireServer(answer) as server:
        refused = judge(server)
    assert one_line_error(refused) == (
        f"error: cannot open the database file {database}: it is on a read-only file system. "
        f"Once it can be opened, {RESUMES}"
    )


@sqlite_only
def test_a_database_file_moved_away_mid_run_stops_it_in_one_line_and_it_resumes_there(
    monkeypatch, tmp_path
):
    """SQLite alone would go on writing into the moved file, where nobody looks: the command
    stops in one line instead; put back, the file holds every call stored and the run resumes."""
    database, moved = tmp_path / "pcf.db", tmp_path / "moved.db"
    imported(monkeypatch, database, tmp_path)

    def move_then_answer(request: WireRequest) -> Scripted:
        if request.index == FAILS_AT:
            database.rename(moved)
        return answer(request)

    with WireServer(move_then_answer) as server:
        gone = judge(server)
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pcf.db"))
        moved.rename(database)
        stored, integrity = stored_calls(database)
        again = resumed(judge(server))
        asked = server.counts
    assert one_line_error(gone) == (
        f"error: the database file {database} was moved or deleted while in use, so nothing "
        "more was written to it. Put it back (or point PCF_DATABASE_URL at where it is now), "
        f"then {RESUMES}"
    )
    assert "pcf.db" not in left  # no new, empty database made in its place
    assert (stored, integrity) == (FAILS_AT, "ok")
    assert (again["already_stored"], again["attempts"]) == (FAILS_AT, PLANNED - FAILS_AT)
    assert sum(asked.values()) == PLANNED + 1


@sqlite_only
def test_the_app_shows_a_database_it_cannot_open_in_one_line(immutable, monkeypatch, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    database = folder / "pcf.db"
    imported(monkeypatch, database, tmp_path)
    immutable(folder)  # no journal can be made beside the file: SQLite cannot open it
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception, [e.message for e in at.exception]
    problem = (
        f"cannot open the database file {database}: it or its folder cannot be read or "
        f"written (permissions, an immutable attribute). Once it can be opened, {RESUMES}"
    )
    assert [e.value for e in at.error] == [
        f"The database cannot be used: {escape_markdown(problem)}."
    ]


@sqlite_only
def test_a_database_file_deleted_mid_run_stops_it_before_another_call_is_paid(
    monkeypatch, tmp_path
):
    """SQLite alone goes on writing into the deleted file: every answer paid, then lost."""
    database = tmp_path / "pcf.db"
    imported(monkeypatch, database, tmp_path)

    def delete_then_answer(request: WireRequest) -> Scripted:
        if request.index == FAILS_AT:
            database.unlink()
        return answer(request)

    with WireServer(delete_then_answer) as server:
        gone = judge(server)
        sent = server.request_count
    assert one_line_error(gone).startswith(f"error: the database file {database} was moved")
    assert sent == FAILS_AT + 1
    assert not database.exists()


@sqlite_only
def test_a_run_started_from_the_app_on_a_read_only_database_fails_in_one_line(
    immutable, monkeypatch, tmp_path
):
    database = tmp_path / "ro" / "pcf.db"
    database.parent.mkdir()
    url = use_database(monkeypatch, database)
    copy_demo(url)
    with session_scope(get_engine(url)) as session:
        set_local_name(LOCAL_NAME, session=session)
    get_engine(url).dispose()  # no connection opened before the file is read-only
    immutable(database)
    at = open_page(AppTest.from_file(str(APP), default_timeout=30).run(), "runs")
    assert not at.exception, [e.message for e in at.exception]
    at.text_input(key="runs_name").set_value("read-only")
    at = at.button(key="runs_start").click().run()
    deadline = time.monotonic() + HANG_S
    while not at.error:
        assert time.monotonic() < deadline, "the run did not end in time"
        time.sleep(0.2)
        at.run()
    assert not at.exception, [e.message for e in at.exception]
    problem = (
        f"the database {database} is read-only (its file or its file system cannot be "
        "written), so nothing was written. Make it writable, or point PCF_DATABASE_URL at a "
        "writable copy, and try again"
    )
    assert [e.value for e in at.error] == [escape_markdown(problem)]


def test_other_database_errors_are_not_told_as_a_storage_problem(engine):
    """A missing table or a lock is not the disk's fault: the error goes on as it is."""
    with pytest.raises(DBAPIError) as missing, engine.connect() as connection:
        connection.execute(text("SELECT * FROM no_such_table"))
    assert storage_problem(missing.value, str(engine.url)) is None
    assert storage_problem(ValueError("disk is full"), str(engine.url)) is None
