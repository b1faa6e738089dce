"""Schema revisions: new databases at head, upgrades of the release before migrations and of
every older revision that lose nothing, refusals that write nothing, one migrator at a time."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    String,
    Table,
    create_engine,
    inspect,
    make_url,
    select,
    text,
)
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateIndex
from sqlmodel import Session, col
from typer.testing import CliRunner

from pcf.access import Actor, Role, operator
from pcf.cli import app
from pcf.labelling.membership import SignInRefusedError, identify
from pcf.labelling.plan import Plan, labelling_plan
from pcf.labelling.resolutions import comment, thread
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.store import (
    ADJUDICATION_CHAIN,
    ADVISORY_LOCK,
    SCRIPT_LOCATION,
    UNVERSIONED_TABLES,
    Call,
    ItemRow,
    KeyClaim,
    ReplacedCall,
    RequestTemplate,
    SchemaError,
    Spend,
    SQLModel,
    add_adjudication,
    adjudication_records,
    assignees_by_item,
    call_request,
    call_requests,
    claim_keys,
    current,
    get_dataset,
    get_engine,
    get_member,
    get_run,
    head,
    history,
    import_items,
    item_db_ids,
    keep_duplicate_answers,
    list_runs,
    live_claims,
    replace_calls,
    request_digest,
    run_calls,
    run_spend,
    save_member,
    session_scope,
    unchecked_engine,
    upgrade,
    utc_now,
)
from pcf.store import revisions as schema_revisions
from tests.demo_database import copy_demo, drop_database, new_database, on_postgres
from tests.factories import pcf, template_hostile_items
from tests.store.legacy import release_decisions, restore

runner = CliRunner()
ADAM = "adam@example.com"


def plain_engine(url: str) -> Engine:
    """An engine that neither checks nor changes the schema (the test's own eyes)."""
    return create_engine(url, poolclass=NullPool)


CHANGED_BY_0006 = {"call", "replaced_call", "request_template"}
"""Tables revision 0006 made or changed: :func:`rows` reads calls as they were before it."""
CALL_BEFORE_0006 = Table(
    "call",
    MetaData(),
    *(
        Column(
            {"template_id": "request"}.get(column.name, column.name),
            {
                "template_id": JSON(),
                "response_text": String(),
                "response_raw": JSON(none_as_null=True),
            }.get(column.name, column.type),
            primary_key=column.primary_key,
        )
        for column in Call.__table__.columns
        if column.name != "request_digest"
    ),
)
"""The call table before revision 0006: its ``request`` in place of the template's id."""


LATER_COLUMNS = {"adjudication": {"source"}, "labelling_plan": {"calibration_share", "escalated"}}
"""Columns that :func:`rows` leaves out: added after the revisions the other tests fill, they
are read by their own revision's test."""


def rows(url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the models that the database has, in primary-key order,
    without :data:`LATER_COLUMNS`; calls and replaced calls as they were stored before revision
    0006 (:func:`calls`)."""
    engine = plain_engine(url)
    with engine.connect() as connection:
        inspector = inspect(connection)
        present = set(inspector.get_table_names())

        def stored(table: Table) -> list[tuple]:
            """The table's rows, in the columns the database has (an older revision has fewer)."""
            columns = {column["name"] for column in inspector.get_columns(table.name)}
            columns -= LATER_COLUMNS.get(table.name, set())
            shown = [column for column in table.columns if column.name in columns]
            query = select(*shown).order_by(*table.primary_key.columns)
            return [tuple(row) for row in connection.execute(query).all()]

        found = {
            name: stored(table)
            for name, table in SQLModel.metadata.tables.items()
            if name in present and name not in CHANGED_BY_0006
        }
    engine.dispose()
    found["call"], found["replaced_call"] = calls(url)
    return found


def calls(url: str) -> tuple[list[tuple], list[tuple]]:
    """The database's calls and replaced calls in the shape they had before revision 0006:
    from 0006 on each request is rebuilt (:func:`~pcf.store.call_request`, checked against
    its digest) and each answer read back as it was written."""
    engine = plain_engine(url)
    with Session(engine) as session:
        if not inspect(session.connection()).has_table("request_template"):
            found = session.execute(select(CALL_BEFORE_0006).order_by(CALL_BEFORE_0006.c.id))
            replaced = session.execute(select(ReplacedCall).order_by(col(ReplacedCall.id)))
            before = (
                [tuple(row) for row in found],
                [(r.id, r.call_id, r.reason, r.replaced_at, r.values) for r in replaced.scalars()],
            )
            engine.dispose()
            return before
        stored = []
        every = session.scalars(select(Call).order_by(col(Call.id))).all()
        for call, request in zip(every, call_requests(every, session=session), strict=True):
            assert call.sent(request), call.id
            values = call.model_dump() | {"request": request}
            stored.append(tuple(values[column.name] for column in CALL_BEFORE_0006.columns))
        replaced = [
            (r.id, r.call_id, r.reason, r.replaced_at, values_before_0006(r.values, session))
            for r in session.scalars(select(ReplacedCall).order_by(col(ReplacedCall.id)))
        ]
    engine.dispose()
    return stored, replaced


def values_before_0006(values: dict, session: Session) -> dict:
    """A replaced call's kept values with its request rebuilt in place of its template's id."""
    if "template_id" not in values:
        return values
    stand_in = Call(
        item_id=values["item_id"], order=values["order"], template_id=values["template_id"]
    )
    request = call_request(stand_in, session=session)
    assert request_digest(request) == values["request_digest"]
    return {
        ("request" if key == "template_id" else key): request if key == "template_id" else value
        for key, value in values.items()
        if key != "request_digest"
    }


def kept(before: dict[str, list[tuple]], after: dict[str, list[tuple]]) -> bool:
    """Whether every table of ``before`` is in ``after`` with the same rows, and the tables
    that an upgrade added are empty (but ``spend``, which 0014 fills with the calls' bills:
    its own test)."""
    added = after.keys() - before.keys() - {"spend"}
    return all(after[name] == before[name] for name in before) and not any(
        after[name] for name in added
    )


def revision_of(url: str) -> str | None:
    engine = plain_engine(url)
    with engine.connect() as connection:
        stamped = current(connection)
    engine.dispose()
    return stamped


def cli(*args: str) -> dict:
    """``pcf ARGS``'s JSON output."""
    return json.loads(pcf(*args))


def test_history_is_one_line_of_revisions_ending_at_head():
    revisions = history()
    assert [r.revision for r in revisions][:3] == ["0001", "0002", "0003"]
    assert revisions[0].down_revision is None
    for before, after in itertools.pairwise(revisions):
        assert after.down_revision == before.revision
    assert revisions[-1].revision == head()
    assert schema_revisions() == tuple(r.revision for r in revisions)
    listed = runner.invoke(app, ["db", "history"]).stdout.splitlines()
    assert [line.split()[0] for line in listed] == [r.revision for r in revisions]


def test_a_new_database_is_created_at_head(isolated_database):
    get_engine(isolated_database)
    assert revision_of(isolated_database) == head()
    assert cli("db", "current")["up_to_date"] is True


def differences(url: str) -> list:
    """What Alembic's autogenerate finds between the models and the database at ``url``."""
    engine = plain_engine(url)
    with engine.connect() as connection, warnings.catch_warnings():
        # SQLite cannot reflect the expression index; its presence is checked by name.
        warnings.filterwarnings("ignore", message=".*expression-based index")
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        found = compare_metadata(context, SQLModel.metadata)
        indexes = index_names(connection, "adjudication")
    engine.dispose()
    assert "ux_adjudication_chain" in indexes
    return found


def index_names(connection: Connection, table: str) -> set[str]:
    """The table's indexes, expression indexes too (SQLite's inspector leaves those out)."""
    if connection.dialect.name != "sqlite":
        return {i["name"] for i in inspect(connection).get_indexes(table)}
    listed = connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
    )
    return set(listed.scalars())


def test_the_revisions_build_exactly_the_models(isolated_database):
    """Fails when a model changes without a migration (or a migration without the model)."""
    engine = unchecked_engine(isolated_database)
    upgrade(engine, to="0001")
    assert upgrade(engine).before == "0001"
    engine.dispose()
    assert differences(isolated_database) == []


def test_a_new_database_from_the_models_equals_the_migrated_one(isolated_database):
    get_engine(isolated_database)
    assert differences(isolated_database) == []


def test_the_release_database_upgrades_keeping_every_row_and_decision(
    isolated_database, new_session, tmp_path
):
    restore(isolated_database)
    before = rows(isolated_database)
    assert sum(map(len, before.values())) > 2000
    assert revision_of(isolated_database) is None
    assert cli("db", "current")["matches"] == "0003"

    report = cli("db", "upgrade")
    assert (report["before"], report["after"], report["changed"]) == (None, head(), True)
    assert kept(before, rows(isolated_database))
    assert revision_of(isolated_database) == head()
    if not on_postgres():
        backup = Path(report["backup"])
        assert backup.parent == tmp_path
        assert backup.name.startswith("pcf.db.backup-unversioned-")
        assert rows(f"sqlite:///{backup}") == before

    for run, decisions in release_decisions().items():
        exported = runner.invoke(app, ["export", run, "--what", "decisions"])
        assert exported.exit_code == 0, exported.output
        records = [json.loads(line) for line in exported.stdout.splitlines()]
        # today's export adds each item's gold and whether the winner is it
        assert all({"gold", "correct"} <= record.keys() for record in records), run
        stored = [{k: v for k, v in r.items() if k not in ("gold", "correct")} for r in records]
        assert stored == decisions, run

    assert cli("db", "upgrade")["changed"] is False
    judged = runner.invoke(
        app, ["judge", "imported", "--k", "2", "--seed", "7", "--name", "after-upgrade"]
    )
    assert judged.exit_code == 0, judged.output
    with new_session() as session:
        assert get_run("after-upgrade", session=session).calls_made > 0
        dataset = get_dataset("imported", session=session)
        item = item_db_ids(dataset.id, session=session)["hard-text-4"]
        add_adjudication(item, session=session, annotator="carol", choice="eight")
        session.commit()
    after = rows(isolated_database)
    assert len(after["adjudication"]) == len(before["adjudication"]) + 1
    assert after["call"][: len(before["call"])] == before["call"]


@pytest.mark.sqlite_only(reason="a SQLite file is upgraded at start, after a backup copy")
def test_an_old_sqlite_file_is_upgraded_at_start_after_a_backup(isolated_database, tmp_path):
    restore(isolated_database)
    before = rows(isolated_database)
    get_engine(isolated_database)
    assert revision_of(isolated_database) == head()
    (backup,) = tmp_path.glob("pcf.db.backup-*")
    assert rows(f"sqlite:///{backup}") == before
    assert kept(before, rows(isolated_database))
    upgraded = Path(make_url(isolated_database).database).stat().st_size
    assert upgraded < backup.stat().st_size / 2  # compacted: requests stored once per content


@pytest.mark.skipif(not on_postgres(), reason="PostgreSQL databases are upgraded on purpose")
def test_an_old_postgres_database_is_refused_with_one_line(isolated_database):
    restore(isolated_database)
    before = rows(isolated_database)
    with pytest.raises(SchemaError, match=r"run `pcf db upgrade`"):
        get_engine(isolated_database)
    listed = runner.invoke(app, ["runs"])
    assert listed.exit_code == 1
    assert listed.output.count("\n") == 1
    assert "pcf db upgrade" in listed.output
    assert kept(before, rows(isolated_database))
    assert revision_of(isolated_database) is None


LEGACY_TABLES = sorted(UNVERSIONED_TABLES, key=list(SQLModel.metadata.tables).index)
"""The tables every revision has, in an order that inserts parents first."""


def fill_at(
    url: str,
    revision: str,
    folder: Path,
    *,
    fork: bool = True,
    add: Callable[[str], None] | None = None,
) -> dict[str, list[tuple]]:
    """A database at ``revision`` holding the demo (built at head, with what ``add(url)``
    adds, and copied row by row into the tables that revision has) and a label history,
    forked by two racing saves as before the chain index existed unless ``fork`` is false;
    its rows."""
    folder.mkdir()
    source = new_database(folder)
    copy_demo(source)
    if add is not None:
        add(source)
    engine = unchecked_engine(url)
    upgrade(engine, to=revision)
    reader = plain_engine(source)
    old_calls, old_replaced = calls(source)
    with reader.connect() as read, engine.begin() as write:
        for name in LEGACY_TABLES:
            table = SQLModel.metadata.tables[name]
            older = {column["name"] for column in inspect(write).get_columns(name)}
            found = [
                {key: value for key, value in row._mapping.items() if key in older}
                for row in read.execute(select(table))
            ]
            if name == "call":
                table = CALL_BEFORE_0006
                found = [dict(zip(table.columns.keys(), row, strict=True)) for row in old_calls]
            if name == "replaced_call":
                found = [dict(zip(table.columns.keys(), row, strict=True)) for row in old_replaced]
            if found:
                write.execute(table.insert(), found)
            if write.dialect.name == "postgresql" and "id" in table.columns:
                write.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f'coalesce((SELECT max(id) FROM "{name}"), 0) + 1, false)'
                    )
                )
    reader.dispose()
    drop_database(source)
    with session_scope(engine) as session:
        item = item_db_ids(get_dataset("demo", session=session).id, session=session)["demo-001"]
    label = {"item_id": item, "annotator": "ana", "tags": [], "notes": ""}  # the old columns
    adjudication = SQLModel.metadata.tables["adjudication"]
    with engine.begin() as write:
        insert = adjudication.insert()
        first = write.execute(insert, label | {"choice": "none_correct", "created_at": utc_now()})
        for choice in ("cannot_tell", "none_correct")[: 2 if fork else 0]:
            forked = {"choice": choice, "created_at": utc_now()}
            write.execute(insert, label | forked | {"supersedes": first.inserted_primary_key[0]})
    engine.dispose()
    return rows(url)


