"""Seconds per label on the Adjudicate page in Chromium, beside a bare Streamlit page (the floor).

Two fresh servers on free ports: ``streamlit run app.py`` on a temporary SQLite database (the
demo and, when ``../shared/data`` has them, the first 120 RewardBench 2 Factuality rows with a
simulated PCF run), and a bare Streamlit page with one button whose shortcut draws the next
"item". In headless Chromium (1400x1000) a person labels 30 items with the keyboard (keys 1, 2,
3, 0 and X in turn) and presses the floor page's key 30 times; the two tabs take turns, so that
the machine's load weighs on both alike. Each figure is the time from the key press to the next
item's prompt being drawn (its heading and prompt fresh, not the previous run's). After each
item the tab waits until the app's script run has ended, then a short pause (a quick reader).

A key press after which no next item shows within ``LOST_AFTER_S`` is a lost key (pressed
again). The labels saved are checked against the items shown: one label per press, for the item
on screen.

``--database postgres`` runs the app on the PostgreSQL server of ``PCF_TEST_DATABASE_URL``
(``bash .ci/with-postgres .venv/bin/python -m benchmarks.label_latency --database postgres``
starts a throwaway one), whose database must be empty.

Target: the median per label <= 2x the floor's median, no lost key. Last line: JSON figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlmodel import Session, col, select

from pcf.labelling.membership import set_local_name
from pcf.store import DATABASE_URL_ENV, Adjudication, ItemRow, get_engine, session_scope

ROOT = Path(__file__).resolve().parents[1]
REWARDBENCH2 = ROOT.parent / "shared" / "data" / "rewardbench2" / "factuality-first120.jsonl"
LABELS = 30
KEYS = ("1", "2", "3", "0", "x")
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1000}
SERVER_START_S = 120
LOST_AFTER_S = 20
READING_PAUSE_S = 0.3
TARGET_RATIO = 2.0
POSTGRES_URL_ENV = "PCF_TEST_DATABASE_URL"
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
FLOOR_PAGE = """
import streamlit as st

st.session_state.setdefault("shown", 0)


def next_item():
    st.session_state.shown += 1


st.button("Next", shortcut="1", on_click=next_item)
st.subheader(f"Item {st.session_state.shown}")
with st.container(key="adjudicate_prompt"):
    st.markdown(f"The prompt of item {st.session_state.shown}.")
"""
DRAWN = """([before, prompt]) => {
    const fresh = (node) => node && node.closest("[data-stale='true']") === null;
    const heading = [...document.querySelectorAll("[data-testid=stMain] h3")]
        .find((h) => h.innerText.startsWith("Item "));
    const box = document.querySelector(".st-key-" + prompt);
    const text = box && box.querySelector("[data-testid=stMarkdownContainer], pre, code");
    if (!heading || !fresh(heading) || heading.innerText === before) return null;
    return text && fresh(text) && text.innerText.trim() ? heading.innerText : null;
}"""
"""The heading of the item on screen once a new item's heading and prompt are drawn (the prompt
box has the key ``adjudicate_prompt``), else null."""


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(script: Path, url: str) -> Iterator[str]:
    """``streamlit run SCRIPT`` on the database at ``url`` and a free port: its base address."""
    port = free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "streamlit", "run", str(script)),
            *("--server.headless", "true", "--server.port", str(port)),
            *("--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"),
        ],
        cwd=ROOT,
        env={**os.environ, DATABASE_URL_ENV: url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit run {script.name} did not start") from None
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a script run still busy (a page load timed out)
            server.kill()
            server.wait()


def pcf(url: str, *args: str) -> None:
    """A ``pcf`` command on the database at ``url``."""
    env = {**os.environ, DATABASE_URL_ENV: url}
    subprocess.run([sys.executable, "-m", "pcf", *args], env=env, check=True, capture_output=True)


def build_database(url: str) -> str:
    """The demo and, when present, RewardBench 2 with a simulated PCF run; the local person
    named. Returns the dataset to label: ``rb2``, else ``demo``."""
    pcf(url, "demo")
    dataset = "demo"
    if REWARDBENCH2.exists():
        dataset = "rb2"
        pcf(url, "import", "rewardbench2", str(REWARDBENCH2), "--name", dataset)
        pcf(url, "judge", dataset, "--protocol", "pcf", "--k", "7", "--name", f"{dataset}-pcf")
    engine = get_engine(url)
    with session_scope(engine) as s:
        set_local_name("Bench", session=s)
    engine.dispose()
    return dataset


class Tab:
    """One browser tab on a page that draws an "Item ..." heading and a prompt box, with the
    heading on screen now."""

    def __init__(self, page: Page, address: str) -> None:
        self.page = page
        page.goto(address)
        self.heading = self.wait_drawn("", LOST_AFTER_S * 6)
        if self.heading is None:
            raise RuntimeError(f"{address} drew no item")

    def wait_drawn(self, before: str, timeout_s: float) -> str | None:
        """The heading of the next item once it is drawn, or None after ``timeout_s``."""
        try:
            found = self.page.wait_for_function(
                DRAWN, arg=[before, "adjudicate_prompt"], timeout=timeout_s * 1000, polling="raf"
            )
        except PlaywrightTimeout:
            return None
        return found.json_value()

    def press(self, key: str) -> tuple[float, int]:
        """Press ``key`` once the page is idle and read: seconds until the next item is drawn,
        and the keys lost on the way (pressed again)."""
        self.page.locator(IDLE).wait_for(state="attached", timeout=LOST_AFTER_S * 6000)
        time.sleep(READING_PAUSE_S)
        lost = 0
        while True:
            start = time.perf_counter()
            self.page.keyboard.press(key)
            heading = self.wait_drawn(self.heading, LOST_AFTER_S)
            if heading is not None:
                self.heading = heading
                return time.perf_counter() - start, lost
            lost += 1


def saved_labels(url: str, annotator: str) -> list[tuple[str, str]]:
    """``(item key, choice)`` of the annotator's labels, oldest first."""
    engine = get_engine(url)
    with Session(engine) as s:
        rows = s.exec(
            select(ItemRow.item_key, Adjudication.choice)
            .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
            .where(Adjudication.annotator == annotator)
            .order_by(col(Adjudication.id))
        ).all()
    engine.dispose()
    return [tuple(row) for row in rows]


