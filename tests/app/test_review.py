"""The Review page on the demo database, and its audit of a run made through a provider's SDK."""

from __future__ import annotations

import re

import pytest
from sqlmodel import Session, col, select
from streamlit.testing.v1 import AppTest

from pcf.access import operator
from pcf.analysis.markdown import escape_markdown, inert_markdown
from pcf.analysis.results import run_decisions, run_summary
from pcf.flags import FLAG_HELP
from pcf.items import Candidate, Item, candidate_titles
from pcf.labelling.membership import set_local_name
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.store import (
    Call,
    add_adjudication,
    call_request,
    get_run,
    import_items,
    item_db_ids,
    load_items,
)
from tests.app import APP, LOCAL_NAME, difference_sides, markdown_texts, open_page
from tests.factories import make_item, template_hostile_items
from tests.judge_providers import OPENAI, use_environment
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer

HOSTILE = (
    "Paris. <script>alert('x')</script> <img src=http://example.invalid/p.png onerror=alert(2)> "
    "![tracker](http://example.invalid/t.png) [click](javascript:alert(3)) **bold**"
)
UNSAFE = re.compile(r"<script|<img|!\[|example\.invalid|javascript:", re.IGNORECASE)


def active(markdown: str) -> bool:
    """Whether Markdown holds unsafe markup outside escapes (``\\<``) and code spans."""
    return bool(UNSAFE.search(re.sub(r"\\.|`[^`]*`", "", markdown)))