@pytest.mark.parametrize("revision", ["0001", "0002"])
def test_each_older_revision_upgrades_keeping_every_row(
    isolated_database, new_session, revision, tmp_path
):
    before = fill_at(isolated_database, revision, tmp_path / "source")
    report = cli("db", "upgrade")
    assert (report["before"], report["after"]) == (revision, head())
    after = rows(isolated_database)
    assert kept({**before, "adjudication": []}, {**after, "adjudication": []})
    # The fork became a line in saving order; every vote is kept as it was.
    labels = {row[0]: row for row in after["adjudication"]}
    chain = [row[-1] for row in sorted(labels.values())]
    assert chain == [None, *sorted(labels)[:-1]]
    strip = [row[:-1] for row in before["adjudication"]]
    assert [row[:-1] for row in after["adjudication"]] == strip
    engine = plain_engine(isolated_database)
    types = {c["name"]: c["type"] for c in inspect(engine).get_columns("run")}
    engine.dispose()
    assert isinstance(types["input_tokens"], BigInteger)
    with new_session() as session:
        get_run("demo-pcf", session=session).input_tokens = 3 * 2**31
        session.commit()
    with new_session() as session:
        assert get_run("demo-pcf", session=session).input_tokens == 3 * 2**31


def test_revision_0007_keeps_every_request_and_answer_of_the_release_byte_for_byte(
    isolated_database,
):
    """Each request rebuilt from its template is the old one's JSON text, each answer the old
    text, and the release's runs need one template per judge and number of candidates."""
    restore(isolated_database)
    engine = plain_engine(isolated_database)
    with engine.connect() as connection:
        old = {
            call_id: stored
            for call_id, *stored in connection.execute(
                text(
                    "SELECT id, CAST(request AS TEXT), response_text, CAST(response_raw AS TEXT) "
                    "FROM call"
                )
            )
        }
    cli("db", "upgrade")
    with Session(engine) as session:
        calls = session.scalars(select(Call)).all()
        assert len(calls) == len(old) > 2000
        shapes = set()
        for call, request in zip(calls, call_requests(calls, session=session), strict=True):
            old_request, old_text, old_raw = old[call.id]
            assert json.dumps(request) == old_request, call.id
            assert call.sent(request)
            assert call.response_text == old_text
            assert old_raw is None if call.response_raw is None else json.dumps(call.response_raw)
            shapes.add((request["model"], len(call.order)))
        templates = session.scalars(select(RequestTemplate)).all()
    engine.dispose()
    assert len(templates) == len(shapes)


