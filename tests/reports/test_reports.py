"""`pcf report` and `pcf replay --report`: every table checked against an independent
recomputation from the exported judgments (plain Python, not pcf.decisions)."""

from __future__ import annotations

import base64
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats
from sqlmodel import Session
from statsmodels.stats.contingency_tables import mcnemar
from typer.testing import CliRunner

from pcf.cli import app
from pcf.connectors.recordings import read_judgebench_outputs, read_llmbar_results, replay_summary
from pcf.evaluation import paired_bootstrap_ci
from pcf.reports.document import Figure, Report, Section, Table
from pcf.reports.render import write_report
from pcf.store import get_engine
from tests.app import local_app, open_page
from tests.demo_database import copy_demo, new_database
from tests.factories import METHOD_PRESETS, pcf
from tests.html_tables import html_tables
from tests.shared_data import LLMBAR, O1_MINI

# Every test reports from a database: the module's study, or its own through PCF_DATABASE_URL.
pytestmark = pytest.mark.db

runner = CliRunner()
BUCKETS = ("mmlu-pro", "livebench-math", "livecodebench")
SIMULATED_NOTE = "Simulated judge: results illustrate the tool, not the method's accuracy."
SIMULATED_TAG = "*Simulated judge: see the note at the top.*"


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------- reading the report


def split_row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def md_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """``{### title: rows as {column: cell}}`` of every pipe table in report.md."""
    lines = text.splitlines()
    tables = {}
    for at, line in enumerate(lines):
        if not line.startswith("### "):
            continue
        rows = []
        for following in lines[at + 2 :]:
            if not following.startswith("|"):
                break
            rows.append(following)
        if rows:
            header = split_row(rows[0])
            tables[line[4:]] = [dict(zip(header, split_row(r), strict=True)) for r in rows[2:]]
    return tables


def pct(share: float) -> str:
    return f"{100 * share:.1f}"


def signed(points: float) -> str:
    return f"{points:+.1f}"


# ---------------------------------------------------------------- independent Eq. 5


def eq5_winners(
    judgments: list[dict],
    listing: dict[str, list[str]],
    weights: tuple[float, ...] = METHOD_PRESETS["proposed"],
    *,
    k: int | None = None,
    executions: int | None = None,
) -> dict[str, str | None]:
    """METHOD.md Eq. 5 in plain Python: per execution over its first k ok calls, averaged over
    executions with an ok call; ties within 1e-9 by V, B, S, then listing order."""
    calls: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for j in judgments:
        calls[j["item_id"]]
        if (
            j["ok"]
            and (k is None or j["call_index"] < k)
            and (executions is None or j["execution"] < executions)
        ):
            calls[j["item_id"]][j["execution"]].append(j)
    ws, wb, wv, wu = weights
    out = {}
    for item_id, by_execution in calls.items():
        ids = listing[item_id]
        n = len(ids)
        if not by_execution:
            out[item_id] = None
            continue
        total = {c: [0.0, 0.0, 0.0, 0.0] for c in ids}  # C, V, B, S
        for js in by_execution.values():
            m = len(js)
            for c in ids:
                s = sum(j["factuality"][c] / 10 for j in js) / m
                b = sum((n - (j["ranking"].index(c) + 1)) / (n - 1) for j in js) / m
                v = sum(j["ranking"][0] == c for j in js) / m
                u = sum(1 - j["hallucination_risk"][c] for j in js) / m
                for x, value in enumerate((ws * s + wb * b + wv * v + wu * u, v, b, s)):
                    total[c][x] += value / len(by_execution)
        left = list(ids)
        for x in range(4):
            best = max(total[c][x] for c in left)
            left = [c for c in left if total[c][x] >= best - 1e-9]
        out[item_id] = left[0]
    return out


def paired(gold: dict, direct: dict, method: dict) -> dict:
    ids = [i for i in method if gold.get(i) is not None]
    d = [direct[i] == gold[i] for i in ids]
    m = [method[i] == gold[i] for i in ids]
    improved = sum(not a and b for a, b in zip(d, m, strict=True))
    regressed = sum(a and not b for a, b in zip(d, m, strict=True))
    return {
        "n": len(ids),
        "direct": sum(d) / len(ids),
        "method": sum(m) / len(ids),
        "improved": improved,
        "regressed": regressed,
        "same": len(ids) - improved - regressed,
        "d": d,
        "m": m,
    }


# ---------------------------------------------------------------- the study and its reports