def frame_with(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def listed(at) -> list[str]:
    return list(frame_with(at, "PCF winner")["item"])


def stored_calls(db: Session, run_name: str, item_key: str) -> list[Call]:
    run = get_run(run_name, session=db)
    item_db_id = item_db_ids(run.dataset_id, session=db)[item_key]
    return list(
        db.exec(
            select(Call)
            .where(Call.run_id == run.id, Call.item_id == item_db_id)
            .order_by(col(Call.execution), col(Call.call_index))
        ).all()
    )


def test_the_list_is_sorted_most_doubtful_first(app, db: Session):
    at = open_page(app, "review")
    assert not at.exception
    decisions = run_decisions(get_run("demo-pcf", session=db), session=db)
    expected = sorted(decisions, key=lambda d: -d["metrics"]["priority"])
    assert listed(at) == [d["item_id"] for d in expected]
    assert at.selectbox(key="item").value == expected[0]["item_id"]
    assert at.selectbox(key="item").label.startswith("Item: 52 of 52 match the filters")


def first_visit(**query_params: str) -> AppTest:
    """The Review page as a new browser session's first request opens it."""
    return open_page(AppTest.from_file(str(APP), default_timeout=30), "review", **query_params)


def test_an_item_link_opens_the_dataset_holding_it_or_asks_which_or_says_none_does(db):
    """``?item=`` of an item the first dataset (the demo) lacks: the one dataset that holds it
    opens, and the address names it; two that hold it are offered; none, it says so."""
    set_local_name(LOCAL_NAME, session=db)
    for name in ("one", "two"):
        items = [make_item("shared-1"), make_item(f"only-in-{name}")]
        import_items(items, session=db, name=name, fmt="jsonl")
        db.commit()
        judge_run(RunSpec(name, f"{name}-pcf", k=3), session=db, actor=operator())

    at = first_visit(item="only-in-two")
    assert not at.exception, at.exception
    assert at.selectbox(key="item").value == "only-in-two"
    assert at.query_params == {"item": "only-in-two", "dataset": "two"}

    at = first_visit(item="shared-1")
    assert "Item **shared\\-1** is in 2 datasets. Which one do you mean?" in [
        w.value for w in at.warning
    ]
    assert "item" not in [box.key for box in at.selectbox]
    at.button(key="item_link_one").click().run()
    assert at.selectbox(key="item").value == "shared-1"
    assert at.query_params["dataset"] == "one"

    at = first_visit(item="nowhere")
    assert [e.value for e in at.error] == [
        "No dataset has an item **nowhere**: the link is wrong or the item was removed."
    ]
    assert "item" not in [box.key for box in at.selectbox]
    assert at.query_params["item"] == "nowhere"


def test_the_heatmap_data_are_the_stored_rankings_of_the_item(app, db: Session):
    at = open_page(app, "review", item="demo-017")
    assert not at.exception
    assert at.selectbox(key="item").value == "demo-017"
    heatmap = frame_with(at, "candidate_id")
    calls = stored_calls(db, "demo-pcf", "demo-017")
    assert len(calls) == 21
    assert len(heatmap) == 21 * 4
    for call in calls:
        rows = heatmap[
            (heatmap["execution"] == call.execution) & (heatmap["call_index"] == call.call_index)
        ]
        ranking = call.judgment["ranking"]
        assert {r.candidate_id: int(r.rank) for r in rows.itertuples()} == {
            cid: ranking.index(cid) + 1 for cid in ranking
        }
        assert {r.candidate_id: r.factuality for r in rows.itertuples()} == (
            call.judgment["factuality"]
        )
        assert {r.candidate_id: r.slot for r in rows.itertuples()} == {
            cid: call.order.index(cid) + 1 for cid in call.order
        }
    listed_calls = frame_with(at, "top pick")
    assert len(listed_calls) == len(calls)  # every call in one table


def test_the_slot_coverage_counts_the_stored_orderings(app, db: Session):
    at = open_page(app, "review", item="demo-017")
    coverage = frame_with(at, "slot 1")
    calls = stored_calls(db, "demo-pcf", "demo-017")
    dataset_id = get_run("demo-pcf", session=db).dataset_id
    item = next(i for i in load_items(dataset_id, session=db) if i.item_id == "demo-017")
    for row, cid in enumerate(item.candidate_ids):
        expected = [sum(call.order[slot] == cid for call in calls) for slot in range(4)]
        assert list(coverage.iloc[row]) == expected
    # Balanced K=7 over 3 executions: every candidate sits in every slot at least 3 times.
    assert coverage.to_numpy().min() >= 3
    assert coverage.to_numpy().sum() == len(calls) * 4


def test_the_item_shows_winners_gold_flags_and_raw_calls(app, db: Session):
    at = open_page(app, "review", item="demo-017")
    record = next(
        d
        for d in run_decisions(get_run("demo-pcf", session=db), session=db)
        if d["item_id"] == "demo-017"
    )
    dataset_id = get_run("demo-pcf", session=db).dataset_id
    item = next(i for i in load_items(dataset_id, session=db) if i.item_id == "demo-017")
    titles = candidate_titles(item)
    winners = next(m for m in markdown_texts(at) if m.startswith("**PCF winner**"))
    assert winners == (
        f"**PCF winner**: {escape_markdown(titles[record['winner']])}  \n"
        f"**Direct winner**: {escape_markdown(titles[record['metrics']['direct_winner']])}  \n"
        f"**Gold**: {escape_markdown(titles[item.gold])}"
    )
    assert any(
        f"Review priority {record['metrics']['priority']:.2f}" in c.value for c in at.caption
    )
    assert not at.get("html")  # one winner: no pair of texts to compare
    texts = markdown_texts(at)
    for flag in record["flags"]:
        assert f":orange-badge[{flag}] {FLAG_HELP[flag]}" in texts
    consensus = frame_with(at, "U")
    assert dict(zip(consensus["id"], consensus["C"], strict=True)) == record["consensus"]
    calls = stored_calls(db, "demo-pcf", "demo-017")
    for call in (calls[0], calls[-1]):  # the raw prompt and response of the call picked
        at.selectbox(key="review_raw_call").set_value(calls.index(call)).run()
        codes = [c.value for c in at.code]
        assert call.response_text in codes
        assert call_request(call, session=db)["user"] in codes


def test_where_the_winners_differ_their_texts_show_with_the_difference_marked(app, db):
    run = get_run("demo-pcf", session=db)
    record = next(
        d
        for d in run_decisions(run, session=db)
        if d["metrics"]["direct_winner"] not in (None, d["winner"])
    )
    at = open_page(app, "review", item=record["item_id"])
    item = next(i for i in load_items(run.dataset_id, session=db) if i.item_id == record["item_id"])
    texts = {c.id: c.text for c in item.candidates}
    at.toggle(key="review_whole").set_value(True).run()
    left, right, body = difference_sides(at)
    assert (left, right) == (texts[record["winner"]], texts[record["metrics"]["direct_winner"]])
    assert "<mark>" in body or "pcf-unpaired" in body


def test_the_heatmap_switches_to_factuality(app):
    at = open_page(app, "review", item="demo-017")
    at.segmented_control(key="review_heatmap_value").set_value("factuality").run()
    assert not at.exception
    assert at.segmented_control(key="review_heatmap_value").value == "factuality"


def test_filters_narrow_the_list(app, db: Session):
    summary = run_summary(get_run("demo-pcf", session=db), session=db)
    at = open_page(app, "review")
    at.multiselect(key="flags").set_value(["near_tie"]).run()
    assert not at.exception
    near_ties = listed(at)
    assert len(near_ties) == summary["flagged"]["near_tie"] < 52
    at.toggle(key="overrides").set_value(True).run()
    both = listed(at)
    assert set(both) <= set(near_ties)
    assert at.selectbox(key="item").value in both

    at.multiselect(key="flags").set_value([]).run()
    at.toggle(key="overrides").set_value(False).run()
    at.text_input(key="search").set_value("EVEREST").run()
    assert set(listed(at)) == {"demo-025", "demo-052"}

    at.text_input(key="search").set_value("").run()
    at.multiselect(key="bucket").set_value(["plain-error"]).run()
    assert listed(at)
    assert all(b == "plain-error" for b in frame_with(at, "PCF winner")["bucket"])

    ids = item_db_ids(get_run("demo-pcf", session=db).dataset_id, session=db)
    add_adjudication(ids["demo-003"], session=db, annotator="ann", choice="cannot_tell")
    db.commit()
    at.multiselect(key="bucket").set_value([]).run()
    at.selectbox(key="adjudicated").set_value("adjudicated").run()
    assert listed(at) == ["demo-003"]
    at.selectbox(key="adjudicated").set_value("not adjudicated").run()
    assert "demo-003" not in listed(at)
    assert len(listed(at)) == 51


def test_previous_and_next_move_within_the_filtered_list(app):
    at = open_page(app, "review")
    at.multiselect(key="flags").set_value(["order_unstable"]).run()
    keys = listed(at)
    assert at.selectbox(key="item").value == keys[0]
    previous, following = (b for b in at.button if b.label in ("Previous", "Next"))
    assert previous.disabled
    following.click().run()
    assert at.selectbox(key="item").value == keys[1]
    next(b for b in at.button if b.label == "Next").click().run()
    assert at.selectbox(key="item").value == keys[2]
    next(b for b in at.button if b.label == "Previous").click().run()
    assert at.selectbox(key="item").value == keys[1]

    at = open_page(at, "overview")
    at = open_page(at, "review")
    assert at.multiselect(key="flags").value == ["order_unstable"]
    assert listed(at) == keys


def test_a_candidate_from_the_demo_renders_as_inert_text(app):
    at = open_page(app, "review", item="demo-052")
    assert not at.exception
    assert not [m for m in markdown_texts(at) if active(m)]
    hostile = next(m for m in markdown_texts(at) if "alert" in m)
    assert r"\<script\>alert\(1\)\<\/script\> \!\[x\]\(`http://example.invalid/x.png`\)" in hostile
    assert not at.html

    at.toggle(key="plain").set_value(True).run()
    plain = next(t.value for t in at.text if "<script>" in t.value)
    assert "<script>alert(1)</script> ![x](http://example.invalid/x.png)" in plain


@pytest.fixture
def hostile_run(db: Session) -> None:
    """A one-item dataset whose candidate holds a script, an HTML image and a Markdown image,
    judged by the simulated judge."""
    item = Item(
        "x-1",
        "What is the capital of France? <img src=http://example.invalid/q.png>",
        (Candidate("ok", "Paris."), Candidate("bad", HOSTILE)),
        "ok",
        "hostile",
    )
    import_items([item], session=db, name="hostile", fmt="jsonl")
    db.commit()
    judge_run(RunSpec("hostile", "hostile-pcf", k=2), session=db, actor=operator())


def test_script_html_and_markdown_images_in_texts_stay_inert(hostile_run, app):
    app.sidebar.selectbox(key="dataset").set_value("hostile").run()
    at = open_page(app, "review", item="x-1")
    assert not at.exception
    assert at.selectbox(key="item").value == "x-1"
    prompt = "What is the capital of France? <img src=http://example.invalid/q.png>"
    assert {inert_markdown(HOSTILE), inert_markdown(prompt)} <= set(markdown_texts(at))
    assert not [m for m in markdown_texts(at) if active(m)]
    assert not [e.label for e in at.expander if UNSAFE.search(e.label)]
    assert not at.html

    at.toggle(key="plain").set_value(True).run()
    assert {HOSTILE, prompt} <= {t.value for t in at.text}


def test_the_audit_shows_the_request_the_server_received_and_its_answer(
    session: Session, monkeypatch
):
    """A run through the real OpenAI SDK at the wire server, on items whose texts the prompt
    escapes or that hide in its wording: for every call of such an item, the audit expander
    shows the system and user messages the server received, byte for byte, and the answer
    the server gave to that very request."""
    use_environment(monkeypatch, OPENAI)
    import_items(template_hostile_items(), session=session, name="hostile", fmt="jsonl")
    set_local_name(LOCAL_NAME, session=session)
    session.commit()

    def answer(request: WireRequest) -> Scripted:
        return Scripted.answer(listwise_text(request.last_user_text))

    with WireServer(answer) as server:
        spec = RunSpec(
            "hostile",
            "served",
            backend="openai",
            model=OPENAI.model,
            base_url=server.openai_base_url,
            k=4,
        )
        judge_run(spec, session=session, actor=operator())
        received = {r.last_user_text: r.system_text for r in server.received}

    at = AppTest.from_file(str(APP), default_timeout=30)
    at.session_state["dataset"], at.session_state["run"] = "hostile", "served"
    at.run()
    shown = set()
    for item in ("fences", "letters", "wording"):
        at = open_page(at, "review", item=item)
        calls = stored_calls(session, "served", item)
        for index in range(len(calls)):
            at.selectbox(key="review_raw_call").set_value(index).run()
            system, user, response = (code.value for code in at.code)
            assert received[user] == system
            assert response == listwise_text(user)
            assert any("request verified" in c.value for c in at.caption)
            shown.add(user)
    assert shown == set(received)
