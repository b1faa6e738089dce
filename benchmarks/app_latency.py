"""Latency of the app: cold page loads in a real browser, the Review page's render and saves.

In headless Chromium (Debian's ``/usr/bin/chromium``), against a freshly started
``streamlit run app.py`` on a free port, for the demo database (``pcf demo``) and for a
temporary SQLite database with 10,000 items of 4 candidates and a finished PCF run of 7 calls
per item (70,000 stored calls with realistic judgments and request/response texts):

- the first request to the fresh server, a deep link to a Review item (imports, the run's
  decisions computed, the legacy ``pages/`` mode handed over to app.py);
- then per page its first visit (a new session that computes what the page caches for every
  session) and cold page loads: other new browser sessions (new Streamlit sessions) opening
  the page's address, from navigation until the page's title is drawn and its script run ended
  (the target applies to their median, over ``--repeats`` loads);
- the floor: the same measure for a bare one-line Streamlit page (``st.title``) served the same
  way in the same run, what any page of any Streamlit app costs on this machine.

Every page of the app is loaded, as the local admin sees it (all pages). ``--busy N`` runs N
CPU-bound processes meanwhile (a busy machine): then the figure to read is each page against the
median page (the target: no page above 2x). ``--demo-only`` skips the 10,000 items.

Then with AppTest on the 10,000 items, as ``streamlit run app.py`` runs it (app.py, the shared
sidebar and the page): warm renders of the Review page for 10 different items, and 50 label
saves through the Adjudicate page's code path (``add_adjudication`` and commit).

Targets: cold page load <= 2 s on the demo (a quiet machine) and <= 3 s with 10,000 items,
every page <= 2x the median page; median warm render <= 0.3 s; median save <= 0.05 s. Last line:
JSON figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, sync_playwright
from sqlalchemy import Engine
from streamlit.testing.v1 import AppTest

from benchmarks.label_latency import serve
from pcf.items import Candidate, Item
from pcf.labelling.membership import set_local_name
from pcf.store import (
    DATABASE_URL_ENV,
    add_adjudication,
    create_run,
    get_engine,
    import_items,
    insert_calls,
    item_db_ids,
    session_scope,
    update_run_totals,
)

ROOT = Path(__file__).resolve().parents[1]
ITEMS, CALLS, CANDIDATES = 10_000, 7, 4
WARM_RENDERS, SAVES = 10, 50
INSERT_CHUNK = 5_000
KEYS = ("A", "B", "C", "D")
SLOT_BIAS = (0.8, 0.3, 0.0, -0.2)
RENDER_TARGET_S, SAVE_TARGET_S = 0.3, 0.05
DEMO_LOAD_TARGET_S, LARGE_LOAD_TARGET_S = 2.0, 3.0
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1000}
SETTLED = "[data-testid='stApp'][data-test-script-state='notRunning']"
LOAD_TIMEOUT_MS = 120_000
SYSTEM = (
    "You are a careful fact-checker. You compare several candidate answers to one question and "
    "judge how factually accurate each of them is. Factual accuracy comes first; unsupported "
    "specific details count against an answer. The order of the candidates carries no "
    "information. Reply with one JSON object and nothing else."
)
FACTS = (
    "The Amazon is the largest rainforest on Earth and spans nine countries in South America.",
    "Water boils at 100 degrees Celsius at sea level, and at a lower temperature at altitude.",
    "The Great Wall of China is not visible to the naked eye from low Earth orbit.",
    "Light from the Sun takes about eight minutes and twenty seconds to reach the Earth.",
    "Mount Everest, on the border of Nepal and China, is about 8,849 metres above sea level.",
    "Marie Curie won Nobel Prizes in both physics (1903) and chemistry (1911).",
)


def make_item(index: int, rng: random.Random) -> Item:
    """An item with a prompt, four candidates of a sentence or two, a gold id and a bucket."""
    candidates = tuple(
        Candidate(f"c{index}-{n}", f"{rng.choice(FACTS)} {rng.choice(FACTS)} (variant {n})")
        for n in range(CANDIDATES)
    )
    return Item(
        f"bench-{index:05d}",
        f"Question {index}: which answer states the facts correctly? {rng.choice(FACTS)}",
        candidates,
        rng.choice(candidates).id,
        rng.choice(("plain-error", "unsupported-specificity", "calibrated-hedge")),
    )


def call_row(
    run_id: int, item_db_id: int, item: Item, call_index: int, rng: random.Random
) -> dict[str, Any]:
    """One answered call: canonical order first, then shuffled; scores favour gold and slot 1."""
    order = list(item.candidate_ids)
    if call_index:
        rng.shuffle(order)
    factuality = {
        cid: round(
            min(10.0, max(0.0, (7.5 if cid == item.gold else 4.5) + rng.gauss(0, 1.5) + bias)), 1
        )
        for cid, bias in zip(order, SLOT_BIAS, strict=True)
    }
    risk = {
        cid: round(min(1.0, max(0.0, 1 - f / 10 + rng.gauss(0, 0.1))), 2)
        for cid, f in factuality.items()
    }
    ranking = sorted(order, key=lambda cid: -factuality[cid])
    confidence = round(rng.uniform(0.5, 0.99), 2)
    key_of = dict(zip(order, KEYS, strict=True))
    user = f"<question>\n{item.prompt}\n</question>\n\n" + "\n\n".join(
        f'<candidate key="{key_of[cid]}">\n{item.text_of(cid)}\n</candidate>' for cid in order
    )
    response = {
        "candidates": [
            {
                "key": key_of[cid],
                "factuality": factuality[cid],
                "hallucination_risk": risk[cid],
                "rationale": "Consistent with well-established facts."
                if factuality[cid] >= 6
                else "Contains claims that look wrong or invented.",
            }
            for cid in order
        ],
        "ranking": [key_of[cid] for cid in ranking],
        "confidence": confidence,
    }
    return {
        "run_id": run_id,
        "item_id": item_db_id,
        "execution": 0,
        "call_index": call_index,
        "repeat_index": 0,
        "order": order,
        "keys": list(KEYS),
        "content_key": hashlib.sha256(f"{user}|{call_index}".encode()).hexdigest(),
        "request": {
            "backend": "simulated",
            "model": "sim-bench",
            "system": SYSTEM,
            "user": user,
            "schema": {},
            "temperature": 0.0,
            "max_tokens": 1024,
        },
        "request_texts": (item.prompt, [item.text_of(cid) for cid in order]),
        "response_text": json.dumps(response),
        "response_raw": {"backend": "simulated", "simulated": True},
        "ok": True,
        "repaired": [],
        "judgment": {
            "factuality": factuality,
            "hallucination_risk": risk,
            "ranking": ranking,
            "confidence": confidence,
        },
        "input_tokens": 250,
        "output_tokens": 180,
        "latency_s": round(rng.uniform(0.4, 2.0), 3),
        "created_at": datetime.now(UTC),
    }


def build_database(engine: Engine) -> tuple[list[Item], dict[str, int]]:
    """The dataset ``bench`` and its finished run ``bench-pcf``: the items and their db ids."""
    rng = random.Random(0)
    items = [make_item(i, rng) for i in range(ITEMS)]
    with session_scope(engine) as s:
        dataset = import_items(items, session=s, name="bench", fmt="jsonl")
        run = create_run(
            "bench-pcf",
            session=s,
            dataset_id=dataset.id,
            protocol="pcf",
            backend="simulated",
            model="sim-bench",
            k=CALLS,
            schedule="balanced",
        )
        db_ids = item_db_ids(dataset.id, session=s)
        rows = [
            call_row(run.id, db_ids[item.item_id], item, index, rng)
            for item in items
            for index in range(CALLS)
        ]
        for start in range(0, len(rows), INSERT_CHUNK):
            insert_calls(rows[start : start + INSERT_CHUNK], session=s)
        run.status = "finished"
        update_run_totals(run.id, session=s)
    return items, db_ids


def build_demo(url: str) -> None:
    """The demo database at ``url``, built by ``pcf demo`` in a child process."""
    env = {**os.environ, DATABASE_URL_ENV: url}
    subprocess.run([sys.executable, "-m", "pcf", "demo"], env=env, check=True, capture_output=True)


def name_local_person(url: str) -> None:
    """Name the local person of the database at ``url``, so that pages open as they do after
    the first visit's name dialog."""
    engine = get_engine(url)
    with session_scope(engine) as session:
        set_local_name("Bench Reviewer", session=session)
    engine.dispose()