def pair_items() -> list[dict]:
    """30 labelled pairs in three JudgeBench buckets."""
    return [
        {
            "item_id": f"p{i:02d}",
            "prompt": f"Which answer to question {i} is right?",
            "candidates": [
                {"id": "x", "text": f"Answer x to question {i}: {i * 7}."},
                {"id": "y", "text": f"Answer y to question {i}: {i * 11}."},
            ],
            "gold": "x" if i % 2 else "y",
            "bucket": BUCKETS[i % 3],
        }
        for i in range(30)
    ]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """Demo database, `pcf study demo --name s`, `pcf report s` twice, a pairwise study with
    its report, and the exported judgments, decisions and items."""
    folder = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        url = new_database(folder)
        mp.setenv("PCF_DATABASE_URL", url)
        copy_demo(url)
        summaries = json.loads(pcf("study", "demo", "--name", "s"))["runs"]
        for out in ("out1", "out2"):
            pcf("report", "s", "--out", str(folder / out))
        items_file = folder / "pairs.jsonl"
        items_file.write_text("".join(json.dumps(i) + "\n" for i in pair_items()))
        pcf("import", "jsonl", str(items_file), "--name", "pairs")
        pcf("study", "pairs", "--name", "p")
        written = json.loads(pcf("report", "p", "--out", str(folder / "outp")))
        exported = {
            (run, what): jsonl(pcf("export", run, "--what", what))
            for run in ("s/direct", "s/pcf", "s/repeated", "p/apoc")
            for what in ("items", "judgments", "decisions")
        }
    return {
        "folder": folder,
        "summaries": {s["run"]: s for s in summaries},
        "exported": exported,
        "pairs_written": written,
        "md": (folder / "out1" / "report.md").read_text(encoding="utf-8"),
        "html": (folder / "out1" / "report.html").read_text(encoding="utf-8"),
        "pairs_md": (folder / "outp" / "report.md").read_text(encoding="utf-8"),
        "json": json.loads((folder / "out1" / "report.json").read_text(encoding="utf-8")),
        "pairs_json": json.loads((folder / "outp" / "report.json").read_text(encoding="utf-8")),
    }


@pytest.fixture(scope="module")
def recomputed(study) -> dict:
    """Winners, direct winners and gold of the demo study, recomputed from the exports."""
    items = study["exported"][("s/pcf", "items")]
    listing = {i["item_id"]: [c["id"] for c in i["candidates"]] for i in items}
    gold = {i["item_id"]: i["gold"] for i in items}
    judgments = {run: study["exported"][(run, "judgments")] for run in ("s/pcf", "s/repeated")}
    return {
        "listing": listing,
        "gold": gold,
        "judgments": judgments,
        "direct": {
            run: eq5_winners(js, listing, k=1, executions=1) for run, js in judgments.items()
        },
        "direct_run": eq5_winners(study["exported"][("s/direct", "judgments")], listing),
    }


def test_the_main_table_matches_an_independent_recomputation(study, recomputed):
    pcf_judgments = recomputed["judgments"]["s/pcf"]
    winners = eq5_winners(pcf_judgments, recomputed["listing"])
    direct = recomputed["direct"]["s/pcf"]
    assert direct == recomputed["direct_run"]  # the direct run's call is the canonical call
    expected = paired(recomputed["gold"], direct, winners)
    (row,) = md_tables(study["md"])["Main table: PCF against direct"]
    low, high = paired_bootstrap_ci(expected["d"], expected["m"], seed=0)
    p_value = mcnemar([[0, expected["improved"]], [expected["regressed"], 0]], exact=True).pvalue
    assert row == {
        "model": "simulated/sim-primacy",
        "run": "s/pcf",
        "N": str(expected["n"]),
        "direct %": pct(expected["direct"]),
        "PCF %": pct(expected["method"]),
        "Δ points": signed(100 * (expected["method"] - expected["direct"])),
        "improved": str(expected["improved"]),
        "regressed": str(expected["regressed"]),
        "same": str(expected["same"]),
        "McNemar p": f"{p_value:.3g}",
        "CI low": signed(100 * low),
        "CI high": signed(100 * high),
    }
    assert float(row["CI low"]) <= float(row["Δ points"]) <= float(row["CI high"])


def execution_zero(judgments: list[dict]) -> list[dict]:
    """The exported judgments of execution 0: the matched single-run diagnostics use no other."""
    return [j for j in judgments if j["execution"] == 0]


