"""Scale: time and peak memory of each step at 100,000 items, beside the 52-item demo.

Builds ``items.jsonl`` of N generated items (seeded; a question of 100-250 characters, 4
candidates of 300-1,200 characters of varied words, a gold id) in a temporary folder, then runs
each step as its own ``pcf`` process (``python -m pcf``) on a fresh SQLite file, and reads that
process's wall time and peak resident memory (``ru_maxrss`` from ``os.wait4``):

- ``import``: ``pcf import jsonl items.jsonl``;
- ``direct_run``: ``pcf judge --protocol direct`` (the simulated judge);
- ``pcf_run``: ``pcf judge --protocol pcf --k 3`` on the same dataset (its canonical calls are
  the direct run's, cache hits);
- ``export_judgments`` and ``export_decisions``: ``pcf export`` of the PCF run to files;
- ``aggregate``: ``pcf aggregate`` of the exported judgments file.

The database's bytes per stored call: the file's growth during the PCF run divided by the calls
it stored (calls made and cache hits, each a row); beside it the whole file over every call.

Then the cold load of every page of the app: per page and database, a fresh ``streamlit run
app.py`` (local mode, the local person named), whose first request is that page's address with
the PCF run chosen (``?dataset=&run=``), timed in headless Chromium from navigation until the
page's title is drawn and its script run has ended (no spinner, no exception box); then a
second visit in a new browser session on the same server (what is cached for every session is
warm). A page that takes longer than ``--page-timeout`` is recorded as a timeout (null).

The demo twin of every figure: ``pcf demo`` on its own SQLite file (export, aggregate and pages
of its run ``demo-pcf``), and ``data/demo/items.jsonl`` imported into another file and judged
like the large case (import, direct and PCF runs, bytes per call). Demo and large page loads
alternate, so that the shared machine's load weighs on both alike.

    .venv/bin/python -m benchmarks.scale --items 10000

Last line: one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from benchmarks.label_latency import serve
from pcf.labelling.membership import set_local_name
from pcf.store import DATABASE_URL_ENV, get_engine, session_scope

ROOT = Path(__file__).resolve().parents[1]
DEMO_ITEMS = ROOT / "data" / "demo" / "items.jsonl"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1000}
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CANDIDATES = 4
K = 3
FUNCTION_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if"
)
ONSETS = "b bl br c ch cr d dr f fl g gr h j k l m n p pl pr r s sh st t th tr v w z"
VOWELS = "a e i o u ai ea ie oo ou"
CODAS = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st", "rk", "ng")
OPENINGS = ("What", "When", "Who", "Which", "How", "Why", "Where", "In what year")
BUCKETS = ("plain-error", "unsupported-specificity", "calibrated-hedge")


def vocabulary(rng: random.Random, size: int = 20_000) -> tuple[list[str], list[float]]:
    """Made-up words of one to four syllables, function words first, and Zipf weights (the
    cumulative weights ``random.choices`` takes)."""
    onsets, vowels = ONSETS.split(), VOWELS.split()
    words = FUNCTION_WORDS.split()
    seen = set(words)
    while len(words) < size:
        word = "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(CODAS)
            for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    total, cumulative = 0.0, []
    for rank in range(1, size + 1):
        total += 1 / rank
        cumulative.append(total)
    return words, cumulative


def sentences(rng: random.Random, words: list[str], weights: list[float], length: int) -> str:
    """Sentences of 6-24 words, capitalised, some with a number, about ``length`` characters."""
    text: list[str] = []
    size = 0
    while size < length:
        sentence = rng.choices(words, cum_weights=weights, k=rng.randint(6, 24))
        if rng.random() < 0.3:
            sentence.insert(rng.randrange(len(sentence)), str(rng.randint(2, 2030)))
        line = " ".join(sentence).capitalize() + "."
        text.append(line)
        size += len(line) + 1
    return " ".join(text)[:length].rstrip() + "."


def write_items(path: Path, count: int, seed: int = 0) -> None:
    """``count`` generated items as JSON Lines at ``path``, the same for the same seed."""
    rng = random.Random(seed)
    words, weights = vocabulary(rng)
    with path.open("w", encoding="utf-8") as out:
        for index in range(count):
            question = sentences(rng, words, weights, rng.randint(90, 240))[:-1]
            ids = rng.sample(range(16**3), CANDIDATES)
            candidates = [
                {
                    "id": f"c{n:03x}",
                    "text": sentences(rng, words, weights, rng.randint(300, 1200)),
                }
                for n in ids
            ]
            item = {
                "item_id": f"scale-{index:06d}",
                "prompt": f"{rng.choice(OPENINGS)} {question[0].lower()}{question[1:]}?",
                "candidates": candidates,
                "gold": rng.choice(candidates)["id"],
                "bucket": rng.choice(BUCKETS),
            }
            out.write(json.dumps(item) + "\n")


def pcf(url: str, log: Path, *args: str, out: Path | None = None) -> dict[str, float]:
    """``pcf ARGS`` as its own process on the database at ``url`` (stdout to ``out``, stderr to
    ``log``): its wall seconds and peak resident memory in MB."""
    env = {**os.environ, DATABASE_URL_ENV: url}
    with (out or Path(os.devnull)).open("w") as stdout, log.open("a") as stderr:
        stderr.write(f"$ pcf {' '.join(args)}\n")
        stderr.flush()
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "pcf", *args], cwd=ROOT, env=env, stdout=stdout, stderr=stderr
        )
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        tail = log.read_text(encoding="utf-8")[-2000:]
        raise RuntimeError(f"pcf {' '.join(args)} exited with {process.returncode}:\n{tail}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}


def file_bytes(database: Path) -> int:
    """The SQLite file's size with its write-ahead log."""
    wal = database.with_name(database.name + "-wal")
    return database.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def stored_calls(summary: Path) -> int:
    """Calls a ``pcf judge`` invocation stored (made and cache hits), from its summary."""
    invocation = json.loads(summary.read_text())["this_invocation"]
    return invocation["attempts"] + invocation["cache_hits"]


