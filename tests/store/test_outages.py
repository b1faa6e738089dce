"""A PostgreSQL server that restarts or goes away, met for real: a throwaway cluster of this
test's own (as ``.ci/with-postgres`` starts one) is restarted and stopped under a `pcf judge`
process and under label saves. A lost connection is waited for and the work goes on; an outage
longer than the wait ends a command in one line naming the database, and the run resumes with
every call stored once.

The judge is the wire server of this process, which answers only as many requests as the test
allows, so that every outage starts at a known point of the run (after N calls are stored).
Needs Debian's postgresql (skipped without it, except under CI=true).
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.pool import NullPool
from sqlmodel import Session, col
from streamlit.testing.v1 import AppTest

from pcf.access import Actor, Role
from pcf.analysis.markdown import escape_markdown
from pcf.labelling.labels import save_label
from pcf.labelling.membership import set_local_name
from pcf.store import (
    Adjudication,
    Call,
    ReplacedCall,
    database_wait_s,
    get_engine,
    import_items,
    item_db_ids,
    save_member,
    write_with_retry,
)
from tests.app import APP, open_page
from tests.app.test_adjudicate import item_on_screen
from tests.factories import make_item
from tests.runs.processes import environment, import_dataset, judge_command
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer

ITEMS, K, CONCURRENCY = 10, 7, 4
PLANNED = ITEMS * K
HANG_S = 300  # only catches a hang: a loaded machine is slow, not wrong
PASSWORD = "s3cret"  # in the URL, never shown (the cluster trusts local connections)
RESUMES = "try again: a run resumes where it stopped"
ANNOTATOR = Actor("ana@example.com", Role.ANNOTATOR)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class Cluster:
    """A PostgreSQL cluster in a temporary folder, on a free port of 127.0.0.1, run as the
    ``postgres`` user when this is root (initdb refuses root)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.as_owner: list[str] = []
        self.folder = Path(tempfile.mkdtemp(prefix="pcf-outages."))
        self.folder.chmod(0o755)
        if os.geteuid() == 0:
            if not _user_exists("postgres"):
                subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
            shutil.chown(self.folder, "postgres")
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._run(
            "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        self.start()
        self.admin = create_engine(
            self.url("postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool
        )

    @property
    def data(self) -> str:
        return str(self.folder / "data")

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self.as_owner, str(self.bin_dir / program), *args],
            check=True,
            capture_output=True,
            timeout=HANG_S,
        )

    def pg_ctl(self, *args: str) -> None:
        """``pg_ctl`` on the cluster, waiting until it is done; the server logs to a file (a
        pipe would keep ``pg_ctl``'s output open as long as the server runs)."""
        self._run("pg_ctl", "-D", self.data, "-l", str(self.folder / "server.log"), "-w", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.pg_ctl("-o", options, "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self.pg_ctl("-m", "fast", "restart")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        with self.admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        return self.url(name)

    def remove(self) -> None:
        self.admin.dispose()
        subprocess.run(
            [*self.as_owner, str(self.bin_dir / "pg_ctl"), "-D", self.data, "-m", "immediate",
             "stop"],
            check=False,
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql to run these")
    made = Cluster(Path(found[-1]).parent)
    yield made
    made.remove()


@pytest.fixture
def database(cluster: Cluster, request, monkeypatch) -> str:
    """A new database on the cluster, which ``PCF_DATABASE_URL`` points at."""
    url = cluster.new_database(f"outage_{request.node.name[5:40]}")
    monkeypatch.setenv("PCF_DATABASE_URL", url)
    return url


class Gate:
    """Answers the judge's requests, only the first ``allowed`` of them until more are let
    through (the rest wait at the server)."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.condition = threading.Condition()

    def allow(self, allowed: int) -> None:
        with self.condition:
            self.allowed = allowed
            self.condition.notify_all()

    def __call__(self, request: WireRequest) -> Scripted:
        with self.condition:
            assert self.condition.wait_for(lambda: request.index < self.allowed, HANG_S)
        return Scripted.answer(listwise_text(request.last_user_text))


class Judging:
    """`pcf judge ds --name r` at the wire server in a child process; its stderr is read as it
    comes, so that the test can wait for a line."""

    def __init__(self, server: WireServer, url: str, **env: str) -> None:
        self.process = subprocess.Popen(
            judge_command(server, k=K, concurrency=CONCURRENCY),
            env=environment() | {"PCF_DATABASE_URL": url, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.seen = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self.seen:
                self.lines.append(line.rstrip("\n"))
                self.seen.notify_all()

    def wait_for_line(self, start: str) -> str:
        """The first stderr line that starts with ``start``, once it is printed."""

        def found() -> list[str]:
            return [line for line in self.lines if line.startswith(start)]

        with self.seen:
            assert self.seen.wait_for(found, HANG_S), self.lines
            return found()[0]

    def finish(self) -> tuple[int, str, str]:
        """Exit code, stdout and stderr, once the process ends."""
        assert self.process.stdout is not None
        stdout = self.process.stdout.read()  # stderr is this object's reader's
        self.process.wait(HANG_S)
        self.reader.join(HANG_S)
        return self.process.returncode, stdout, "\n".join(self.lines)


def shown(url: str) -> str:
    """The URL as every message shows it: the password masked."""
    return url.replace(PASSWORD, "***")


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def stored_calls(reader: Engine) -> int:
    with reader.connect() as connection:
        return connection.execute(select(func.count(col(Call.id)))).scalar_one()


def stored_once(reader: Engine) -> None:
    """Every planned call of run ``r`` is stored once, answered well, with no duplicate kept."""
    with Session(reader) as session:
        calls = session.exec(select(Call)).scalars().all()
        replaced = session.exec(select(func.count(col(ReplacedCall.id)))).scalar_one()
    slots = {(c.item_id, c.execution, c.call_index) for c in calls}
    assert len(calls) == len(slots) == PLANNED
    assert all(c.ok for c in calls)
    assert replaced == 0


def unreachable(url: str) -> str:
    """The line that tells the database at ``url`` gone for longer than the 0.5 s waited (its
    password masked)."""
    return (
        f"the database {shown(url)} cannot be reached (Connection refused), not even after "
        "waiting 0.5 s for it; what was stored is kept, a change under way was not. Check that "
        f"the server is up and reachable (or wait longer: PCF_DATABASE_WAIT_S), then {RESUMES}"
    )


def summary(code: int, stdout: str, stderr: str) -> dict:
    assert code == 0, stderr
    assert "Traceback" not in stderr
    return json.loads(stdout)["this_invocation"]


def test_a_run_goes_on_through_a_postgres_restart_and_an_outage(
    cluster, database, tmp_path, monkeypatch
):
    """A restart while the run waits for its judge, then a server down while answers arrive:
    the run waits for it, says so in one line, and finishes with every call stored once."""
    import_dataset(tmp_path, ITEMS)
    get_engine(database).dispose()
    reader = create_engine(database, poolclass=NullPool)
    gate = Gate(allowed=20)
    with WireServer(gate) as server:
        try:
            judging = Judging(server, database)
            wait_until(lambda: stored_calls(reader) == 20, "20 calls stored")
            cluster.restart()  # the run's pooled connection dies with the server's processes
            gate.allow(40)
            wait_until(lambda: stored_calls(reader) == 40, "40 calls stored after a restart")
            cluster.stop()
            gate.allow(PLANNED)  # answers arrive while the server is down
            notice = judging.wait_for_line("cannot reach the database")
            cluster.start()
            code, stdout, stderr = judging.finish()
        finally:
            gate.allow(10**9)
        asked = server.counts
    done = summary(code, stdout, stderr)
    assert notice.startswith(f"cannot reach the database {shown(database)} (")
    assert notice.endswith("; trying again for up to 30 s")
    assert PASSWORD not in stderr
    assert (done["attempts"], done["failures"]) == (PLANNED, 0)
    assert sum(asked.values()) == PLANNED == len(asked)  # no answer paid twice
    stored_once(reader)

    again = summary(*Judging(server, database).finish())
    assert (again["already_stored"], again["attempts"]) == (PLANNED, 0)
    stored_once(reader)
    reader.dispose()


def test_an_outage_longer_than_the_wait_ends_the_run_in_one_line_and_it_resumes_exactly(
    cluster, database, tmp_path
):
    import_dataset(tmp_path, ITEMS)
    get_engine(database).dispose()
    reader = create_engine(database, poolclass=NullPool)
    gate = Gate(allowed=30)
    with WireServer(gate) as server:
        try:
            judging = Judging(server, database, PCF_DATABASE_WAIT_S="0.5")
            wait_until(lambda: stored_calls(reader) == 30, "30 calls stored")
            cluster.stop()
            gate.allow(PLANNED)
            code, _, stderr = judging.finish()
            cluster.start()
            stored = stored_calls(reader)
            gate.allow(10**9)
            again = summary(*Judging(server, database).finish())
        finally:
            gate.allow(10**9)
        asked = server.counts
    assert code == 1, stderr
    assert "Traceback" not in stderr
    assert PASSWORD not in stderr
    errors = [line for line in stderr.splitlines() if not line.startswith("judging r: ")]
    assert errors == [
        f"cannot reach the database {shown(database)} (Connection refused); trying again for up "
        "to 0.5 s",
        f"error: {unreachable(database)}",
    ]
    assert stored == 30
    assert (again["already_stored"], again["attempts"]) == (30, PLANNED - 30)
    stored_once(reader)
    in_flight = sum(asked.values()) - PLANNED  # answered while the server was down: asked again
    assert 1 <= in_flight <= CONCURRENCY
    assert max(asked.values()) <= 2
    reader.dispose()


def three_items(engine: Engine) -> list[int]:
    """Dataset ``ds`` of three items, and :data:`ANNOTATOR` a member; the items' ids."""
    with Session(engine) as session:
        dataset = import_items(
            [make_item(f"q{i}") for i in range(3)], session=session, name="ds", fmt="jsonl"
        )
        save_member(ANNOTATOR.identity, "annotator", session=session, added_by="test")
        set_local_name("Ada", session=session)
        session.commit()
        return sorted(item_db_ids(dataset.id, session=session).values())


def test_a_label_save_goes_on_through_a_postgres_restart(cluster, database):
    """Saves through the labelling write function, across a restart between two saves (the
    pooled connection is pinged) and in the middle of one (its transaction runs again): each
    label is stored once."""
    engine = get_engine(database)
    ids = three_items(engine)

    def save(item_id: int, before: Callable[[Session], None] = lambda _s: None) -> None:
        def work(session: Session) -> Adjudication:
            before(session)
            return save_label(item_id, session=session, actor=ANNOTATOR, choice="c1", seen=None)

        write_with_retry(engine, work)

    save(ids[0])
    cluster.restart()
    save(ids[1])  # the pooled connection died with the server: pinged, then replaced

    tries = []

    def restart_once(session: Session) -> None:
        tries.append(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
        if len(tries) == 1:
            cluster.restart()  # the transaction's connection is cut

    save(ids[2], restart_once)
    assert len(set(tries)) == len(tries) == 2  # two connections: the first was cut
    with Session(engine) as session:
        labels = session.exec(select(Adjudication.item_id)).scalars().all()
    assert sorted(labels) == ids
    engine.dispose()


def test_the_app_tells_a_lost_database_in_one_line_and_a_label_not_saved_as_not_saved(
    cluster, database, monkeypatch
):
    """The Adjudicate page while the server is down: a key press waits for it, then the page
    shows one line, no exception; once it is back, the page says that the label was not saved,
    and nothing was stored until the key is pressed again."""
    monkeypatch.setenv("PCF_DATABASE_WAIT_S", "0.5")
    engine = get_engine(database)
    three_items(engine)
    at = open_page(AppTest.from_file(str(APP), default_timeout=30).run(), "adjudicate")
    assert not at.exception, [e.message for e in at.exception]

    cluster.stop()
    at = at.button(key=f"adjudicate_choose_1_{item_on_screen(at)}").click().run()
    assert not at.exception, [e.message for e in at.exception]
    problem = unreachable(database)
    assert [e.value for e in at.error] == [
        f"The database cannot be used: {escape_markdown(problem)}."
    ]

    cluster.start()
    at = at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert [e.value for e in at.error] == [
        f"Not saved: {escape_markdown(f'The label was not saved: {problem}. Press the key again.')}"
    ]
    with Session(engine) as session:
        assert session.exec(select(func.count(col(Adjudication.id)))).scalar_one() == 0
    at = at.button(key=f"adjudicate_choose_1_{item_on_screen(at)}").click().run()
    assert not at.error
    with Session(engine) as session:
        assert session.exec(select(func.count(col(Adjudication.id)))).scalar_one() == 1
    engine.dispose()


def test_a_wait_that_is_not_a_number_of_seconds_is_refused_by_name(monkeypatch):
    for value in ("soon", "-1", "nan"):
        monkeypatch.setenv("PCF_DATABASE_WAIT_S", value)
        with pytest.raises(ValueError, match=f"PCF_DATABASE_WAIT_S must be .* not '{value}'"):
            database_wait_s()
    monkeypatch.setenv("PCF_DATABASE_WAIT_S", " 2.5 ")
    assert database_wait_s() == 2.5