def test_the_k_table_uses_prefixes_of_execution_zero(study, recomputed):
    """Recomputed from the exported judgments of execution 0, to the last digit of report.json
    and as the Markdown prints it."""
    rows = md_tables(study["md"])["K table: repeated canonical and PCF at K prefixes (execution 0)"]
    records = study["json"]["tables"]["k"]
    assert [(r["method"], r["K"]) for r in rows] == [
        (method, str(k)) for method in ("repeated", "pcf") for k in (3, 5, 7)
    ]
    assert [(r["method"], r["k"], r["run"]) for r in records] == [
        (r["method"], int(r["K"]), r["run"]) for r in rows
    ]
    for row, record in zip(rows, records, strict=True):
        run = f"s/{row['method']}"
        judgments = execution_zero(recomputed["judgments"][run])
        winners = eq5_winners(judgments, recomputed["listing"], k=int(row["K"]))
        expected = paired(recomputed["gold"], recomputed["direct"][run], winners)
        assert row["run"] == run
        assert record["n"] == expected["n"]
        assert record["accuracy"] == 100 * expected["method"]
        assert record["direct_accuracy"] == 100 * expected["direct"]
        assert record["delta_points"] == 100 * (expected["method"] - expected["direct"])
        assert (record["improved"], record["regressed"]) == (
            expected["improved"],
            expected["regressed"],
        )
        assert row["N"] == str(expected["n"])
        assert row["direct %"] == pct(expected["direct"])
        assert row["accuracy %"] == pct(expected["method"])
        assert row["Δ vs direct (points)"] == signed(
            100 * (expected["method"] - expected["direct"])
        )
    # At the stored K, PCF on execution 0 is not the pooled main table (3 executions).
    pooled = eq5_winners(recomputed["judgments"]["s/pcf"], recomputed["listing"])
    alone = eq5_winners(execution_zero(recomputed["judgments"]["s/pcf"]), recomputed["listing"])
    assert pooled != alone


def test_the_weight_table_has_the_six_presets_on_execution_zero(study, recomputed):
    rows = md_tables(study["md"])[
        "Weight table: the six presets of METHOD.md on the same judgments (execution 0)"
    ]
    records = study["json"]["tables"]["weights"]
    assert [(r["run"], r["preset"]) for r in records] == [
        (run, preset) for run in ("s/pcf", "s/repeated") for preset in METHOD_PRESETS
    ]
    for row, record in zip(rows, records, strict=True):
        weights = METHOD_PRESETS[record["preset"]]
        assert [record[w] for w in ("ws", "wB", "wv", "wu")] == list(weights)
        assert [float(row[w]) for w in ("ws", "wB", "wv", "wu")] == list(weights)
        judgments = execution_zero(recomputed["judgments"][record["run"]])
        winners = eq5_winners(judgments, recomputed["listing"], weights)
        direct = eq5_winners(judgments, recomputed["listing"], weights, k=1)
        expected = paired(recomputed["gold"], direct, winners)
        assert record["n"] == expected["n"]
        assert record["accuracy"] == 100 * expected["method"]
        assert record["direct_accuracy"] == 100 * expected["direct"]
        assert record["delta_points"] == 100 * (expected["method"] - expected["direct"])
        assert row["accuracy %"] == pct(expected["method"])
        assert row["Δ vs direct (points)"] == signed(
            100 * (expected["method"] - expected["direct"])
        )


def test_report_json_holds_every_table_as_the_markdown_shows_it(study):
    data = study["json"]
    assert data["simulated"] is True
    tables = md_tables(study["md"])
    for key, described in data["about"].items():
        records = data["tables"][key]
        shown = [row for d in described for row in tables[d["title"]]]
        assert len(records) == len(shown), key
    assert {"settings", "usage", "main", "k", "weights", "instability", "slots"} <= set(
        data["tables"]
    )
    [main] = data["tables"]["main"]
    (row,) = tables["Main table: PCF against direct"]
    assert (main["run"], main["n"], pct(main["accuracy"] / 100)) == (
        row["run"],
        int(row["N"]),
        row["PCF %"],
    )
    assert "-0.0" not in json.dumps(data)


def test_decisions_carry_the_full_consensus_ranking(study):
    for record in study["exported"][("s/pcf", "decisions")]:
        ranking = record["ranking"]
        assert ranking[0] == record["winner"]
        assert sorted(ranking) == sorted(record["consensus"])
        scores = [record["consensus"][c] for c in ranking]
        assert scores == sorted(scores, reverse=True)


