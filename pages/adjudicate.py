"""Adjudicate: record which candidate is most factual, blind, most doubtful items first.

Labels are saved as the signed-in person. Keyboard: 1-9 choose the candidate shown at that
position, 0 = none is correct, X = cannot tell, S = save and go on (Streamlit's built-in button
shortcuts; they are ignored while typing in a text field). ``?label=ITEM_ID`` opens an item
(the Review page links here that way). After a save the next item opens at the top of the page,
under the "Saved" confirmation. Annotators never see the gold label, the judges' decisions or
another person's label; reviewers and admins may unblind.
"""

from __future__ import annotations

from html import escape as escape_html

import pandas as pd
import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from pages.shared import (
    answer_height,
    current_run,
    engine,
    ensure_app_frame,
    plain_text_toggle,
    require_dataset,
    require_permission,
    run_analysis,
    session,
    show_text,
    simulated_badge,
)
from pcf.access import Permission
from pcf.analysis.adjudications import (
    CONFIDENCE_SCALE,
    PATTERN_TAGS,
    adjudication_queue,
    choice_label,
    confidence_label,
    display_labels,
    display_order,
    history_frame,
    item_index,
    with_priority,
)
from pcf.analysis.gold import dataset_gold, needs_more_labels
from pcf.analysis.item_detail import describe_candidate
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.triage import calibrated_priority, known_answers, likely_errors_caught
from pcf.flags import FLAG_HELP, FLAGS
from pcf.items import Item
from pcf.labelling.labels import ItemFullError, LabelChangedError, save_label, visible_history
from pcf.labelling.plan import labelling_plan
from pcf.labelling.queue import claim_next, labels_wanted, release
from pcf.store import (
    LostRaceError,
    adjudicated_item_keys,
    current_labels,
    database_url,
    get_run,
    load_item,
    run_version,
    session_scope,
    write_with_retry,
)
from pcf.store.errors import DatabaseMovedError, storage_problem
from pcf.store.queries import label_revision

ITEM_KEY = "adjudicate_item"  # an item opened on purpose: revisit, correction, ?label=
CHOICE_KEY = "adjudicate_choice"  # {"item": key, "choice": id}: picked, not saved yet
SAVED_KEY = "adjudicate_saved"  # the last label saved: item, db_id, annotator, choice
SKIPPED_KEY = "adjudicate_skipped"
ERROR_KEY = "adjudicate_error"
CONFLICT_KEY = "adjudicate_conflict"  # a save refused: another tab saved this item first
SHOWN_KEY = "adjudicate_shown"  # db id of the item the queue held for this tab last
SEEN_KEY = "adjudicate_seen"  # {item: id of my label this tab showed when it opened the item}
ORDER_KEY = "adjudicate_order"
SCROLLED_KEY = "adjudicate_scrolled"  # the saved item after which the page went to the top
CANDIDATES_PER_ROW = 2
CANDIDATE_HEIGHT = 300
SCROLL_TO_TOP = """<script>
document.querySelector('[data-testid="stMain"]')?.scrollTo({{top: 0}});  // after {item}
</script>"""


@st.cache_data(max_entries=16, show_spinner=False)
def calibrated_order(database: str, name: str, version: tuple) -> pd.Series | None:
    """Each item's calibrated chance that the judge is wrong (None without enough labels),
    kept while the run's calls and the labels (``version``) stay the same."""
    with session() as s:
        stored = get_run(name, session=s)
        table = run_analysis(stored).table
        answers = known_answers(table, dataset_gold(stored.dataset_id, session=s).gold)
    try:
        return calibrated_priority(table, answers)
    except ValueError:
        return None


def give_back_shown() -> None:
    """Release the item on screen (another queue order picks the next one anew)."""
    if shown_item := st.session_state.pop(SHOWN_KEY, None):
        with session_scope(engine()) as s:
            release(shown_item, session=s, actor=actor)


ensure_app_frame()
actor = require_permission(Permission.LABEL)
who = actor.identity
sees_results = actor.may(Permission.SEE_RESULTS)
st.title("Adjudicate")
st.caption(
    "Say which candidate is the most factual. The judge's decisions, the gold label and other "
    "people's labels stay hidden, so they cannot sway you."
)

with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    done = adjudicated_item_keys(dataset.id, who, session=s)
    items = item_index(dataset.id, session=s)
    plan = labelling_plan(dataset.id, session=s)
    labels = current_labels(dataset.id, session=s) if plan.adaptive else None
