"""Reading the files a user names (pcf/files.py): regular files only, each under its cap, and
every refusal one line naming the file and the limit; through the CLI as a user meets it. And
writing them whole: a write that fails leaves no partial file."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import string
import tempfile
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import Session

from pcf.access import Actor, Role
from pcf.files import (
    DATA_FILE,
    MB,
    FieldChecker,
    InputFileError,
    Limit,
    read_input,
    read_json_lines,
    replacing,
    storable,
)
from pcf.labelling.exports import HF_DATA
from pcf.labelling.resolutions import resolve
from pcf.store import add_adjudication, get_dataset, get_run, load_items
from tests.factories import enrol, pcf, pcf_process
from tests.shared_data import HAIKU, JUDGEBENCH_PAIRS, LLMBAR, O1_MINI, RB2, SHARED


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.jsonl"
    os.mkfifo(path)
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (its bytes are zeros)."""
    with path.open("wb") as file:
        file.truncate(size)
    return path


SPECIAL_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "dev_zero": (lambda tmp: Path("/dev/zero"), "not a regular file (a character device)"),
    "fifo": (fifo, "not a regular file (a FIFO)"),
    "folder": (lambda tmp: tmp, "not a regular file (a folder)"),
    "missing": (lambda tmp: tmp / "missing.json", "file not found"),
}


@pytest.mark.parametrize("kind", SPECIAL_FILES)
def test_what_is_not_a_regular_file_is_refused_without_reading(tmp_path, kind):
    make, reason = SPECIAL_FILES[kind]
    path = make(tmp_path)
    with pytest.raises(InputFileError) as refused:
        read_input(path, DATA_FILE)
    assert (refused.value.path, refused.value.reason) == (str(path), reason)


def test_a_file_over_its_cap_is_refused_and_the_variable_raises_the_cap(tmp_path, monkeypatch):
    limit = Limit("PCF_TEST_MAX_MB", 1, "MB", MB)
    path = sparse(tmp_path / "big.json", 3 * MB // 2)
    with pytest.raises(InputFileError, match=r"big.json: 1.5 MB, over the limit of 1 MB \(set "):
        read_input(path, limit)
    monkeypatch.setenv("PCF_TEST_MAX_MB", "2")
    assert len(read_input(path, limit)) == 3 * MB // 2
    monkeypatch.setenv("PCF_TEST_MAX_MB", "2.5")
    with pytest.raises(ValueError, match=r"PCF_TEST_MAX_MB='2.5': expected a whole number of MB"):
        read_input(path, limit)


TEXTS = st.text(st.sampled_from(["a", "ü", "\\", "u", "\x00", "\ud800", "\n", "{", "["]))
ROWS = st.recursive(
    st.none() | st.integers() | TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=8,
).map(lambda value: {"v": value})


def nested(depth: int) -> dict:
    """An object whose innermost value sits ``depth`` containers deep."""
    value: object = 1
    for _ in range(depth - 1):
        value = [value]
    return {"v": value}


def lines_read(rows: list[dict], *, ensure_ascii: bool) -> tuple[list[dict], list[str]]:
    """The objects read back from ``rows`` written as JSON lines, and the problems."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        text = "".join(json.dumps(row, ensure_ascii=ensure_ascii) + "\n" for row in rows)
        path.write_text(text, encoding="utf-8")
        check = FieldChecker(path)
        read = [obj for _, obj in read_json_lines(path, check)]
        return read, [str(p).removeprefix(f"{path}") for p in check.problems]


def walked(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The rows a full walk (:func:`pcf.files.storable`) finds storable, and the problems."""
    check = FieldChecker(Path(""))
    kept = [row for line, row in enumerate(rows, start=1) if storable(row, line, check)]
    return kept, [str(p).removeprefix(".") for p in check.problems]


@settings(max_examples=300, deadline=None)
@given(st.lists(ROWS, max_size=4), st.booleans())
def test_lines_are_read_as_a_full_walk_of_each_would_read_them(rows, ensure_ascii):
    # A lone surrogate is only ever written escaped (UTF-8 text has none).
    assume(ensure_ascii or "\ud800" not in json.dumps(rows, ensure_ascii=False))
    assert lines_read(rows, ensure_ascii=ensure_ascii) == walked(rows)


@pytest.mark.parametrize("depth", [63, 64, 65, 66])
def test_lines_nested_near_the_limit_are_read_as_a_full_walk_would(depth):
    rows = [nested(depth), {"many": [[]] * 70}, {"text": "[" * 70 + "\\u0000"}]
    assert lines_read(rows, ensure_ascii=True) == walked(rows)
    assert len(walked(rows)[0]) == (3 if depth <= 64 else 2)


def test_character_limits_count_characters():
    limit = Limit("PCF_TEST_MAX_CHARS", 10, "characters")
    assert limit.exceeded(12_345) == (
        "12,345 characters, over the limit of 10 characters (set PCF_TEST_MAX_CHARS to raise it)"
    )


PRICE_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "dev_zero": (lambda tmp: Path("/dev/zero"), "not a regular file (a character device)"),
    "fifo": (fifo, "not a regular file (a FIFO)"),
    "100_MB": (
        lambda tmp: sparse(tmp / "prices.json", 100 * MB),
        "100.0 MB, over the limit of 1 MB (set PCF_MAX_PRICES_MB to raise it)",
    ),
}