def test_instability_and_slot_bias_match_the_judgments(study, recomputed):
    tables = md_tables(study["md"])
    flags = {r["run"]: r for r in tables["Order instability: items per flag"]}
    bands = {r["run"]: r for r in tables["Distribution of top agreement (items)"]}
    slots = tables["Slot bias: top picks per slot"]
    tests = {r["run"]: r for r in tables["Chi-square test against uniform slots"]}
    for run, judgments in recomputed["judgments"].items():
        tops: dict[str, Counter] = defaultdict(Counter)
        slot_counts = Counter()
        for j in judgments:
            if j["ok"]:
                tops[j["item_id"]][j["ranking"][0]] += 1
                slot_counts[j["order"].index(j["ranking"][0]) + 1] += 1
        agreement = [max(c.values()) / sum(c.values()) for c in tops.values()]
        assert flags[run]["order unstable"] == str(sum(a < 1 for a in agreement))
        measured = [max(c.values()) / c.total() for c in tops.values() if c.total() >= 2]
        assert flags[run]["items judged twice or more"] == str(len(measured))
        assert flags[run]["mean top agreement"] == f"{sum(measured) / len(measured):.3f}"
        assert bands[run]["all calls agree (1.0)"] == str(sum(a == 1 for a in agreement))
        assert bands[run]["below 0.6"] == str(sum(a < 0.6 for a in agreement))
        shown = {int(r["slot"]): int(r["top picks"]) for r in slots if r["run"] == run}
        assert shown == dict(slot_counts)
        p_value = stats.chisquare([slot_counts[s] for s in sorted(slot_counts)]).pvalue
        assert tests[run]["p"] == f"{p_value:.3g}"


def test_runs_tables_show_settings_calls_and_cost(study):
    tables = md_tables(study["md"])
    settings = {r["run"]: r for r in tables["Settings"]}
    usage = {r["run"]: r for r in tables["Calls, failures, tokens and cost"]}
    assert set(settings) == {"s/direct", "s/pcf", "s/repeated"}
    assert (settings["s/pcf"]["K"], settings["s/pcf"]["executions"]) == ("7", "3")
    assert settings["s/repeated"]["schedule"] == "repeated"
    for run, summary in study["summaries"].items():
        assert usage[run]["attempts"] == str(summary["attempts"])
        assert usage[run]["cache hits"] == str(summary["cache_hits"])
        assert usage[run]["failures"] == str(summary["failures"])
        assert usage[run]["input tokens"] == str(summary["input_tokens"])
        assert usage[run]["cost (USD)"] == f"{summary['cost_usd']:.4f}"
        assert usage[run]["calls per item"] == f"{summary['per_item']['calls']:.2f}"
        assert usage[run]["cost per item (USD)"] == f"{summary['per_item']['cost_usd']:.6f}"


def test_every_table_and_chart_says_simulated_judge(study):
    md = study["md"]
    headings = [line for line in md.splitlines() if line.startswith("### ")]
    assert len(headings) == 14  # 10 tables and 4 charts
    assert md.splitlines().count(SIMULATED_TAG) == len(headings)
    assert md.count(SIMULATED_NOTE) == 1  # once per document, at the top
    assert SIMULATED_NOTE in md.split("## ")[0]
    assert study["html"].count(SIMULATED_NOTE.replace("'", "&#x27;")) == 1


def test_charts_are_png_files_and_inline_svg(study):
    folder = study["folder"] / "out1"
    pngs = sorted((folder / "charts").glob("*.png"))
    assert [p.name for p in pngs] == [
        "instability-s-pcf.png",
        "paired-changes.png",
        "slot-bias-s-pcf-n4.png",
        "triage-s-pcf.png",
    ]
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    for png in pngs:
        assert f"](charts/{png.name})" in study["md"]
    page = html_tables(study["html"])
    images = [v for k, v in page.attrs if k == "src"]
    assert len(images) == 4
    assert all(src.startswith("data:image/svg+xml;base64,") for src in images)


def test_the_html_is_self_contained_and_holds_the_same_tables(study):
    page = html_tables(study["html"])
    assert page.tags["script"] == page.tags["link"] == page.tags["iframe"] == 0
    assert not [v for k, v in page.attrs if k in ("src", "href") and not v.startswith("data:")]
    for title, rows in md_tables(study["md"]).items():
        assert title in study["html"]
        for row in rows:
            assert list(row.values()) in page.rows


def test_reporting_twice_gives_identical_files(study):
    folder = study["folder"]
    first, second = (folder / "out1", folder / "out2")
    assert (first / "report.md").read_text() == (second / "report.md").read_text()
    assert html_tables((first / "report.html").read_text()).rows == (
        html_tables((second / "report.html").read_text()).rows
    )


# ---------------------------------------------------------------- pairwise