def cold_load(browser: Browser, address: str) -> float:
    """Seconds from opening ``address`` in a new browser session until the page is drawn: its
    title shown and its script run ended, with no exception box."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    start = time.perf_counter()
    page.goto(address, wait_until="commit")
    page.get_by_test_id("stMain").locator("h1").first.wait_for(timeout=LOAD_TIMEOUT_MS)
    page.locator(SETTLED).wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    elapsed = time.perf_counter() - start
    if page.get_by_test_id("stException").count():
        raise RuntimeError(f"{address} shows an exception")
    context.close()
    return elapsed


FIRST_REQUEST, FIRST_VISIT = "first request ", "first visit "
FLOOR_PAGE = "import streamlit as st\n\nst.title('Floor')\n"


def measure_cold_loads(
    script: Path, url: str, deep_link: str, paths: list[str], repeats: int
) -> dict[str, float]:
    """The first request to a fresh server (``deep_link``); then per path its first visit (a
    new session that computes what the page caches for every session, e.g. the Weights page's
    packed judgments), then the median of ``repeats`` cold loads (new sessions, the server's
    caches warm)."""
    with serve(script, url) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        loads = {FIRST_REQUEST + deep_link: cold_load(browser, base + deep_link)}
        for path in paths:
            loads[FIRST_VISIT + path] = cold_load(browser, base + path)
            loads[path] = statistics.median(cold_load(browser, base + path) for _ in range(repeats))
        browser.close()
    return loads


def measure_floor(folder: Path, url: str, repeats: int) -> tuple[float, float]:
    """A bare one-line Streamlit page, served as the app is: the first request to its fresh
    server, and the median of its cold loads."""
    script = folder / "floor.py"
    script.write_text(FLOOR_PAGE, encoding="utf-8")
    loads = measure_cold_loads(script, url, "/", ["/"], repeats)
    return loads[FIRST_REQUEST + "/"], loads["/"]


def cold_figures(loads: dict[str, float]) -> dict[str, float]:
    """The cold page loads alone (not the first request or first visits)."""
    return {k: v for k, v in loads.items() if not k.startswith((FIRST_REQUEST, FIRST_VISIT))}


def print_loads(name: str, loads: dict[str, float], target: float, floor: float) -> None:
    """One line per page load, each cold one against the floor and the median page; then the
    slowest against its target and the largest ratio to the median."""
    cold = cold_figures(loads)
    median = statistics.median(cold.values())
    for path, seconds in loads.items():
        if path in cold:
            print(
                f"{name} cold load {path}: {seconds:.2f} s, bare page {floor:.2f} s "
                f"({seconds / floor:.1f}x the floor, {seconds / median:.2f}x the median page)"
            )
        else:
            print(f"{name} {path}: {seconds:.2f} s")
    slowest = max(cold.values())
    print(f"{name}: slowest cold page load {slowest:.2f} s ({verdict(slowest, target)})")
    ratio = slowest / median
    print(f"{name}: slowest page {ratio:.2f}x the median page ({verdict(ratio, 2.0, 'x')})")


@contextmanager
def busy(processes: int) -> Iterator[None]:
    """``processes`` CPU-bound processes running meanwhile: a busy machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def page_paths(item: str) -> list[str]:
    """Every page of the app as the local admin opens it, as a shared link would: a Review
    item among them."""
    return [
        "/",
        f"/review?item={item}",
        "/adjudicate",
        "/resolve",
        "/compare",
        "/team",
        "/runs",
        "/weights",
        "/report",
        "/imports",
        "/members",
    ]