def judge_steps(folder: Path, database: Path, items: Path, dataset: str) -> dict[str, Any]:
    """Import ``items`` as ``dataset`` into ``database`` and judge it directly, then with PCF
    at K=3: each step's figures, the database size after it, and bytes per stored call."""
    url, log = f"sqlite:///{database}", folder / f"{dataset}.log"
    steps = {"import": pcf(url, log, "import", "jsonl", str(items), "--name", dataset)}
    steps["import"]["db_mb"] = file_bytes(database) / 1e6
    summary = folder / f"{dataset}-direct.json"
    direct = ("--protocol", "direct", "--name", f"{dataset}-direct")
    steps["direct_run"] = pcf(url, log, "judge", dataset, *direct, out=summary)
    steps["direct_run"]["db_mb"] = file_bytes(database) / 1e6
    calls = stored_calls(summary)
    before = file_bytes(database)
    summary = folder / f"{dataset}-pcf.json"
    protocol = ("--protocol", "pcf", "--k", str(K), "--name", f"{dataset}-pcf")
    steps["pcf_run"] = pcf(url, log, "judge", dataset, *protocol, out=summary)
    after = file_bytes(database)
    steps["pcf_run"]["db_mb"] = after / 1e6
    pcf_calls = stored_calls(summary)
    return {
        "steps": steps,
        "bytes_per_call": (after - before) / pcf_calls,
        "file_bytes_per_call": after / (calls + pcf_calls),
        "calls": calls + pcf_calls,
    }


def output_steps(folder: Path, database: Path, run: str, items: Path) -> dict[str, Any]:
    """``pcf export`` of ``run``'s judgments and decisions, then ``pcf aggregate`` of the
    judgments file: each step's figures."""
    url, log = f"sqlite:///{database}", folder / f"{run}-outputs.log"
    judgments = folder / f"{run}-judgments.jsonl"
    return {
        "export_judgments": pcf(
            url, log, "export", run, "--what", "judgments", "--out", str(judgments)
        ),
        "export_decisions": pcf(
            url, log, "export", run, "--what", "decisions", "--out", str(folder / f"{run}.jsonl")
        ),
        "aggregate": pcf(
            url,
            log,
            *("aggregate", str(judgments), "--items", str(items)),
            out=folder / f"{run}-aggregated.jsonl",
        ),
    }