@pytest.fixture(scope="module")
def pairs_expected(study) -> dict:
    """The APOCJudge study recomputed from its exported judgments (each call's verdict, both
    orders) and items, and its exported decisions."""
    items = {i["item_id"]: i for i in study["exported"][("p/apoc", "items")]}
    calls = study["exported"][("p/apoc", "judgments")]
    first = {j["item_id"]: j["order"][0] for j in calls if j["call_index"] == 0}
    verdict = {(j["item_id"], j["call_index"]): j["verdict"] for j in calls}
    rows = []
    for d in study["exported"][("p/apoc", "decisions")]:
        item, m = items[d["item_id"]], d["metrics"]
        gold = item["gold"]
        other = next(c["id"] for c in item["candidates"] if c["id"] != gold)
        shown_first = first[d["item_id"]]
        shown_second = gold if shown_first == other else other
        direct, swapped = verdict[d["item_id"], 0], verdict[d["item_id"], 1]
        assert (direct, swapped) == (m["direct_verdict"], m["swapped_verdict"])
        total = sum((v == gold) - (v == other) for v in (direct, swapped))
        rows.append(
            {
                "bucket": item["bucket"],
                "official": (total > 0) - (total < 0),
                "direct": direct == gold,
                "swapped": swapped == gold,
                "apoc": m["verdict"] == gold,
                "primacy": (direct, swapped) == (shown_first, shown_second),
                "recency": (direct, swapped) == (shown_second, shown_first),
                "reason": m["reason"],
            }
        )
    return {"frame": pd.DataFrame(rows)}


def test_pairwise_report_per_bucket_official_score_and_overrides(study, pairs_expected):
    frame = pairs_expected["frame"]
    tables = md_tables(study["pairs_md"])
    official = {r["bucket"]: r for r in tables["Official score (JudgeBench's rule)"]}
    accuracy = {r["bucket"]: r for r in tables["Accuracy per bucket, decision rules side by side"]}
    scores = []
    for bucket in BUCKETS:
        rows = frame[frame["bucket"] == bucket]
        score = 100 * (rows["official"] == 1).mean()
        scores.append(score)
        assert official[bucket]["pairs"] == str(len(rows))
        assert official[bucket]["official score %"] == f"{score:.2f}"
        assert official[bucket]["correct"] == str((rows["official"] == 1).sum())
        assert official[bucket]["incorrect"] == str((rows["official"] == -1).sum())
        assert accuracy[bucket]["order 1 (direct) %"] == pct(rows["direct"].mean())
        assert accuracy[bucket]["order 2 (swapped) %"] == pct(rows["swapped"].mean())
        assert accuracy[bucket]["APOCJudge %"] == pct(rows["apoc"].mean())
    assert official["macro average"]["official score %"] == f"{sum(scores) / 3:.2f}"
    assert (
        official["all pairs"]["official score %"] == f"{100 * (frame['official'] == 1).mean():.2f}"
    )
    macro = sum(frame[frame["bucket"] == b]["apoc"].mean() for b in BUCKETS) / 3
    assert accuracy["macro average"]["APOCJudge %"] == pct(macro)

    (position,) = tables["Swap consistency and position bias"]
    assert (position["primacy"], position["recency"]) == (
        str(frame["primacy"].sum()),
        str(frame["recency"].sum()),
    )
    (overrides,) = tables["Overrides and keyed confirmation"]
    reasons = Counter(frame["reason"])
    assert overrides["accepted (confirmed)"] == str(reasons["confirmed"])
    assert overrides["rejected (not confirmed)"] == str(reasons["not_confirmed"])
    assert overrides["overrides proposed"] == str(
        reasons["confirmed"] + reasons["not_confirmed"] + reasons["guarded"]
    )
    (paired_row,) = tables["APOCJudge against direct"]
    assert paired_row["APOCJudge %"] == pct(frame["apoc"].mean())
    assert paired_row["direct %"] == pct(frame["direct"].mean())
    lines = study["pairs_md"].splitlines()
    assert lines.count(SIMULATED_TAG) == sum(line.startswith("### ") for line in lines)
    assert study["pairs_written"]["chart_errors"] == {}