table = run_analysis(run).table if run else None
p_wrong = None
if table is not None:
    items = with_priority(items, table)
    with session() as s:
        version = (run_version(run, session=s), label_revision(dataset.id, session=s))
    p_wrong = calibrated_order(database_url(), run.name, version)
    order = st.radio(
        "Queue order",
        ("review priority", "calibrated"),
        horizontal=True,
        key=ORDER_KEY,
        on_change=give_back_shown,
        disabled=p_wrong is None,
        help="Calibrated: the chance that the judge is wrong, learned from the instability "
        "metrics of the items with gold or human labels (out of fold for those items).",
    )
    if order == "calibrated" and p_wrong is not None:
        items = items.assign(priority=items["item_id"].map(p_wrong))
decisions = table.set_index("item_id") if table is not None else None
db_ids = dict(zip(items["item_id"], items["db_id"], strict=True))
doubtful = needs_more_labels(table, labels) if labels is not None else set(db_ids)
wanted = labels_wanted(plan, list(db_ids), doubtful)

if requested := st.query_params.get("label"):
    del st.query_params["label"]
    if requested in db_ids:
        st.session_state[ITEM_KEY] = requested

simulated_badge(run)
st.progress(
    len(done) / max(len(items), 1),
    text=f"{len(done)} / {len(items)} items labelled by {escape_markdown(who)}",
)
if run is None:
    st.caption("No run selected: the queue follows the dataset's order.")
elif p_wrong is None:
    st.caption("The calibrated order needs two items the judge got right and two it got wrong.")
else:
    caught, expected = likely_errors_caught(p_wrong, done)
    st.caption(
        f"Your labels so far likely cover {caught:.1f} of the judge's ~{expected:.1f} errors "
        f"({100 * caught / max(expected, 1e-9):.0f}%), by the calibrated chance of each item."
    )


def describe_history(item: Item, names: dict[str, str], place: str) -> None:
    """The item's labels this person may see: every label, or an annotator's own."""
    with session() as s:
        history = visible_history(item.metadata["db_id"], session=s, actor=actor)
    st.dataframe(history_frame(history, names), hide_index=True, key=f"adjudicate_history_{place}")


def describe_decisions(item: Item, names: dict[str, str], place: str) -> None:
    """The judge's winners, the flags, the gold label and every label of one item (for those
    who may see results)."""
    known = decisions is not None and item.item_id in decisions.index
    row = decisions.loc[item.item_id] if known else None
    columns = st.columns(3)
    columns[0].metric("PCF winner", describe_candidate(row["winner"] if known else None, names))
    columns[1].metric(
        "Direct winner", describe_candidate(row["direct_winner"] if known else None, names)
    )
    columns[2].metric("Gold", describe_candidate(item.gold, names))
    for flag in FLAGS if known else ():
        if row[flag]:
            st.markdown(f":orange-badge[{flag}] {FLAG_HELP[flag]}")
    describe_history(item, names, place)


def scroll_to_top(after_item: str) -> None:
    """Open the page at its top: the next item's prompt and the confirmation in view.

    Streamlit keeps the scroll position across reruns; this fixed script (no data in it but the
    item key, escaped) is the only JavaScript the app runs.
    """
    st.html(
        SCROLL_TO_TOP.format(item=escape_html(after_item)),
        unsafe_allow_javascript=True,
        width="content",
    )


def choose(item_key: str, choice: str) -> None:
    """Remember a choice for the item on screen (saved with Save)."""
    st.session_state[CHOICE_KEY] = {"item": item_key, "choice": choice}