def hostile_run_with_replaced_answers(url: str) -> None:
    """Add a run of the items hostile to request templates to the database at ``url`` (at
    head), with one answer retried and a second writer's duplicate of another."""
    engine = get_engine(url)
    with session_scope(engine) as session:
        import_items(template_hostile_items(), session=session, name="hostile", fmt="jsonl")
        judge_run(RunSpec("hostile", "hostile-pcf", k=4), session=session, actor=operator())
    with session_scope(engine) as session:
        first, second = run_calls(get_run("hostile-pcf", session=session).id, session=session)[:2]
        replace_calls({first.id: {"ok": False, "error": "retried: again"}}, session=session)
        duplicate = second.model_dump(exclude={"id", "template_id", "request_digest", "created_at"})
        request = call_request(second, session=session) | {"temperature": 0.5}
        keep_duplicate_answers([duplicate | {"request": request}], session=session)
    engine.dispose()


def downgrade(url: str, revision: str) -> None:
    """Run the revisions' downgrades down to ``revision`` (the product offers none)."""
    engine = plain_engine(url)  # on SQLite, foreign keys stay off while tables are rebuilt
    with engine.connect() as connection:
        config = Config()
        config.set_main_option("script_location", SCRIPT_LOCATION)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        if connection.in_transaction():
            connection.commit()
    engine.dispose()