def page_addresses() -> dict[str, str]:
    """Every page of the app (a file in ``pages/``) and its address; Overview is ``/``."""
    names = sorted(p.stem for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__")
    return {name: "/" if name == "overview" else f"/{name}" for name in names}


def load(browser: Browser, address: str, timeout_s: float) -> float | None:
    """Seconds from opening ``address`` in a new browser session until the page's title is
    drawn and its script run has ended with no spinner; None after ``timeout_s``."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    timeout_ms = timeout_s * 1000
    try:
        start = time.perf_counter()
        page.goto(address, wait_until="commit", timeout=timeout_ms)
        page.get_by_test_id("stMain").locator("h1").first.wait_for(timeout=timeout_ms)
        page.locator(IDLE).wait_for(state="attached", timeout=timeout_ms)
        page.get_by_test_id("stSpinner").first.wait_for(state="detached", timeout=timeout_ms)
        elapsed = time.perf_counter() - start
    except PlaywrightTimeout:
        return None
    finally:
        if page.get_by_test_id("stException").count():
            raise RuntimeError(f"{address} shows an exception")
        context.close()
    return elapsed


def name_local_person(database: Path) -> None:
    """Name the local person, as the first visit's name dialog would."""
    engine = get_engine(f"sqlite:///{database}")
    with session_scope(engine) as session:
        set_local_name("Scale Bench", session=session)
    engine.dispose()


def page_loads(
    browser: Browser, database: Path, query: str, address: str, timeout_s: float
) -> tuple[float | None, float | None]:
    """A fresh server on ``database``: the cold load of ``address`` + ``query``, then a second
    visit in a new session (None when the cold load timed out)."""
    with serve(ROOT / "app.py", f"sqlite:///{database}") as base:
        cold = load(browser, base + address + query, timeout_s)
        again = load(browser, base + address + query, timeout_s) if cold is not None else None
    return cold, again


def seconds(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.2f} s"


def measure_pages(cases: dict[str, tuple[Path, str]], timeout_s: float) -> dict[str, Any]:
    """Per page, for each case (a database and the address's query), a fresh server's cold
    load and a second visit; the cases take turns on each page."""
    figures: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        for name, address in page_addresses().items():
            loads: dict[str, float | None] = {}
            for case, (database, query) in cases.items():
                cold, again = page_loads(browser, database, query, address, timeout_s)
                loads[case], loads[f"{case}_again"] = cold, again
            print(
                f"page {name:<11} cold {seconds(loads['value'])}, again "
                f"{seconds(loads['value_again'])}; demo cold {seconds(loads['demo'])}, "
                f"again {seconds(loads['demo_again'])}",
                flush=True,
            )
            figures[name] = {
                case: None if loads[case] is None else round(loads[case], 2)
                for case in ("value", "demo", "value_again", "demo_again")
            }
        browser.close()
    return figures


def step_figures(items: int, large: dict[str, Any], demo: dict[str, Any]) -> dict[str, Any]:
    """Print the steps and the bytes per call beside the demo's; the same as JSON figures."""
    figures: dict[str, Any] = {"steps": {}}
    print(f"{'step':<17} {items:>9,} items {'demo':>21}")
    for step, value in large["steps"].items():
        twin = demo["steps"][step]
        print(
            f"{step:<17} {value['seconds']:8.1f} s {value['peak_rss_mb']:6.0f} MB"
            f"   {twin['seconds']:8.2f} s {twin['peak_rss_mb']:6.0f} MB"
        )
        figures["steps"][step] = {name: round(number, 2) for name, number in value.items()}
        figures["steps"][step] |= {f"demo_{name}": round(n, 2) for name, n in twin.items()}
    print(
        f"database bytes per call stored by the PCF run: {large['bytes_per_call']:,.0f} "
        f"(demo {demo['bytes_per_call']:,.0f}); whole file per call: "
        f"{large['file_bytes_per_call']:,.0f} (demo {demo['file_bytes_per_call']:,.0f}); "
        f"{large['calls']:,} calls in {large['steps']['pcf_run']['db_mb']:,.0f} MB",
        flush=True,
    )
    for name in ("bytes_per_call", "file_bytes_per_call"):
        figures[name] = {"value": round(large[name]), "demo": round(demo[name])}
    return figures


def load_average() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items of the large case")
    parser.add_argument("--skip-pages", action="store_true", help="no page loads")
    parser.add_argument("--page-timeout", type=float, default=120, help="seconds per page load")
    parser.add_argument("--keep", type=Path, help="keep the databases and files in this folder")
    args = parser.parse_args()
    started = load_average()
    print(f"load average at start: {started}", flush=True)

    with tempfile.TemporaryDirectory(prefix="pcf-scale-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        items = folder / "items.jsonl"
        start = time.perf_counter()
        write_items(items, args.items)
        print(
            f"{args.items:,} items written in {time.perf_counter() - start:.1f} s "
            f"({items.stat().st_size / 1e6:.0f} MB)",
            flush=True,
        )
        demo_db = folder / "demo.db"
        built = pcf(f"sqlite:///{demo_db}", folder / "demo.log", "demo")
        print(f"pcf demo: {built['seconds']:.1f} s, {built['peak_rss_mb']:.0f} MB", flush=True)
        demo = judge_steps(folder, folder / "demo-steps.db", DEMO_ITEMS, "demo-steps")
        demo["steps"] |= output_steps(folder, demo_db, "demo-pcf", DEMO_ITEMS)
        large_db = folder / "scale.db"
        large = judge_steps(folder, large_db, items, "scale")
        large["steps"] |= output_steps(folder, large_db, "scale-pcf", items)

        figures: dict[str, Any] = {"items": args.items, "candidates": CANDIDATES, "k": K}
        figures |= step_figures(args.items, large, demo)
        if not args.skip_pages:
            name_local_person(demo_db)
            name_local_person(large_db)
            cases = {
                "value": (large_db, "?dataset=scale&run=scale-pcf"),
                "demo": (demo_db, "?dataset=demo&run=demo-pcf"),
            }
            figures["cold_load_s"] = measure_pages(cases, args.page_timeout)
        if args.keep:
            print(f"kept in {folder}")

    ended = load_average()
    print(f"load average at end: {ended}")
    figures["load_average"] = {"start": float(started.split()[0]), "end": float(ended.split()[0])}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