def save(item_key: str, item_db_id: int, choice: str, seen: int | None) -> None:
    """Store the label at once as the signed-in person, then move on to the next item.

    ``seen`` is the person's label of the item that this tab showed when it opened the item:
    when another tab saved since, nothing is saved and the page says so with the label now
    stored.
    """
    try:
        label = write_with_retry(
            engine(),
            lambda s: save_label(
                item_db_id,
                session=s,
                actor=actor,
                choice=choice,
                seen=seen,
                wanted=wanted.get(item_key),
                confidence=st.session_state[f"adjudicate_confidence_{item_key}"],
                tags=st.session_state[f"adjudicate_tags_{item_key}"],
                notes=st.session_state[f"adjudicate_notes_{item_key}"].strip(),
            ),
        )
    except ItemFullError as exc:
        st.session_state[ERROR_KEY] = str(exc)
        for key in (ITEM_KEY, CHOICE_KEY):
            st.session_state.pop(key, None)
        return
    except LabelChangedError as exc:
        st.session_state[SEEN_KEY][item_key] = exc.label_id
        st.session_state[CONFLICT_KEY] = {"item": item_key, "choice": exc.choice}
        st.session_state[ITEM_KEY] = item_key
        st.session_state.pop(CHOICE_KEY, None)
        return
    except ValueError as exc:
        st.session_state[ERROR_KEY] = str(exc)
        return
    except (SQLAlchemyError, LostRaceError, DatabaseMovedError) as exc:  # after every retry
        why = (
            storage_problem(exc, database_url())
            or f"the database refused it ({type(exc).__name__})"
        )
        st.session_state[ERROR_KEY] = (
            f"The label was not saved: {why}. Your choice is still selected; save again."
        )
        return
    st.session_state[SEEN_KEY][item_key] = label.id
    st.session_state[SAVED_KEY] = {
        "item": item_key,
        "db_id": item_db_id,
        "annotator": label.annotator,
        "choice": label.choice,
    }
    st.session_state[SKIPPED_KEY] = [
        key for key in st.session_state.get(SKIPPED_KEY, []) if key != item_key
    ]
    for key in (ITEM_KEY, CHOICE_KEY, ERROR_KEY):
        st.session_state.pop(key, None)


def skip(item_key: str) -> None:
    """Put the item off to the end of the queue for this session, and give it back to the
    others' queues."""
    with session_scope(engine()) as s:
        release(int(db_ids[item_key]), session=s, actor=actor)
    st.session_state[SKIPPED_KEY] = [*st.session_state.get(SKIPPED_KEY, []), item_key]
    for key in (ITEM_KEY, CHOICE_KEY):
        st.session_state.pop(key, None)


def open_item(item_key: str) -> None:
    """Open one item on purpose, e.g. to correct its label."""
    st.session_state[ITEM_KEY] = item_key
    for key in (CHOICE_KEY, SAVED_KEY):
        st.session_state.pop(key, None)


def revisit() -> None:
    """Open the item picked in the revisit list."""
    if picked := st.session_state.get("adjudicate_revisit"):
        open_item(picked)


if error := st.session_state.pop(ERROR_KEY, None):
    st.error(f"Not saved: {escape_markdown(error)}")

saved = st.session_state.get(SAVED_KEY)
if saved and saved["annotator"] == who:
    with session() as s:
        saved_item = load_item(saved["db_id"], session=s)
    saved_names = display_labels(display_order(saved_item, who))
    choice = choice_label(saved["choice"], saved_names)
    st.success(
        f"Saved your label for item {escape_markdown(saved['item'])}: {escape_markdown(choice)}."
    )
    if saved["item"] != st.session_state.get(SCROLLED_KEY):
        st.session_state[SCROLLED_KEY] = saved["item"]
        scroll_to_top(saved["item"])
    with st.expander(
        "What the judge decided on it, and every label" if sees_results else "Your labels of it"
    ):
        if sees_results:
            describe_decisions(saved_item, saved_names, "saved")
        else:
            describe_history(saved_item, saved_names, "saved")
        st.button(
            "Correct this label",
            icon=":material/edit:",
            on_click=open_item,
            args=(saved["item"],),
            key="adjudicate_correct",
        )

if done:
    st.selectbox(
        "Revisit an item you labelled",
        sorted(done),
        index=None,
        placeholder="pick an item to see its history or correct your label",
        key="adjudicate_revisit",
        on_change=revisit,
    )

skipped = st.session_state.get(SKIPPED_KEY, [])
order = [(key, int(db_ids[key])) for key in adjudication_queue(items, (), skipped)]
claim = write_with_retry(
    engine(),
    lambda s: claim_next(dataset.id, order, session=s, actor=actor, wanted=wanted, skip=skipped),
)
current = st.session_state.get(ITEM_KEY)
if current not in db_ids:
    current = claim.item_key if claim else None
    st.session_state[SHOWN_KEY] = claim.item_db_id if claim else None
if current is None:
    st.success(
        f"Your queue of {escape_markdown(dataset.name)} is empty: every item has the labels its "
        f"plan asks for ({plan.labels_per_item} per item), or yours."
    )
    st.stop()

with session() as s:
    item = load_item(int(db_ids[current]), session=s)
    mine = [
        a
        for a in visible_history(int(db_ids[current]), session=s, actor=actor)
        if a.annotator == who
    ]
seen = st.session_state.setdefault(SEEN_KEY, {}).setdefault(current, mine[-1].id if mine else None)
shown = display_order(item, who)
names = display_labels(shown)
pending = st.session_state.get(CHOICE_KEY) or {}
chosen = pending.get("choice") if pending.get("item") == current else None