def test_revision_0007_converts_hostile_texts_and_replaced_answers_and_back(
    isolated_database, tmp_path
):
    """Calls of texts the prompt escaped or that hide in its wording, and the requests kept
    with replaced answers, come back whole after the upgrade, and again after its downgrade."""
    before = fill_at(
        isolated_database,
        "0006",
        tmp_path / "source",
        fork=False,
        add=hostile_run_with_replaced_answers,
    )
    assert [row[2] for row in before["replaced_call"]] == ["retried", "duplicate"]
    assert cli("db", "upgrade")["before"] == "0006"
    assert kept(before, rows(isolated_database))
    assert differences(isolated_database) == []
    downgrade(isolated_database, "0006")
    assert revision_of(isolated_database) == "0006"
    assert kept(before, rows(isolated_database))


def upgraded_from(url: str, revision: str, folder: Path) -> dict[str, list[tuple]]:
    """The rows of a database filled at 0006 (:func:`fill_at`) and taken to ``revision``, once
    `pcf db upgrade` took it from there to head keeping them all, as the models say."""
    before = fill_at(url, "0006", folder, fork=False)
    engine = unchecked_engine(url)
    upgrade(engine, to=revision)
    engine.dispose()
    assert cli("db", "upgrade")["before"] == revision
    assert kept(before, rows(url))
    assert differences(url) == []
    return before


