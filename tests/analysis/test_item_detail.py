"""One item in detail: heatmap, calls, consensus and labels (pcf/analysis/item_detail.py)."""

from __future__ import annotations

import math

import pandas as pd
from sqlmodel import Session

from pcf.analysis.item_detail import (
    calls_frame,
    consensus_frame,
    describe_candidate,
    format_number,
    item_decision,
    ordering_frame,
    ordering_label,
)
from pcf.analysis.results import (
    run_decisions,
)
from pcf.items import (
    Candidate,
    Item,
    candidate_labels,
    candidate_titles,
    distinguishing_words,
)
from pcf.labelling.adjudications import (
    choice_label,
)
from pcf.store import (
    Call,
    get_run,
    item_calls,
    item_db_ids,
)
from tests.factories import demo_item


def make_call(execution: int, call_index: int, order, ranking=None, *, ok=True) -> Call:
    """An unsaved listwise call: factuality 10, 9, ... down the ranking."""
    ranking = ranking or order
    judgment = (
        {
            "factuality": {cid: 10.0 - i for i, cid in enumerate(ranking)},
            "hallucination_risk": dict.fromkeys(order, 0.2),
            "ranking": list(ranking),
            "confidence": 0.9,
        }
        if ok
        else None
    )
    return Call(
        run_id=1,
        item_id=1,
        execution=execution,
        call_index=call_index,
        order=list(order),
        keys=["A", "B", "C"][: len(order)],
        content_key=f"{execution}-{call_index}",
        ok=ok,
        error=None if ok else "no_json",
        judgment=judgment,
    )


ITEM = Item("i1", "Q?", (Candidate("x", "X."), Candidate("y", "Y."), Candidate("z", "Z.")), "y")


def test_the_item_decision_equals_the_runs(db: Session):
    run = get_run("demo-pcf", session=db)
    ids = item_db_ids(run.dataset_id, session=db)
    records = {r["item_id"]: r for r in run_decisions(run, session=db)}
    for key in ("demo-001", "demo-024", "demo-052"):
        item = demo_item(db, key)
        assert item_decision(item, item_calls(run.id, ids[key], session=db)) == records[key]
    assert item_decision(demo_item(db, "demo-001"), []) is None


def test_the_heatmap_frame_has_a_row_per_call_and_candidate():
    calls = [
        make_call(0, 0, ["x", "y", "z"], ["y", "x", "z"]),
        make_call(0, 1, ["z", "x", "y"], ok=False),
        make_call(1, 0, ["y", "z", "x"], ["x", "z", "y"]),
    ]
    frame = ordering_frame(ITEM, calls)
    assert len(frame) == 9
    assert list(frame["ordering"].unique()) == ["e0·c0  A B C", "e0·c1  C A B", "e1·c0  B C A"]
    first = frame[frame["call_index"].eq(0) & frame["execution"].eq(0)]
    assert list(first["candidate"]) == ["A", "B", "C"]
    assert list(first["rank"]) == [2, 1, 3]
    assert list(first["factuality"]) == [9, 10, 8]
    assert list(first["slot"]) == [1, 2, 3]
    failed = frame[frame["call_index"].eq(1)]
    assert failed["rank"].isna().all()
    assert failed["factuality"].isna().all()
    assert list(failed["slot"]) == [2, 3, 1]
    assert not failed["ok"].any()


def test_labels_and_the_ordering_label():
    assert candidate_labels(ITEM) == {"x": "A", "y": "B", "z": "C"}
    many = Item("m", "Q", tuple(Candidate(f"c{i}", "t") for i in range(27)))
    assert candidate_labels(many)["c26"] == "#27"
    call = make_call(2, 5, ["z", "y", "x"])
    assert ordering_label(call, candidate_labels(ITEM)) == "e2·c5  C B A"


def test_the_calls_frame_names_the_top_pick():
    calls = [
        make_call(0, 0, ["x", "y", "z"], ["z", "x", "y"]),
        make_call(0, 1, ["y", "x", "z"], ok=False),
    ]
    frame = calls_frame(ITEM, calls)
    assert frame["top pick"][0] == "C"
    assert pd.isna(frame["top pick"][1])
    assert list(frame["ok"]) == [True, False]
    assert pd.isna(frame["error"][0])
    assert frame["error"][1] == "no_json"
    pairwise = make_call(0, 0, ["x", "y"])
    pairwise.judgment = {"verdict": "y", "confidence": 0.7}
    assert calls_frame(ITEM, [pairwise])["top pick"].tolist() == ["B"]


