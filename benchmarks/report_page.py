"""Latency of the Report page in Chromium, on the demo and on RewardBench 2 (when present).

One database holds the demo (its four simulated runs) and, where ``../shared/data`` has them,
the 120 RewardBench 2 rows with a simulated direct and PCF run. A fresh ``streamlit run
app.py`` serves it; its first request (Python's imports) is made on the Members page. Then,
per dataset, the Report page is opened in a new browser session: the first visit (the report
built and cached for every session) and three more visits (a new session each), each timed
from navigation until the main table is drawn and the script run has ended; beside it, the
same for the Members page (a small page: what any new session costs). The report files
are written only when a download is clicked; the time of each download is measured too.

Target (issue 25): Report under 3 s on the demo. Last line: one JSON object.

    .venv/bin/python -m benchmarks.report_page
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from benchmarks.label_latency import pcf, serve
from pcf.labelling.membership import set_local_name
from pcf.store import get_engine, session_scope

ROOT = Path(__file__).resolve().parents[1]
REWARDBENCH2 = ROOT.parent / "shared" / "data" / "rewardbench2" / "factuality-first120.jsonl"
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
VISITS = 3
TIMEOUT_MS = 120_000


def build_database(url: str) -> list[str]:
    """The demo and, when present, RewardBench 2 with a simulated direct and PCF run; the
    local person named. Returns the datasets."""
    pcf(url, "demo")
    datasets = ["demo"]
    if REWARDBENCH2.exists():
        datasets.append("rb2")
        pcf(url, "import", "rewardbench2", str(REWARDBENCH2), "--name", "rb2")
        pcf(url, "judge", "rb2", "--protocol", "direct", "--name", "rb2-direct")
        pcf(url, "judge", "rb2", "--protocol", "pcf", "--k", "7", "--name", "rb2-pcf")
    engine = get_engine(url)
    with session_scope(engine) as s:
        set_local_name("Bench", session=s)
    engine.dispose()
    return datasets


def open_page(page: Page, path: str, drawn: str) -> float:
    """Seconds from navigation to ``path`` until the text ``drawn`` shows and the run ended."""
    start = time.perf_counter()
    page.goto(path)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text(drawn).first).to_be_visible(timeout=TIMEOUT_MS)
    page.locator(IDLE).wait_for(state="attached", timeout=TIMEOUT_MS)
    return time.perf_counter() - start


def download_s(page: Page, kind: str) -> float:
    """Seconds from a click on ``Download report.KIND`` until the file has arrived."""
    start = time.perf_counter()
    button = page.get_by_test_id("stMain").get_by_role("button", name=f"Download report.{kind}")
    with page.expect_download(timeout=TIMEOUT_MS) as started:
        button.click()
    started.value.path()
    return time.perf_counter() - start


def main() -> None:
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="pcf-report-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'pcf.db'}"
        datasets = build_database(url)
        with serve(ROOT / "app.py", url) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
            )
            warm = browser.new_page(base_url=base, viewport={"width": 1400, "height": 1000})
            warm.goto("/members")
            warm.locator(IDLE).wait_for(state="attached", timeout=TIMEOUT_MS)
            for dataset in datasets:
                loads, floor = [], []
                for _ in range(1 + VISITS):
                    context = browser.new_context(
                        base_url=base, viewport={"width": 1400, "height": 1000}
                    )
                    page = context.new_page()
                    floor.append(open_page(page, f"/members?dataset={dataset}", "Audit log"))
                    page = context.new_page()  # a second session: the Report page alone
                    loads.append(open_page(page, f"/report?dataset={dataset}", "PCF %"))
                    if len(loads) == 1 + VISITS:
                        downloads = {kind: download_s(page, kind) for kind in ("md", "html")}
                    context.close()
                figures[dataset] = {
                    "first_visit_s": round(loads[0], 2),
                    "visit_median_s": round(statistics.median(loads[1:]), 2),
                    "members_visit_median_s": round(statistics.median(floor[1:]), 2),
                    **{f"download_{k}_s": round(v, 2) for k, v in downloads.items()},
                }
                print(dataset, figures[dataset], flush=True)
            browser.close()
    load = os.getloadavg()[0]
    print(json.dumps({"report": figures, "load_average_1m": round(load, 2)}))


if __name__ == "__main__":
    main()