def test_revision_0008_adds_key_claims_to_a_database_at_0007(isolated_database, tmp_path):
    """A database at 0007 keeps every row, and its new claims table works: a claim of a live
    holder is seen, another holder is refused it, and an expired claim is taken over."""
    before = upgraded_from(isolated_database, "0007", tmp_path / "source")
    engine = unchecked_engine(isolated_database)
    with Session(engine) as session:
        assert claim_keys(["k"], session=session, holder="mine", ttl_s=60) == {"k"}
        assert claim_keys(["k", "j"], session=session, holder="other", ttl_s=60) == {"j"}
        assert live_claims(["k", "j", "free"], session=session) == {"k", "j"}
        session.get(KeyClaim, "k").expires_at = utc_now() - timedelta(seconds=1)
        session.commit()
        assert claim_keys(["k"], session=session, holder="other", ttl_s=60) == {"k"}
        session.commit()
    engine.dispose()
    downgrade(isolated_database, "0007")
    assert revision_of(isolated_database) == "0007"
    assert kept(before, rows(isolated_database))


def test_revision_0009_keeps_the_members_who_bind_their_account_at_their_next_sign_in(
    isolated_database, new_session
):
    engine = unchecked_engine(isolated_database)
    upgrade(engine, to="0008")
    member = SQLModel.metadata.tables["member"]
    old_columns = [c for c in member.columns if c.name not in ("issuer", "subject")]
    added = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
    with engine.begin() as connection:
        connection.execute(
            member.insert(),
            [
                {"email": email, "role": "admin", "local": local, "added_by": by, "added_at": added}
                for email, local, by in [("Ada", True, "local mode"), (ADAM, False, "operator:x")]
            ],
        )
    engine.dispose()
    reader = plain_engine(isolated_database)
    with reader.connect() as connection:
        before = connection.execute(select(*old_columns).order_by(member.c.email)).all()
    reader.dispose()
    assert cli("db", "upgrade")["before"] == "0008"
    assert rows(isolated_database)["member"] == [(*row, None, None) for row in before]
    assert differences(isolated_database) == []
    token = {"iss": "https://id.example", "sub": "a1", "email": ADAM, "email_verified": True}
    with new_session() as session:
        assert identify(token, session=session) == Actor(ADAM, Role.ADMIN)
        session.commit()
    with new_session() as session:
        bound = get_member(ADAM, session=session)
        assert (bound.issuer, bound.subject) == ("https://id.example", "a1")
        with pytest.raises(SignInRefusedError, match="another account"):
            identify(token | {"sub": "a2"}, session=session)