def render(at: AppTest) -> float:
    """Seconds for one run of the app; fails loudly if the page raised."""
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].message)
    return elapsed


def shown_item(at: AppTest) -> str:
    """The item key of the Review page's item heading."""
    heading = next(h.value for h in at.subheader if h.value.startswith("Item "))
    return heading.removeprefix("Item ").replace("\\", "")


def measure_review(items: list[Item]) -> tuple[float, list[float]]:
    """The cold render of the Review page, then warm renders of different items."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.switch_page("pages/review.py")
    cold = render(at)
    warm = []
    for item in items[:: ITEMS // WARM_RENDERS][:WARM_RENDERS]:
        at.selectbox(key="item").set_value(item.item_id)
        warm.append(render(at))
        if shown_item(at) != item.item_id:
            raise RuntimeError(f"the Review page shows {shown_item(at)}, not {item.item_id}")
    return cold, warm


def measure_saves(engine: Engine, items: list[Item], db_ids: dict[str, int]) -> list[float]:
    """Seconds per label saved as the Adjudicate page saves it: one transaction each."""
    timings = []
    for item in items[1 :: ITEMS // SAVES][:SAVES]:
        start = time.perf_counter()
        with session_scope(engine) as s:
            add_adjudication(
                db_ids[item.item_id],
                session=s,
                annotator="bench",
                choice=item.candidate_ids[0],
                confidence=0.75,
                tags=["near-tie"],
                notes="checked against two sources",
            )
        timings.append(time.perf_counter() - start)
    return timings


def verdict(value: float, target: float, unit: str = "ms") -> str:
    """Whether a figure (seconds, or a ratio with ``unit="x"``) meets its target."""
    shown = f"{target:g}x" if unit == "x" else f"{target * 1000:.0f} ms"
    return f"target <= {shown}: {'met' if value <= target else 'MISSED'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes meanwhile")
    parser.add_argument("--repeats", type=int, default=3, help="cold loads per page")
    parser.add_argument("--demo-only", action="store_true", help="skip the 10,000 items")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcf-bench-") as folder, busy(args.busy):
        demo_url = f"sqlite:///{Path(folder) / 'demo.db'}"
        build_demo(demo_url)
        name_local_person(demo_url)
        floor_first, floor = measure_floor(Path(folder), demo_url, args.repeats)
        print(
            f"floor (a bare one-line Streamlit page): first request {floor_first:.2f} s, "
            f"cold load {floor:.2f} s"
        )
        demo_loads = measure_cold_loads(
            ROOT / "app.py", demo_url, "/review?item=demo-013", page_paths("demo-024"), args.repeats
        )
        print_loads("demo", demo_loads, DEMO_LOAD_TARGET_S, floor)
        figures: dict[str, Any] = {
            "busy_processes": args.busy,
            "floor_first_request_s": round(floor_first, 3),
            "floor_cold_load_s": round(floor, 3),
            "demo_cold_load_s": {k: round(v, 3) for k, v in demo_loads.items()},
        }
        if not args.demo_only:
            figures |= measure_large(Path(folder), floor, args.repeats)
    print(json.dumps(figures))


def measure_large(folder: Path, floor: float, repeats: int) -> dict[str, Any]:
    """The 10,000 items: cold page loads, the Review page's renders and label saves."""
    url = f"sqlite:///{folder / 'bench.db'}"
    os.environ[DATABASE_URL_ENV] = url
    engine = get_engine(url)
    start = time.perf_counter()
    items, db_ids = build_database(engine)
    build_s = time.perf_counter() - start
    print(f"database: {ITEMS:,} items x {CALLS} calls built in {build_s:.1f} s")
    name_local_person(url)
    large_loads = measure_cold_loads(
        ROOT / "app.py", url, "/review?item=bench-00042", page_paths("bench-05000"), repeats
    )
    print_loads(f"{ITEMS:,} items", large_loads, LARGE_LOAD_TARGET_S, floor)

    cold, warm = measure_review(items)
    saves = measure_saves(engine, items, db_ids)
    engine.dispose()
    render_s, save_s = statistics.median(warm), statistics.median(saves)
    print(f"review page, cold (computes the run's decisions): {cold:.2f} s")
    print(
        f"review page, warm, {len(warm)} items: median {render_s:.3f} s, max {max(warm):.3f} s "
        f"({verdict(render_s, RENDER_TARGET_S)})"
    )
    print(
        f"adjudication save, {len(saves)} labels: median {save_s * 1000:.1f} ms, "
        f"max {max(saves) * 1000:.1f} ms ({verdict(save_s, SAVE_TARGET_S)})"
    )
    return {
        "items": ITEMS,
        "calls_per_item": CALLS,
        "review_render_s": round(render_s, 4),
        "review_render_max_s": round(max(warm), 4),
        "review_render_cold_s": round(cold, 4),
        "adjudication_save_s": round(save_s, 5),
        "adjudication_save_max_s": round(max(saves), 5),
        "build_s": round(build_s, 2),
        "large_cold_load_s": {k: round(v, 3) for k, v in large_loads.items()},
    }


if __name__ == "__main__":
    main()