def test_pairwise_table_four_per_bucket_with_macro_delta(study, pairs_expected):
    frame = pairs_expected["frame"]
    records = study["pairs_json"]["tables"]["pairwise"]
    rows = md_tables(study["pairs_md"])["Pairwise: direct and APOCJudge per bucket (Table 4)"]
    assert [r["bucket"] for r in records] == [*BUCKETS, "macro average"]
    assert [r["bucket"] for r in rows] == [r["bucket"] for r in records]
    direct = [100 * frame[frame["bucket"] == b]["direct"].mean() for b in BUCKETS]
    apoc = [100 * frame[frame["bucket"] == b]["apoc"].mean() for b in BUCKETS]
    counts = [int((frame["bucket"] == b).sum()) for b in BUCKETS]
    macro = (sum(direct) / 3, sum(apoc) / 3)
    for record, n, d, a in zip(
        records, [*counts, len(frame)], [*direct, macro[0]], [*apoc, macro[1]], strict=True
    ):
        assert record["run"] == "p/apoc"
        assert record["n"] == n
        assert record["direct_accuracy"] == pytest.approx(d, abs=1e-12)
        assert record["accuracy"] == pytest.approx(a, abs=1e-12)
        assert record["delta_points"] == pytest.approx(a - d, abs=1e-12)
    assert rows[-1]["APOCJudge %"] == pct(macro[1] / 100)
    assert rows[-1]["Δ points"] == signed(macro[1] - macro[0])
    for key in ("official", "pairwise_rules", "position", "abstentions", "overrides"):
        assert {r["run"] for r in study["pairs_json"]["tables"][key]} == {"p/apoc"}


def test_several_models_add_a_micro_average_row(tmp_path):
    items = tmp_path / "items.jsonl"
    demo = (Path(__file__).resolve().parents[2] / "data" / "demo" / "items.jsonl").read_text()
    items.write_text("".join(demo.splitlines(keepends=True)[:12]))
    pcf("import", "jsonl", str(items), "--name", "d")
    for name, model in (("a", "sim-primacy"), ("b", "sim-recency")):
        pcf("study", "d", "--name", name, "--model", model, "--k", "3", "--executions", "2")
    pcf("report", "a", "b", "--out", str(tmp_path / "out"))
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    first, second, micro = data["tables"]["main"]
    assert (first["model"], second["model"]) == ("simulated/sim-primacy", "simulated/sim-recency")
    assert micro["model"] == "micro average"
    assert micro["n"] == first["n"] + second["n"]
    for field in ("improved", "regressed", "same"):
        assert micro[field] == first[field] + second[field]
    for field in ("accuracy", "direct_accuracy"):
        pooled = (first[field] * first["n"] + second[field] * second["n"]) / micro["n"]
        assert micro[field] == pytest.approx(pooled, abs=1e-9)
    rows = md_tables((tmp_path / "out" / "report.md").read_text())["Main table: PCF against direct"]
    assert rows[-1]["model"] == "micro average"


# ---------------------------------------------------------------- more cases


def test_a_second_study_makes_no_judge_call(tmp_path):
    items = tmp_path / "items.jsonl"
    demo = (Path(__file__).resolve().parents[2] / "data" / "demo" / "items.jsonl").read_text()
    items.write_text("".join(demo.splitlines(keepends=True)[:6]))
    pcf("import", "jsonl", str(items), "--name", "d")
    first = json.loads(pcf("study", "d", "--name", "t", "--k", "5", "--executions", "2"))
    assert all(r["this_invocation"]["attempts"] > 0 for r in first["runs"][1:])
    second = json.loads(pcf("study", "d", "--name", "t", "--k", "5", "--executions", "2"))
    assert [r["this_invocation"]["attempts"] for r in second["runs"]] == [0, 0, 0]
    assert [r["attempts"] for r in second["runs"]] == [r["attempts"] for r in first["runs"]]


def test_without_gold_labels_the_report_says_so(tmp_path):
    items = tmp_path / "items.jsonl"
    rows = [{**p, "gold": None} for p in pair_items()[:4]]
    for row in rows:
        row["candidates"].append({"id": "z", "text": f"Answer z to {row['item_id']}."})
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pcf("import", "jsonl", str(items), "--name", "nogold")
    pcf("study", "nogold", "--name", "g", "--k", "3", "--executions", "1")
    pcf("report", "g/pcf", "g/direct", "--out", str(tmp_path / "out"))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "No gold labels for g/pcf: no accuracy to show." in md
    assert "No gold labels: the K table needs them." in md
    (row,) = md_tables(md)["Main table: PCF against direct"]
    assert (row["N"], row["PCF %"]) == ("0", "–")