def test_revision_0010_keeps_every_label_and_then_the_source_of_the_imported_ones(
    isolated_database, new_session, tmp_path
):
    """A database at 0009 keeps every row, its labels now saved in PCF (no source); a label
    imported after the upgrade keeps its source; the downgrade keeps the rest and the chain
    index."""
    before = upgraded_from(isolated_database, "0009", tmp_path / "source")
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"item_id": "demo-002", "annotator": "ext", "answer": "cannot_tell"}\n')
    done = runner.invoke(app, ["labels", "import", str(labels), "--dataset", "demo"])
    assert done.exit_code == 0, done.output
    with new_session() as session:
        found = adjudication_records(get_dataset("demo", session=session).id, session=session)
    assert [(r["annotator"], r["source"]) for r in found] == [
        ("ana", None),
        ("ext", "labels.jsonl"),
    ]
    downgrade(isolated_database, "0009")
    engine = plain_engine(isolated_database)
    with engine.connect() as connection:
        assert "source" not in {c["name"] for c in inspect(connection).get_columns("adjudication")}
        assert "ux_adjudication_chain" in index_names(connection, "adjudication")
    engine.dispose()
    after = rows(isolated_database)
    imported = {table: after[table][:-1] for table in ("adjudication", "audit_event")}
    assert kept(before, after | imported)


def test_revision_0011_gives_a_stored_plan_no_calibration_share_and_no_escalated_items(
    isolated_database, new_session
):
    engine = unchecked_engine(isolated_database)
    upgrade(engine, to="0010")
    tables = SQLModel.metadata.tables
    added = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
    old = {"labels_per_item": 2, "adaptive": True, "gold_rule": "majority", "guidelines": "read"}
    with engine.begin() as connection:
        connection.execute(tables["dataset"].insert(), [{"id": 1, "name": "d", "format": "jsonl"}])
        connection.execute(
            text(
                "INSERT INTO labelling_plan VALUES "
                "(1, :labels_per_item, :adaptive, :gold_rule, :guidelines, 'ada', :at)"
            ),
            old | {"at": added},
        )
    engine.dispose()
    assert cli("db", "upgrade")["before"] == "0010"
    assert differences(isolated_database) == []
    with new_session() as session:
        assert labelling_plan(1, session=session) == Plan(*old.values(), 0.0, ())
    downgrade(isolated_database, "0010")
    reader = plain_engine(isolated_database)
    with reader.connect() as connection:
        kept_plan = connection.execute(select(tables["labelling_plan"].c.gold_rule)).all()
        columns = {c["name"] for c in inspect(connection).get_columns("labelling_plan")}
    reader.dispose()
    assert kept_plan == [("majority",)]
    assert not columns & {"calibration_share", "escalated"}