def p95(values: list[float]) -> float:
    """The 95th percentile (inclusive method)."""
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcf-label-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        if args.database == "postgres":
            url = os.environ.get(POSTGRES_URL_ENV, "")
            if not url:
                raise SystemExit(f"--database postgres needs {POSTGRES_URL_ENV}")
        dataset = build_database(url)
        floor_page = Path(folder) / "floor.py"
        floor_page.write_text(FLOOR_PAGE, encoding="utf-8")
        labels, floor, lost, shown = [], [], 0, []
        with (
            serve(ROOT / "app.py", url) as app,
            serve(floor_page, url) as bare,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            adjudicate = Tab(
                browser.new_page(viewport=VIEWPORT), f"{app}/adjudicate?dataset={dataset}"
            )
            bare_tab = Tab(browser.new_page(viewport=VIEWPORT), bare)
            for n in range(LABELS):
                shown.append(adjudicate.heading.removeprefix("Item "))
                seconds, missed = adjudicate.press(KEYS[n % len(KEYS)])
                labels.append(seconds)
                lost += missed
                seconds, missed = bare_tab.press("1")
                floor.append(seconds)
                lost += missed
            browser.close()
        saved = saved_labels(url, "Bench")
    if [item for item, _ in saved] != shown:
        raise RuntimeError(f"labels saved for {saved}, items shown {shown}")
    median, floor_median = statistics.median(labels), statistics.median(floor)
    ratio = median / floor_median
    met = ratio <= TARGET_RATIO and lost == 0
    print(f"{args.database}, dataset {dataset}: {LABELS} labels by keyboard, {len(saved)} saved")
    print(
        f"key to next item's prompt: median {median:.3f} s, p95 {p95(labels):.3f} s, "
        f"max {max(labels):.3f} s"
    )
    print(f"bare one-button page (floor): median {floor_median:.3f} s, p95 {p95(floor):.3f} s")
    print(
        f"median / floor = {ratio:.2f} (target <= {TARGET_RATIO:g}), lost keys {lost}: "
        f"{'met' if met else 'MISSED'}"
    )
    print(
        json.dumps(
            {
                "database": args.database,
                "dataset": dataset,
                "labels": LABELS,
                "median_s": round(median, 4),
                "p95_s": round(p95(labels), 4),
                "max_s": round(max(labels), 4),
                "floor_median_s": round(floor_median, 4),
                "floor_p95_s": round(p95(floor), 4),
                "ratio": round(ratio, 2),
                "lost_keys": lost,
            }
        )
    )


if __name__ == "__main__":
    main()