def test_the_consensus_frame_has_components_and_roles(db: Session):
    run = get_run("demo-pcf", session=db)
    item = demo_item(db, "demo-024")
    record = item_decision(item, item_calls(run.id, item.metadata["db_id"], session=db))
    frame = consensus_frame(item, record)
    assert list(frame["id"]) == list(item.candidate_ids)
    assert dict(zip(frame["id"], frame["C"], strict=True)) == record["consensus"]
    for part in "SBVU":
        assert (
            dict(zip(frame["id"], frame[part], strict=True))
            == record["metrics"]["components"][part]
        )
    roles = dict(zip(frame["id"], frame["role"], strict=True))
    assert "PCF winner" in roles[record["winner"]]
    assert "direct winner" in roles[record["metrics"]["direct_winner"]]
    assert "gold" in roles[item.gold]
    assert consensus_frame(item, None).empty


def test_describing_candidates():
    labels = candidate_labels(ITEM)
    assert describe_candidate("y", labels) == "B"
    assert describe_candidate(None, labels) == "—"
    assert describe_candidate(math.nan, labels) == "—"
    assert describe_candidate("none_correct", labels) == "None is correct"
    assert choice_label("cannot_tell", labels) == "Cannot tell"


def test_numbers_are_formatted_unless_unknown():
    assert format_number(0.4567, ".0%") == "46%"
    assert format_number(math.nan, ".2f") == "—"


def test_candidates_read_as_letter_and_first_words():
    item = Item(
        "i",
        "q?",
        (Candidate("x", "### The answer is **Paris**, of course; more"), Candidate("y", "No")),
    )
    assert candidate_titles(item, words=4) == {"x": "A · The answer is Paris,…", "y": "B · No"}


def test_previews_keep_the_text_as_written():
    texts = {"a": "[ERROR]: [deadline_exceeded] after 30 s", "b": "> use snake_case `names`"}
    assert distinguishing_words(texts, words=5) == {
        "a": "[ERROR]: [deadline_exceeded] after 30 s",
        "b": "use snake_case names",
    }


SHARED = " ".join(f"w{n}" for n in range(40))  # a long opening both answers repeat


def test_previews_of_answers_that_start_alike_show_where_they_differ():
    texts = {
        "a": f"{SHARED} the treaty was signed in 1648 at Münster.",
        "b": f"{SHARED} the treaty was signed in 1658 at Osnabrück.",
        "c": "A short different answer.",
    }
    previews = distinguishing_words(texts, words=5)
    assert previews["a"] == "…signed in 1648 at Münster."
    assert previews["b"] == "…signed in 1658 at Osnabrück."
    assert previews["c"] == "A short different answer."  # differs from the start: its opening
    assert len(set(previews.values())) == 3


def test_previews_that_differ_early_keep_the_opening():
    texts = {
        "a": "Here's the list of years from 2000 to 2010, one per line.",
        "b": "Here's a list of years from 2000 to 2010, one per line.",
    }
    assert distinguishing_words(texts, words=4) == {
        "a": "Here's the list of…",
        "b": "Here's a list of…",
    }


def test_previews_of_a_repeated_or_truncated_answer_show_its_end():
    texts = {"full": f"{SHARED} and then more words here", "cut": SHARED, "same": SHARED}
    previews = distinguishing_words(texts, words=3)
    assert previews["full"] == "…w39 and then…"  # one shared word, then the new ones
    assert previews["cut"] == previews["same"] == "…w37 w38 w39"  # nothing tells them apart


def test_candidate_titles_name_each_candidate_by_its_letter_and_differing_words():
    item = Item(
        "q1",
        "Which year?",
        (Candidate("x", f"{SHARED} 1648."), Candidate("y", f"{SHARED} 1658.")),
    )
    assert candidate_titles(item, words=2) == {"x": "A · …w39 1648.", "y": "B · …w39 1658."}
