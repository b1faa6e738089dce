"""The Compare page: humans against direct and PCF, annotator agreement, exports."""

from __future__ import annotations

import json

from sqlmodel import Session
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest

from pcf.access import operator
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import run_decisions
from pcf.items import candidate_titles
from pcf.labelling.plan import set_plan
from pcf.store import add_adjudication, get_dataset, get_run, load_items
from tests.app import markdown_texts, open_page


def compare(app: AppTest) -> AppTest:
    at = open_page(app, "compare")
    assert not at.exception, [e.message for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def label_items(db: Session, choices: dict[str, list[str]], count: int = 24) -> list:
    """Each annotator labels the first ``count`` demo items from a cycle of choice rules.

    A rule is ``gold``, ``first`` (the first listed candidate), ``second``, or a literal choice.
    Returns the labelled items.
    """
    items = load_items(get_dataset("demo", session=db).id, session=db)[:count]
    for annotator, rules in choices.items():
        for n, item in enumerate(items):
            rule = rules[n % len(rules)]
            choice = {
                "gold": item.gold,
                "first": item.candidate_ids[0],
                "second": item.candidate_ids[1],
            }.get(rule, rule)
            add_adjudication(item.metadata["db_id"], session=db, annotator=annotator, choice=choice)
    db.commit()
    return items


def corrected(share: float, items) -> float:
    """Agreement corrected for the chance of one over each item's candidates."""
    chance = sum(1 / len(i.candidate_ids) for i in items) / len(items)
    return (share - chance) / (1 - chance)


def expected_figures(db: Session, items, by_annotator: dict[str, list[str]]) -> dict:
    """Accuracy and chance-corrected agreement recomputed here against the unanimous human gold
    (the default plan): every vote but 'cannot tell' the same candidate."""
    decisions = {
        d["item_id"]: d for d in run_decisions(get_run("demo-pcf", session=db), session=db)
    }
    counted, human, direct, pcf = [], [], [], []
    for n, item in enumerate(items):
        votes = {labels[n] for labels in by_annotator.values()} - {"cannot_tell"}
        if len(votes) != 1 or votes == {"none_correct"}:
            continue
        counted.append(item)
        human.append(votes.pop())
        direct.append(decisions[item.item_id]["metrics"]["direct_winner"])
        pcf.append(decisions[item.item_id]["winner"])
    direct_share = sum(d == h for d, h in zip(direct, human, strict=True)) / len(human)
    pcf_share = sum(p == h for p, h in zip(pcf, human, strict=True)) / len(human)
    return {
        "n": len(human),
        "direct": direct_share,
        "pcf": pcf_share,
        "kappa_direct": corrected(direct_share, counted),
        "kappa_pcf": corrected(pcf_share, counted),
        "human": human,
        "direct_winners": direct,
        "pcf_winners": pcf,
    }


def resolved(items, choices: dict[str, list[str]]) -> dict[str, list[str]]:
    """The literal choices each annotator made, per item."""
    out = {}
    for annotator, rules in choices.items():
        out[annotator] = [
            {"gold": i.gold, "first": i.candidate_ids[0], "second": i.candidate_ids[1]}.get(
                rules[n % len(rules)], rules[n % len(rules)]
            )
            for n, i in enumerate(items)
        ]
    return out


def test_without_adjudications_the_page_points_to_adjudicate(app):
    at = compare(app)
    assert "No item of this dataset is adjudicated yet" in at.info[0].value
    assert [link.proto.page for link in at.page_link] == ["adjudicate"]


def test_two_annotators_accuracy_kappa_and_disagreement_links(app, db):
    choices = {
        "ann": ["gold", "gold", "gold", "first", "none_correct"],
        "bob": ["gold", "second", "gold", "first", "gold", "cannot_tell"],
    }
    items = label_items(db, choices)
    by_annotator = resolved(items, choices)
    expected = expected_figures(db, items, by_annotator)
    at = compare(app)
    shown = metrics(at)
    assert shown["Adjudicated items"] == "24"
    assert shown["With a human label"] == str(expected["n"])
    assert shown["Direct accuracy"] == f"{100 * expected['direct']:.1f}%"
    assert shown["PCF accuracy"] == f"{100 * expected['pcf']:.1f}%"
    assert shown["Chance-corrected agreement, direct"] == f"{expected['kappa_direct']:.3f}"
    assert shown["Chance-corrected agreement, PCF"] == f"{expected['kappa_pcf']:.3f}"
    both = [
        (i, a == b)
        for i, a, b in zip(items, by_annotator["ann"], by_annotator["bob"], strict=True)
        if "cannot_tell" not in (a, b)
    ]
    share = sum(same for _, same in both) / len(both)
    assert shown["Annotators"] == "2"
    assert shown["Chance-corrected agreement"] == f"{corrected(share, [i for i, _ in both]):.3f}"
    warned = " ".join(w.value for w in at.warning)
    assert expected["n"] < 20  # the judge's figures rest on too few items, and say so
    assert f"These figures count n={expected['n']}, too few (under 20)" in warned
    assert len(both) == 20  # the annotators' agreement on enough
    assert "Agreement between annotators" not in warned
    (figure,) = [m for m in at.metric if m.label == "Chance-corrected agreement"]
    assert figure.help == "Counts the items labelled by two people or more: n=20."
    judged = zip(
        expected["human"], expected["direct_winners"], expected["pcf_winners"], strict=True
    )
    disagreements = sum(d != h or p != h for h, d, p in judged)
    assert disagreements > 0, "the labels above should disagree with the judge somewhere"
    links = [link for link in at.page_link if link.proto.page == "review"]
    assert len(links) == disagreements
    assert all(
        escape_markdown(link.proto.query_string.removeprefix("item=")) == link.value
        for link in links
    )  # each link opens the item it names (its label escaped, as every id in a page)
    first = next(i for i in items if escape_markdown(i.item_id) == links[0].value)
    gold_title = escape_markdown(candidate_titles(first)[first.gold])
    assert gold_title in markdown_texts(at)  # candidates named by letter and words, not by id
    assert not [m for m in markdown_texts(at) if m.startswith(escape_markdown(first.gold))]


def test_three_annotators_agree_by_the_share_of_agreeing_pairs(app, db):
    choices = {
        "ann": ["gold", "first"],
        "bob": ["gold", "gold", "second"],
        "cat": ["gold", "first", "cannot_tell", "none_correct"],
    }
    items = label_items(db, choices, count=12)
    by_annotator = resolved(items, choices)
    shares, shared = [], []
    for n, item in enumerate(items):
        given = [by_annotator[a][n] for a in ("ann", "bob", "cat")]
        given = [c for c in given if c != "cannot_tell"]
        pairs = [(x, y) for i, x in enumerate(given) for y in given[i + 1 :]]
        shares.append(sum(x == y for x, y in pairs) / len(pairs))
        shared.append(item)
    shown = metrics(compare(app))
    assert shown["Annotators"] == "3"
    expected = corrected(sum(shares) / len(shares), shared)
    assert shown["Chance-corrected agreement"] == f"{expected:.3f}"


def test_downloads_hold_every_adjudication_row(app, db, monkeypatch):
    items = label_items(db, {"ann": ["gold"], "bob": ["first", "none_correct"]}, count=5)
    label_items(db, {"ann": ["second"]}, count=2)  # two corrections: new rows, not overwrites
    downloads = {}
    original = DeltaGenerator.download_button

    def record(self, label, data, *args, **kwargs):
        downloads[label] = data
        return original(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", record)
    compare(app)
    rows = [json.loads(line) for line in downloads["Download JSONL"].splitlines()]
    assert len(rows) == 12
    assert [(r["annotator"], r["item_id"]) for r in rows[:5]] == [("ann", i.item_id) for i in items]
    corrections = rows[-2:]
    assert [r["choice"] for r in corrections] == [i.candidate_ids[1] for i in items[:2]]
    assert [r["supersedes"] for r in corrections] == [rows[0]["id"], rows[1]["id"]]
    csv_lines = downloads["Download CSV"].splitlines()
    assert csv_lines[0].startswith("id,item_id,annotator,created_at,choice")
    assert len(csv_lines) == 13
    assert all(r["item_id"] in csv_lines[n + 1] for n, r in enumerate(rows))


def test_compare_counts_no_item_waiting_for_labels_and_marks_single_label_gold(app, db):
    """Two labels per item: of three items labelled, one has both; the fixed plan leaves the
    other two out, the adaptive plan takes their one label as gold and says so."""
    items = label_items(db, {"ann": ["gold"]}, count=3)
    add_adjudication(items[0].metadata["db_id"], session=db, annotator="bob", choice=items[0].gold)
    demo = get_dataset("demo", session=db).id
    set_plan(demo, session=db, actor=operator(), labels_per_item=2)
    db.commit()
    at = compare(app)
    assert metrics(at)["Adjudicated items"] == "1"
    assert any("2 labelled item(s) wait for the plan's labels" in c.value for c in at.caption)
    set_plan(demo, session=db, actor=operator(), adaptive=True)
    db.commit()
    at = compare(app)
    assert metrics(at)["Adjudicated items"] == "3"
    assert any("2 of the gold items rest on a single label" in c.value for c in at.caption)
    winner = {
        d["item_id"]: d["winner"]
        for d in run_decisions(get_run("demo-pcf", session=db), session=db)
    }
    two = f"{float(winner[items[0].item_id] == items[0].gold):.1%}"
    assert any(  # the bias named, and the accuracy on the items with two labels beside it
        "leans towards the judge" in c.value
        and f"On the 1 items with two labels or more, PCF accuracy is {two}." in c.value
        for c in at.caption
    )
