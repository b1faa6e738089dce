"""Datasets made to load a URL or render a live link, for the browser tests; run in a child
process (the simulated run uses ``asyncio.run``):

``python -m tests.e2e.hostile_items DATABASE_URL HOST``

``HOST`` (``127.0.0.1:PORT``) is where every hostile address points. The ``hostile`` dataset
carries :data:`tests.hostile_markdown.BYPASSES` and its pieces in prompts, candidates, item,
candidate, dataset and run names, annotators' notes and tags, the labelling guidelines and the
name of the app's local person; each item has two annotators' labels of the three its plan asks
for, so that Compare lists disagreements and Adjudicate still offers it. The
``huge`` dataset has one item whose candidate is :data:`HUGE_CHARACTERS` characters on one line.
"""

from __future__ import annotations

import sys

from pcf.access import operator
from pcf.items import Candidate, Item
from pcf.labelling.membership import set_local_name
from pcf.labelling.plan import set_plan
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.store import add_adjudication, get_engine, import_items, item_db_ids, session_scope
from tests.hostile_markdown import BYPASSES, PIECES

HUGE_CHARACTERS = 200_000
HUGE_LINE = "[a](" * (HUGE_CHARACTERS // 4)
"""Brackets that open a link at every fourth character: markdown-it's slowest line."""
ANNOTATORS = ("first", "second")


def names(host: str) -> dict[str, str]:
    """The hostile names: dataset, two runs, annotator, an item id prefix, a tag and a note."""
    return {
        "dataset": f"hostile ![d](http://{host}/dataset.png)",
        "run": f"run www.{host}/run :streamlit:",
        "other run": f"other ![o](http://{host}/beacon)",  # Overview's "another judge" button
        "annotator": f"ann ![a](http://{host}/annotator.png) a@{host}",
        "item": f"item ![i](http://{host}/item.png) <http://{host}/item>",
        "tag": f"tag [t](http://{host}/tag)",
        "note": f"note `x\n`![n](http://{host}/note.png)`",
    }


def payloads(host: str) -> list[str]:
    """Every bypass and every piece, their placeholder host replaced by ``host``."""
    texts = [text.replace("h.invalid", host) for text in BYPASSES]
    return [*texts, "".join(PIECES).replace("h.invalid", host)]


def hostile_items(host: str) -> list[Item]:
    """Items of up to 26 hostile candidates; each prompt holds all of its candidates' texts."""
    texts, named = payloads(host), names(host)
    items = []
    for number, start in enumerate(range(0, len(texts), 25), start=1):
        chunk = texts[start : start + 25]
        candidates = [
            Candidate(f"c{i} ![c](http://{host}/c{i}.png)", text) for i, text in enumerate(chunk)
        ]
        candidates.append(Candidate(f"plain{number}", "Paris."))
        prompt = "\n\n".join(chunk)
        items.append(Item(f"{named['item']} {number}", prompt, tuple(candidates), candidates[0].id))
    return items


def build(url: str, host: str) -> None:
    """Import the two datasets, judge each with the simulated judge (the hostile one twice), and
    label the hostile one."""
    named = names(host)
    huge = Item(
        "huge",
        "Which answer is right?",
        (Candidate("long", HUGE_LINE), Candidate("short", "Paris.")),
        "short",
    )
    engine = get_engine(url)
    with session_scope(engine) as s:
        admin = set_local_name(named["annotator"], session=s)  # the app's one local person
        hostile = import_items(hostile_items(host), session=s, name=named["dataset"], fmt="jsonl")
        import_items([huge], session=s, name="huge", fmt="jsonl")
        s.commit()
        for run in (named["run"], named["other run"]):
            judge_run(RunSpec(named["dataset"], run, k=2), session=s, actor=operator())
        judge_run(RunSpec("huge", "huge-pcf", k=2), session=s, actor=operator())
        guidelines = "\n\n".join(payloads(host))
        set_plan(
            hostile.id,
            session=s,
            actor=admin,
            labels_per_item=len(ANNOTATORS) + 1,
            guidelines=guidelines,
        )
        # The local person gives the first item its last label (so it has gold, for Compare)
        # and has the other item still to label (for Adjudicate).
        for n, item in enumerate(hostile_items(host)):
            db_id = item_db_ids(hostile.id, session=s)[item.item_id]
            last = (admin.identity,) if n == 0 else ()
            for annotator in (*ANNOTATORS, *last):
                add_adjudication(
                    db_id,
                    session=s,
                    annotator=annotator,
                    choice=item.candidates[1].id,
                    tags=[named["tag"]],
                    notes=named["note"],
                )
        s.commit()


if __name__ == "__main__":
    build(*sys.argv[1:3])