@pytest.mark.parametrize("kind", PRICE_FILES)
def test_pcf_prices_that_is_no_price_file_stops_judge_with_one_line(tmp_path, kind, db):
    """Before, ``/dev/zero`` grew to 19.9 GB until the out-of-memory killer came, and a FIFO
    hung for ever."""
    make, reason = PRICE_FILES[kind]
    path = make(tmp_path)
    ran = pcf_process(
        "judge", "demo", "--name", "priced", "--limit", "1", env={"PCF_PRICES": str(path)}
    )
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        f"error: PCF_PRICES={path}: {reason}; PCF_PRICES names a JSON file "
        "{model: [input, output]} in USD per million tokens"
    ]
    assert get_run("priced", session=db) is None  # nothing was started


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "folder"])
@pytest.mark.parametrize(
    "command",
    [
        ("validate", "jsonl"),
        ("import", "jsonl"),
        ("replay", "judgebench"),
        ("aggregate",),
    ],
    ids=" ".join,
)
def test_a_data_file_that_is_not_a_regular_file_is_one_line(tmp_path, kind, command):
    make, reason = SPECIAL_FILES[kind]
    path = make(tmp_path)
    ran = pcf_process(*command, str(path))
    assert ran.returncode == 1
    assert reason in ran.stderr
    assert len(ran.stderr.strip().splitlines()) <= 2, ran.stderr  # validate counts, then the line
    assert f"{path}: {reason}" in ran.stderr.splitlines()[-1]


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_an_llmbar_path_that_is_neither_file_nor_folder_is_one_line(tmp_path, kind):
    make, reason = SPECIAL_FILES[kind]
    path = make(tmp_path)
    ran = pcf_process("replay", "llmbar", str(path))
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [f"{path}: {reason}"]


def test_a_data_file_over_the_cap_names_the_limit_and_how_to_raise_it(tmp_path):
    path = sparse(tmp_path / "items.jsonl", 2 * MB)
    ran = pcf_process("validate", "jsonl", str(path), env={"PCF_MAX_FILE_MB": "1"})
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[-1] == (
        f"{path}: 2.0 MB, over the limit of 1 MB (set PCF_MAX_FILE_MB to raise it)"
    )


def test_a_replay_recording_that_is_a_fifo_stops_judge(tmp_path, demo_engine):
    path = fifo(tmp_path)
    ran = pcf_process("judge", "demo", "--backend", "replay", "--replay", str(path), "--limit", "1")
    assert ran.returncode != 0
    assert "not a regular file (a FIFO)" in ran.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared data is absent")
def test_the_real_data_fits_every_cap():
    checks = [
        ("validate", "rewardbench2", str(RB2)),
        ("validate", "judgebench", str(JUDGEBENCH_PAIRS)),
        ("replay", "judgebench", str(O1_MINI)),
        ("replay", "judgebench", str(HAIKU)),
        ("replay", "llmbar", str(LLMBAR), "--judge", "GPT-4", "--strategy", "CoT"),
    ]
    for args in checks:
        ran = pcf_process(*args)
        assert ran.returncode == 0, (args, ran.stderr)
        assert json.loads(ran.stdout)


# ---------------------------------------------------------------- files written whole