def test_an_adaptive_run_is_labelled_decided_on_its_weights_and_left_out_of_k_and_weights(
    tmp_path,
):
    items = tmp_path / "items.jsonl"
    demo = (Path(__file__).resolve().parents[2] / "data" / "demo" / "items.jsonl").read_text()
    items.write_text("".join(demo.splitlines(keepends=True)[:12]))
    pcf("import", "jsonl", str(items), "--name", "d")
    full = ["judge", "d", "--name", "full", "--k", "5", "--executions", "2"]
    pcf(*full)
    pcf(*full[:3], "adaptive", *full[4:], "--adaptive", "certain", "--stop-on", "rank-only")
    pcf("report", "full", "adaptive", "--out", str(tmp_path / "out"))
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    settings = {r["run"]: r["stopping"] for r in data["tables"]["settings"]}
    assert settings == {"full": "full run", "adaptive": "adaptive: certain on rank-only"}
    main = {r["run"]: r for r in data["tables"]["main"]}
    # Decided with rank-only over every call it made: `certain` keeps the full run's winners.
    judgments = jsonl(pcf("export", "full", "--what", "judgments"))
    listing = {
        i["item_id"]: [c["id"] for c in i["candidates"]]
        for i in map(json.loads, items.read_text().splitlines())
    }
    gold = {i["item_id"]: i["gold"] for i in map(json.loads, items.read_text().splitlines())}
    rank_only = eq5_winners(judgments, listing, METHOD_PRESETS["rank-only"])
    expected = sum(rank_only[i] == gold[i] for i in gold) / len(gold)
    assert main["adaptive"]["accuracy"] == pytest.approx(100 * expected)
    assert {r["run"] for r in data["tables"]["k"]} == {"full"}
    assert {r["run"] for r in data["tables"]["weights"]} == {"full"}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Left out: the adaptive runs adaptive" in md.split("## K ablation")[1]
    assert "Adaptive runs (adaptive)" in md.split("## K ablation")[0]


def test_an_unknown_name_is_refused():
    result = runner.invoke(app, ["report", "nothing-here"])
    assert result.exit_code == 2
    assert "no run or study 'nothing-here'" in result.stderr


def test_a_chart_that_cannot_be_rendered_leaves_the_tables(tmp_path, monkeypatch):
    def broken(chart):
        raise RuntimeError("no renderer here")

    monkeypatch.setattr("pcf.reports.render.chart_svg", broken)
    import altair as alt

    frame = pd.DataFrame({"run": ["<script>alert(1)</script>", "a|b"], "accuracy %": [50.0, 75.0]})
    report = Report(
        "Report <b>",
        (
            Section(
                "One",
                (
                    "Text with <tags> & pipes |",
                    Table("Table", frame),
                    Figure("Bars", alt.Chart(frame).mark_bar().encode(x="run"), "bars"),
                ),
            ),
        ),
    )
    written = write_report(report, tmp_path)
    assert written["chart_errors"] == {"bars": "RuntimeError: no renderer here"}
    assert written["charts"] == []
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "*The chart could not be rendered (RuntimeError: no renderer here).*" in md
    assert "| a\\|b | 75.0 |" in md
    assert "The chart could not be rendered (RuntimeError: no renderer here)." in page
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert ["a|b", "75.0"] in html_tables(page).rows
    assert "<title>Report &lt;b&gt;</title>" in page


# ---------------------------------------------------------------- replayed real data


@pytest.mark.skipif(not O1_MINI.exists(), reason="../shared/data is absent")
def test_replayed_judgebench_report_gives_the_official_figures(tmp_path):
    summary = json.loads(pcf("replay", "judgebench", str(O1_MINI), "--report", str(tmp_path)))
    md = (tmp_path / "report.md").read_text()
    tables = md_tables(md)
    official = {r["bucket"]: r for r in tables["Official score (JudgeBench's rule)"]}
    assert official["all pairs"] == {
        "bucket": "all pairs",
        "pairs": "350",
        "official score %": "65.71",
        "correct": "230",
        "incorrect": "39",
        "tie": "81",
    }
    for bucket, scores in summary["buckets"].items():
        assert official[bucket]["official score %"] == f"{scores['score']:.2f}"
    assert official["macro average"]["official score %"] == f"{summary['macro_accuracy']:.2f}"
    accuracy = {r["bucket"]: r for r in tables["Accuracy per bucket, decision rules side by side"]}
    assert accuracy["all pairs"]["order 1 (direct) %"] == f"{summary['order1_accuracy']:.1f}"
    assert accuracy["all pairs"]["order 2 (swapped) %"] == f"{summary['order2_accuracy']:.1f}"
    assert accuracy["all pairs"]["agree only %"] == f"{summary['rules']['agree_only']:.1f}"
    pairs = read_judgebench_outputs(O1_MINI)
    for bucket in summary["buckets"]:
        mine = [p for p in pairs if p.bucket == bucket]
        share = sum(p.d1 == p.label for p in mine) / len(mine)
        assert accuracy[bucket]["order 1 (direct) %"] == pct(share)
    (position,) = tables["Swap consistency and position bias"]
    assert position == {
        "pairs": "350",
        "consistent %": f"{summary['position_consistency']:.1f}",
        "primacy": str(summary["primacy"]),
        "recency": str(summary["recency"]),
    }
    (abstentions,) = tables["Abstentions per decision rule (pairs)"]
    assert abstentions["agree or decisive"] == str(summary["rule_abstentions"]["agree_or_decisive"])
    assert "Simulated" not in md
    assert "Overrides" not in md
    assert "65.71" in (tmp_path / "report.html").read_text()