def test_revision_0012_keeps_every_row_and_then_holds_an_items_comments(
    isolated_database, new_session, tmp_path
):
    """A database at 0011 keeps every row; a comment added after the upgrade is the item's
    thread; the downgrade keeps the rest."""
    before = upgraded_from(isolated_database, "0011", tmp_path / "source")
    with new_session() as session:
        item_db_id = session.scalar(select(ItemRow.id).limit(1))
        comment(item_db_id, session=session, actor=operator(), text="B drops the year")
        session.commit()
        said = thread(item_db_id, session=session, actor=operator())
    assert [(c.author, c.text) for c in said] == [(operator().identity, "B drops the year")]
    downgrade(isolated_database, "0011")
    assert "comment" not in rows(isolated_database)
    assert kept(before, rows(isolated_database))


def test_revision_0013_keeps_every_row_and_then_assigns_items(
    isolated_database, new_session, tmp_path
):
    """A database at 0012 keeps every row and takes assignments (`pcf labels assign`); the
    downgrade drops them and keeps the rest."""
    before = upgraded_from(isolated_database, "0012", tmp_path / "source")
    with new_session() as session:
        save_member(ADAM, "annotator", session=session, added_by="test")
        session.commit()
    done = runner.invoke(
        app, ["labels", "assign", "--dataset", "demo", "--to", ADAM, "--first", "2"]
    )
    assert done.exit_code == 0, done.output
    with new_session() as session:
        demo = get_dataset("demo", session=session).id
        ids = item_db_ids(demo, session=session)
        assigned = assignees_by_item(demo, session=session)
    assert assigned == {ids["demo-002"]: ADAM, ids["demo-003"]: ADAM}  # demo-001 is labelled
    downgrade(isolated_database, "0012")
    after = rows(isolated_database)
    assert "assignment" not in after
    added = {"member": after["member"][:-1], "audit_event": after["audit_event"][:-1]}
    assert kept(before, after | added)


def test_revision_0014_carries_each_runs_billed_calls_into_its_spend(
    isolated_database, new_session, tmp_path
):
    """A database at 0013 keeps every row; each run's spend is then its paid calls' cost, one
    settled row, and the downgrade drops the ledger and keeps the rest."""
    before = upgraded_from(isolated_database, "0013", tmp_path / "source")
    with new_session() as session:
        for run in list_runs(session=session):
            calls = session.scalars(select(Call).where(Call.run_id == run.id)).all()
            paid = sum(c.cost_usd for c in calls if c.cached_from is None)
            assert run_spend(run.id, session=session) == pytest.approx(paid)
        ledger = session.scalars(select(Spend)).all()
    assert ledger
    assert all(row.settled for row in ledger)
    downgrade(isolated_database, "0013")
    after = rows(isolated_database)
    assert "spend" not in after
    assert kept(before, after)


def test_a_release_with_the_chain_index_but_32_bit_totals_is_recognised(
    isolated_database, tmp_path
):
    """Releases between the chain index and the 64-bit totals made such databases."""
    before = fill_at(isolated_database, "0001", tmp_path / "source", fork=False)
    engine = plain_engine(isolated_database)
    with engine.begin() as connection:
        connection.execute(CreateIndex(ADJUDICATION_CHAIN))
        connection.execute(text("DROP TABLE alembic_version"))
    engine.dispose()
    assert cli("db", "current")["matches"] == "0001"
    assert cli("db", "upgrade")["before"] is None
    assert revision_of(isolated_database) == head()
    assert kept(before, rows(isolated_database))
    assert differences(isolated_database) == []


def test_a_database_newer_than_the_code_is_refused_and_not_written(isolated_database):
    engine = unchecked_engine(isolated_database)
    upgrade(engine)
    engine.dispose()
    engine = plain_engine(isolated_database)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    before = rows(isolated_database)
    with pytest.raises(SchemaError, match="newer than this code"):
        get_engine(isolated_database)
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1
    assert "newer than this code" in result.output
    assert kept(before, rows(isolated_database))
    assert revision_of(isolated_database) == "9999"