def test_a_file_written_whole_replaces_the_old_one_when_done(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    path.chmod(0o640)
    with replacing(path) as file:
        file.write("new ü\n")
        assert path.read_text() == "old\n"
    assert path.read_text(encoding="utf-8") == "new ü\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the old file's permissions
    assert os.listdir(tmp_path) == ["out.jsonl"]


def write_half(path: Path) -> None:
    """Write half of ``path``, then fail."""
    with replacing(path) as file:
        file.write("half of it")
        file.flush()
        raise RuntimeError("stopped midway")


def test_a_write_that_fails_midway_leaves_no_partial_file_and_the_old_one(tmp_path):
    path = tmp_path / "out.jsonl"
    for before in (None, "a good file\n"):
        if before:
            path.write_text(before)
        with pytest.raises(RuntimeError, match="midway"):
            write_half(path)
        assert os.listdir(tmp_path) == ([path.name] if before else [])
        if before:
            assert path.read_text() == before


def test_a_new_file_gets_the_usual_permissions_and_a_link_is_followed(tmp_path):
    target, link = tmp_path / "target.jsonl", tmp_path / "link.jsonl"
    with replacing(target) as file:
        file.write("1\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    link.symlink_to(target)
    with replacing(link) as file:
        file.write("2\n")
    assert link.is_symlink()
    assert target.read_text() == "2\n"


def small_files() -> None:
    """In a child process: a write past 64 KB fails with EFBIG (File too large)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def label_every_demo_item(engine: Engine) -> None:
    """Give each demo item a label and a resolution with a long random note, so its labels and
    gold exports outgrow :func:`small_files` in every format."""
    random = Random(7)
    rita = Actor("rita@x.org", Role.REVIEWER)
    with Session(engine) as session:
        enrol(session, rita)
        demo = get_dataset("demo", session=session)
        assert demo is not None
        for item in load_items(demo.id, session=session):
            note = "".join(random.choices(string.ascii_letters, k=5000))
            item_id = item.metadata["db_id"]
            choice = "none_correct"
            add_adjudication(item_id, session=session, annotator="ann", choice=choice, notes=note)
            resolve(item_id, session=session, actor=rita, choice=choice, reason=note)
        session.commit()


def files_in(folder: Path) -> list[Path]:
    """The files under ``folder``, not its folders."""
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


EXPORTS = {
    "export": (["export", "demo-pcf", "--what", "judgments", "--out"], "judgments.jsonl"),
    "report": (["report", "demo-pcf", "--out"], "report/report.html"),
    "triage": (["triage", "demo-pcf", "--by", "calibrated", "--out"], "triage/triage.png"),
    **{  # `pcf gold export` writes with the same writer per format (write_records)
        f"labels {fmt}": (["labels", "export", "demo", "--format", fmt, "--out"], name)
        for fmt, name in [
            ("jsonl", "x.jsonl"),
            ("csv", "x.csv"),
            ("parquet", "x.parquet"),
            ("hf", f"hf/{HF_DATA}"),
        ]
    },
}


@pytest.mark.parametrize("export", EXPORTS)
def test_an_export_that_fails_midway_leaves_the_file_it_would_replace(
    tmp_path, demo_engine, export
):
    """Every writer of a file a user names, its disk full (writes past 64 KB fail): the
    previous file stays whole, no temporary file is left, and one line says what failed (a
    report's files are each whole: a chart written before the failure is the new one)."""
    arguments, name = EXPORTS[export]
    if arguments[0] != "export":
        label_every_demo_item(demo_engine)
    folder = tmp_path / "exports"
    out = folder / name
    given = folder / name.split("/")[0] if "/" in name else out
    out.parent.mkdir(parents=True)
    out.write_bytes(b"a good export\n")
    before = files_in(folder)
    pcf(*arguments, str(tmp_path / "warm" / given.name))  # stores the report's analyses
    # Only the command whose writes fail needs a process of its own (its file size limit).
    ran = pcf_process(*arguments, str(given), preexec_fn=small_files)
    assert ran.returncode == 1, ran.stderr
    line = ran.stderr.splitlines()[-1]
    assert line.startswith(f"error: cannot write {given}: "), ran.stderr
    assert line.endswith("File too large"), ran.stderr
    assert out.read_bytes() == b"a good export\n"
    after = files_in(folder)
    assert set(before) <= set(after)
    assert not [p for p in after if p.name.startswith(".")]  # no temporary file is left
    pcf(*arguments, str(given))
    assert out.stat().st_size > 64 * 1024
