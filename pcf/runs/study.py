"""The paper's study as runs of one name (docs/getting-started.md), and the demo database.

K=3 and 5 come from prefixes of the stored K=7 calls, at no extra cost."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sqlmodel import Session

from pcf.access import Actor
from pcf.choices import STRONG_BIAS_MODEL
from pcf.items import load_dataset
from pcf.runs.estimate import dataset_of
from pcf.runs.manage import import_dataset, judge_run
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import Run, get_dataset, list_runs, load_items

DEMO_ITEMS = Path(__file__).resolve().parents[2] / "data" / "demo" / "items.jsonl"
DEMO_RUNS = (
    RunSpec("demo", "demo-direct", protocol="direct"),
    RunSpec("demo", "demo-pcf", protocol="pcf", k=7, executions=3),
    RunSpec("demo", "demo-repeated", protocol="repeated", k=7),
    RunSpec(
        "demo",
        "demo-strong-bias-pcf",
        protocol="pcf",
        k=7,
        executions=3,
        model=STRONG_BIAS_MODEL,
    ),
)
"""The demo's simulated runs; the last one's judge has a strong position bias, so the direct
verdict follows the first slot and the consensus over orderings visibly recovers."""


def study_specs(study: str, base: RunSpec, *, session: Session) -> list[RunSpec]:
    """The study's runs, each ``base`` with its protocol and the name ``STUDY/PROTOCOL`` (a
    dataset of pairs gets APOCJudge alone)."""
    dataset = dataset_of(base, session=session)
    pairs = all(len(i.candidates) == 2 for i in load_items(dataset.id, session=session))
    protocols = ("apoc",) if pairs else ("direct", "pcf", "repeated")
    return [
        replace(
            base,
            name=f"{study}/{protocol}",
            protocol=protocol,
            executions=base.executions if protocol == "pcf" else 1,
        )
        for protocol in protocols
    ]


def study_runs(study: str, *, session: Session) -> list[Run]:
    """The runs of study ``study`` (named ``STUDY/direct``, ``STUDY/pcf``...)."""
    return [r for r in list_runs(session=session) if r.name.startswith(f"{study}/")]


def build_demo(*, session: Session, actor: Actor) -> list[tuple[Run, RunReport]]:
    """Import the demo items as dataset ``demo`` and run the simulated demo runs, as ``actor``."""
    if get_dataset("demo", session=session) is None:
        items = load_dataset("jsonl", DEMO_ITEMS)
        import_dataset(
            items, session=session, actor=actor, name="demo", fmt="jsonl", source_path=DEMO_ITEMS
        )
        session.commit()
    return [judge_run(spec, session=session, actor=actor) for spec in DEMO_RUNS]