def test_tables_of_something_else_are_refused(isolated_database):
    engine = plain_engine(isolated_database)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE dataset (id INTEGER PRIMARY KEY, label TEXT)"))
    engine.dispose()
    with pytest.raises(SchemaError, match="not made by pcf-review"):
        get_engine(isolated_database)


def test_an_unknown_target_revision_is_refused(isolated_database):
    result = runner.invoke(app, ["db", "upgrade", "--to", "12ab"])
    assert result.exit_code == 1
    assert "no schema revision '12ab'" in result.output


def upgrade_process(url: str) -> subprocess.Popen:
    env = {**os.environ, "PCF_DATABASE_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "pcf", "db", "upgrade"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(condition, what: str, seconds: float = 300) -> None:
    """Poll ``condition`` until true; a hang bound, not a speed test."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def waiting_on_locks(admin: Engine, kind: str) -> int:
    with admin.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = :kind"),
            {"kind": kind},
        ).scalar_one()


def queued_on_sqlite_lock(process: subprocess.Popen, database: str) -> bool:
    """Whether ``process`` has the SQLite file open and sleeps in SQLite's busy handler, which
    retries the lock (Linux's /proc: the open files and where the process waits)."""
    assert process.poll() is None, process.communicate()
    folder = Path(f"/proc/{process.pid}")
    try:
        opened = any(os.path.realpath(fd) == database for fd in (folder / "fd").iterdir())
        return opened and "nanosleep" in (folder / "wchan").read_text()
    except OSError:  # a file closed or the process ended while looking
        return False


def test_two_upgrades_at_once_migrate_once(isolated_database, tmp_path):
    before = fill_at(isolated_database, "0001", tmp_path / "source")
    holder = plain_engine(isolated_database)
    with holder.connect() as connection:
        # Hold the upgrade lock so that both processes queue behind it, then let them go.
        if on_postgres():
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": ADVISORY_LOCK})
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        processes = [upgrade_process(isolated_database) for _ in range(2)]
        if on_postgres():
            wait_until(lambda: waiting_on_locks(holder, "advisory") == 2, "both to queue")
        else:
            database = os.path.realpath(make_url(isolated_database).database)
            wait_until(
                lambda: all(queued_on_sqlite_lock(p, database) for p in processes), "both to queue"
            )
        if on_postgres():
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_LOCK})
        else:
            connection.rollback()
    holder.dispose()
    outputs = [p.communicate(timeout=600) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    changed = sorted(json.loads(out)["changed"] for out, _ in outputs)
    assert changed == [False, True]
    assert revision_of(isolated_database) == head()
    assert rows(isolated_database)["call"] == before["call"]


@pytest.mark.skipif(not on_postgres(), reason="each revision is a transaction on PostgreSQL")
def test_a_killed_upgrade_stops_at_the_revision_before_and_a_rerun_completes(
    isolated_database, tmp_path
):
    before = fill_at(isolated_database, "0001", tmp_path / "source")
    holder = plain_engine(isolated_database)
    with holder.connect() as connection:
        # A writer that keeps the adjudication table busy: revision 0003's index waits on it.
        connection.execute(text("LOCK TABLE adjudication IN ROW EXCLUSIVE MODE"))
        process = upgrade_process(isolated_database)
        wait_until(lambda: waiting_on_locks(holder, "relation") > 0, "0003 to wait")
        assert revision_of(isolated_database) == "0002"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        connection.rollback()
    holder.dispose()
    assert revision_of(isolated_database) == "0002"
    engine = plain_engine(isolated_database)
    with engine.connect() as connection:
        assert "ux_adjudication_chain" not in index_names(connection, "adjudication")
    engine.dispose()
    assert cli("db", "upgrade")["before"] == "0002"
    assert revision_of(isolated_database) == head()
    assert rows(isolated_database)["call"] == before["call"]


def test_pcf_db_current_names_the_database_and_its_state(isolated_database):
    restore(isolated_database)
    shown = cli("db", "current")
    assert shown["revision"] is None
    assert shown["matches"] == "0003"
    assert shown["database"] == make_url(isolated_database).render_as_string(hide_password=True)