st.subheader(f"Item {escape_markdown(item.item_id)}")
conflict = st.session_state.pop(CONFLICT_KEY, None)
if conflict and conflict["item"] == current:
    st.warning(
        "Not saved: you had already saved a label for this item in another tab or window. "
        f"Your stored label is **{escape_markdown(choice_label(conflict['choice'], names))}**. "
        "Choose again and save to correct it."
    )
st.caption(
    f"{claim.left if claim else 0} item(s) left in your queue, most doubtful first; "
    f"{plan.labels_per_item} label(s) per item"
    + (", more only where labels disagree or the item is flagged" if plan.adaptive else "")
    + ". The item shown is held for you for 10 minutes."
)
if plan.guidelines:
    with st.expander("Guidelines", icon=":material/menu_book:"):
        show_text(plan.guidelines, plain=False, key=f"guidelines:{dataset.id}")
if mine:
    st.info(
        "You labelled this item before. Saving again records a correction as a new row; "
        "the history below keeps every label."
    )
work, panel = st.columns([3, 1], gap="medium")
with panel, st.container(border=True):
    if chosen:
        chosen_name = names.get(chosen) or choice_label(chosen, names)
        st.markdown(f"Your choice: **{escape_markdown(chosen_name)}**")
    else:
        st.markdown("Your choice: none yet. Press 1-9, 0 (none is correct) or X (cannot tell).")
    st.button(
        "Save and next",
        type="primary",
        icon=":material/save:",
        shortcut="S",
        disabled=chosen is None,
        on_click=save,
        args=(current, int(db_ids[current]), chosen, seen),
        key="adjudicate_save",
        width="stretch",
    )
    for choice, shortcut in (("none_correct", "0"), ("cannot_tell", "X")):
        st.button(
            choice_label(choice, names),
            key=f"adjudicate_choose_{choice}",
            type="primary" if chosen == choice else "secondary",
            shortcut=shortcut,
            on_click=choose,
            args=(current, choice),
            width="stretch",
        )
    st.select_slider(
        "Confidence",
        options=list(CONFIDENCE_SCALE),
        value=0.5,
        format_func=confidence_label,
        key=f"adjudicate_confidence_{current}",
        help="A share from 0 (a guess) to 1 (certain): the same number the history and the "
        "exports show.",
    )
    st.multiselect(
        "Tags",
        PATTERN_TAGS,
        accept_new_options=True,
        placeholder="pattern tags from the method, or type your own",
        key=f"adjudicate_tags_{current}",
    )
    st.text_area("Notes", key=f"adjudicate_notes_{current}", placeholder="why (optional)")
    st.button(
        "Skip for now",
        key="adjudicate_skip",
        on_click=skip,
        args=(current,),
        width="stretch",
    )
    unblind = sees_results and st.toggle(
        "Unblind: show the judge's decisions and the gold label",
        key="adjudicate_unblind",
        persist_state="session",
    )

with work:
    heading, toggle = st.columns([4, 1], vertical_alignment="bottom")
    heading.markdown("##### Prompt")
    with toggle:
        plain = plain_text_toggle()
    with st.container(border=True, height="content" if len(item.prompt) < 600 else 200):
        show_text(item.prompt, plain, f"{item.metadata['db_id']}:prompt")
    st.caption(
        "Candidates in an order shuffled for you and this item; it is not the judge's order."
    )
    box_height = answer_height([c.text for c in item.candidates], CANDIDATE_HEIGHT)
    for start in range(0, len(shown), CANDIDATES_PER_ROW):
        cells = st.columns(CANDIDATES_PER_ROW)
        chunk = list(enumerate(shown, start=1))[start : start + CANDIDATES_PER_ROW]
        for cell, (position, candidate_id) in zip(cells, chunk, strict=False):
            with cell.container(border=True):
                st.markdown(f"**Candidate {position}**")
                with st.container(height=box_height, border=False):
                    show_text(
                        item.text_of(candidate_id),
                        plain,
                        f"{item.metadata['db_id']}:{candidate_id}",
                    )
                st.button(
                    f"Candidate {position} is the most factual",
                    key=f"adjudicate_choose_{position}",
                    type="primary" if chosen == candidate_id else "secondary",
                    shortcut=str(position) if position <= 9 else None,
                    on_click=choose,
                    args=(current, candidate_id),
                    width="stretch",
                )

if unblind or (mine and sees_results):
    describe_decisions(item, names, "current")
elif mine:
    describe_history(item, names, "current")