@pytest.mark.skipif(not LLMBAR.exists(), reason="../shared/data is absent")
def test_replayed_llmbar_report(tmp_path):
    args = ["--judge", "GPT-4", "--strategy", "Vanilla", "--report", str(tmp_path)]
    pcf("replay", "llmbar", str(LLMBAR / "Natural"), *args)
    summary = replay_summary(read_llmbar_results(LLMBAR / "Natural", "GPT-4", "Vanilla"))
    tables = md_tables((tmp_path / "report.md").read_text())
    (position,) = tables["Swap consistency and position bias"]
    assert (position["pairs"], position["primacy"], position["recency"]) == ("100", "3", "2")
    official = {r["bucket"]: r for r in tables["Official score (JudgeBench's rule)"]}
    assert official["all pairs"]["official score %"] == f"{summary['judgebench_official']:.2f}"
    assert math.isclose(
        float(tables["Accuracy per bucket, decision rules side by side"][0]["order 1 (direct) %"]),
        summary["order1_accuracy"],
        abs_tol=0.05,
    )


def test_the_triage_table_counts_errors_found_most_doubtful_first(study, recomputed):
    decisions = study["exported"][("s/pcf", "decisions")]
    gold = recomputed["gold"]
    wrong = {d["item_id"]: d["winner"] != gold[d["item_id"]] for d in decisions}
    rows = {r["order"]: r for r in study["json"]["tables"]["triage"] if r["run"] == "s/pcf"}
    assert rows["review priority"]["errors"] == sum(wrong.values())
    ranked = sorted(decisions, key=lambda d: -d["metrics"]["priority"])
    for share in (10, 20, 30):
        first = ranked[: int(len(ranked) * share / 100)]
        found = 100 * sum(wrong[d["item_id"]] for d in first) / sum(wrong.values())
        assert rows["review priority"][f"found_at_{share}_pct"] == pytest.approx(found, abs=0.01)
    assert rows["random (mean)"]["capture_auc"] == pytest.approx(0.5, abs=0.03)
    assert "triage-s-pcf.png" in {p.name for p in (study["folder"] / "out1" / "charts").iterdir()}


def test_a_replay_of_a_simulated_judge_stays_simulated_everywhere(isolated_database, tmp_path):
    """Exported judgments say what made them; replayed under a real model's name, and that
    replay replayed again, the run is simulated in `pcf judge`'s summary, in its report's
    banner, in every standalone chart and on the app's pages."""
    copy_demo(isolated_database)
    source, made_by = "demo-pcf", "simulated"
    for name in ("replayed", "replayed-again"):
        recording = tmp_path / f"{name}.jsonl"
        pcf("export", source, "--what", "judgments", "--out", str(recording))
        lines = jsonl(recording.read_text())
        assert {(line["backend"], line["simulated"]) for line in lines} == {(made_by, True)}
        replay = ("--backend", "replay", "--replay", str(recording), "--model", "gpt-4o-mini")
        summary = json.loads(
            pcf("judge", "demo", "--k", "7", "--limit", "12", *replay, "--name", name)
        )
        assert summary["simulated"] is True
        source, made_by = name, "replay"
    pcf("report", source, "--out", str(tmp_path / "out"))
    md = (tmp_path / "out" / "report.md").read_text()
    assert SIMULATED_NOTE in md.split("## ")[0]
    page = html_tables((tmp_path / "out" / "report.html").read_text())
    charts = [
        base64.b64decode(src.removeprefix("data:image/svg+xml;base64,")).decode()
        for key, src in page.attrs
        if key == "src"
    ]
    assert len(charts) == len(list((tmp_path / "out" / "charts").glob("*.png"))) >= 2
    assert all(">Simulated judge</text>" in svg for svg in charts)

    with Session(get_engine(isolated_database)) as session:
        at = local_app(session)
        at.session_state["run"] = source
        at = open_page(at.run(), "overview")
    assert any("Simulated judge" in w.value for w in at.warning)
