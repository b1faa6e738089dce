"""Adjudicate: record which candidate is most factual, blind, most doubtful items first, one
key an item (docs/reviewing.md); ``?label=ITEM_ID`` opens an item.

A key labels the item whose buttons it presses (their keys name the item), so a key pressed
while the next item is drawn labels the item on screen, never one not yet seen. Each key is a
Streamlit button shortcut and, where :data:`LABEL_KEYS` runs, also a click on the button of the
item whose heading is on screen: Streamlit binds its shortcuts again on every rerun, and keys
pressed while the page still drew were dropped (in Chromium, 4 of 14 pressed as soon as the
next item showed; none of 26 with the script). When both press one button, the second press
finds the item just labelled and saves nothing (:func:`label`).

A key reruns the labelling view alone (a fragment), not app.py's frame and sidebar: what a
label leaves unchanged (the items and the run's decisions) is read once per page run, the item
the queue will likely hold next is read while the person reads this one, and the progress and
notices are filled in after the next item's prompt and candidates are drawn.
"""

from __future__ import annotations

import json
from html import escape as escape_html

import pandas as pd
import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from pages.shared import (
    answer_height,
    candidate_cells,
    comment_thread,
    current_run,
    engine,
    ensure_app_frame,
    prompt_box,
    require_dataset,
    require_permission,
    run_analysis,
    run_calibration_on,
    search_items,
    session,
    show_text,
    simulated_badge,
    stored_item,
)
from pcf.access import AccessDeniedError, Permission
from pcf.analysis.item_detail import describe_candidate
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.triage import likely_errors_caught
from pcf.flags import FLAG_HELP, FLAGS
from pcf.items import CANNOT_TELL, NONE_CORRECT, Item
from pcf.labelling.adjudications import (
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
from pcf.labelling.human_gold import needs_more_labels
from pcf.labelling.labels import ItemFullError, LabelChangedError, save_label, visible_history
from pcf.labelling.plan import Plan, labelling_plan
from pcf.labelling.queue import Claim, assignment_progress, claim_next, labels_wanted, release
from pcf.store import (
    Adjudication,
    DatabaseMovedError,
    LostRaceError,
    adjudicated_item_keys,
    current_labels,
    database_url,
    session_scope,
    storage_problem,
    write_with_retry,
)

ITEM_KEY = "adjudicate_item"  # an item opened on purpose: revisit, correction, ?label=
SAVED_KEY = "adjudicate_saved"  # the last label saved (its Adjudication row)
SKIPPED_KEY = "adjudicate_skipped"
LABELLED_KEY = "adjudicate_labelled"  # items this tab labelled: their buttons may linger
ERROR_KEY = "adjudicate_error"
CONFLICT_KEY = "adjudicate_conflict"  # a save refused: another tab saved this item first
SHOWN_KEY = "adjudicate_shown"  # db id of the item the queue held for this tab last
SEEN_KEY = "adjudicate_seen"  # {item: id of my label this tab showed when it opened the item}
ORDER_KEY = "adjudicate_order"
SCROLLED_KEY = "adjudicate_scrolled"  # the saved item after which the page went to the top
AHEAD_KEY = "adjudicate_ahead"  # (item key, Item): the item the queue will likely hold next
PROMPT_KEY = "adjudicate_prompt"  # the prompt's box (benchmarks/label_latency.py waits for it)
CANDIDATE_HEIGHT = 400
PROMPT_HEIGHT = 150
# Each key and how the key of the button it presses begins (the item's key follows).
KEYS = {str(n): f"adjudicate_choose_{n}_" for n in range(1, 10)} | {
    "0": "adjudicate_choose_none_correct_",
    "x": "adjudicate_choose_cannot_tell_",
    "u": "adjudicate_correct",
}
# Installs once per browser tab a key listener that clicks the button of KEYS drawn for the
# item whose heading the latest run drew.
LABEL_KEYS = """<script>
if (!window.pcfLabelKeys) {
  window.pcfLabelKeys = true;
  const fresh = (node) => !node.closest("[data-stale='true']");
  document.addEventListener("keydown", (event) => {
    const start = KEYS_JSON[event.key.toLowerCase()];
    const typing = event.target.closest?.(
      "input:not([type=radio], [type=checkbox]), textarea, select, [contenteditable=true]");
    if (!start || event.ctrlKey || event.metaKey || event.altKey || event.repeat || typing) return;
    const headings = () => [...document.querySelectorAll("[data-testid=stMain] h3")]
      .filter((h) => h.innerText.startsWith("Item "));
    const shown = headings()[0]?.innerText;  // the item on screen, drawn or being drawn again
    event.preventDefault();
    // Its buttons may be on their way: after a click on a confidence the run draws the item
    // again, and a busy server draws the buttons seconds after the heading. Wait for them while
    // the item stays on screen, up to a minute; once another item is drawn, the key is spent.
    const press = (tries) => {
      const heading = headings().find(fresh);
      if (heading && heading.innerText !== shown) return;
      const item = !start.endsWith("_") ? "" : heading
        ? heading.innerText.slice(5).trim().replaceAll(/[^a-zA-Z0-9_-]/g, "-") : null;
      const box = item === null ? null : document.getElementsByClassName("st-key-" + start + item);
      const button = box?.[0]?.querySelector("button");
      if (button && !button.disabled) button.click();
      else if (tries > 0) setTimeout(() => press(tries - 1), 50);
    };
    press(1200);
  });
}
</script>""".replace("KEYS_JSON", json.dumps(KEYS))
SCROLL_TO_TOP = """<script>
document.querySelector('[data-testid="stMain"]')?.scrollTo({{top: 0}});  // after {item}
</script>"""


def give_back_shown() -> None:
    """Release the item on screen (another queue order picks the next one anew)."""
    if shown_item := st.session_state.pop(SHOWN_KEY, None):
        with session_scope(engine()) as s:
            release(shown_item, session=s, actor=actor)


ensure_app_frame()
actor = require_permission(Permission.LABEL)
who = actor.identity
sees_results = actor.may(Permission.SEE_RESULTS)

# What stays the same from one label to the next is read once per page run; the labelling view
# below (a fragment: a key reruns it alone) reads what a label changes.
with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    index = item_index(dataset.id, session=s)
table = run_analysis(run).table if run else None
index = with_priority(index, table)
db_ids = dict(zip(index["item_id"], index["db_id"], strict=True))

if requested := st.query_params.get("label"):
    del st.query_params["label"]
    if requested in db_ids:
        st.session_state[ITEM_KEY] = requested


def describe_history(item: Item, names: dict[str, str], place: str) -> None:
    """The item's labels this person may see: every label, or an annotator's own."""
    with session() as s:
        history = visible_history(item.metadata["db_id"], session=s, actor=actor)
    st.dataframe(history_frame(history, names), hide_index=True, key=f"adjudicate_history_{place}")


def describe_decisions(item: Item, names: dict[str, str], place: str) -> None:
    """The judge's winners, flags, gold and every label of one item, for those who see results."""
    found = [] if table is None else table[table["item_id"] == item.item_id].to_dict("records")
    row = found[0] if found else {}
    columns = st.columns(3)
    columns[0].metric("PCF winner", describe_candidate(row.get("winner"), names))
    columns[1].metric("Direct winner", describe_candidate(row.get("direct_winner"), names))
    columns[2].metric("Gold", describe_candidate(item.gold, names))
    for flag in [flag for flag in FLAGS if row.get(flag)]:
        st.markdown(f":orange-badge[{flag}] {FLAG_HELP[flag]}")
    describe_history(item, names, place)


def label(item_key: str, item_db_id: int, choice: str, wanted: int) -> None:
    """Save ``choice`` for the item as the signed-in person, then move on to the next item.

    A press on an item this tab already labelled or skipped (its buttons may linger, still bound
    to keys) saves nothing unless the item was opened on purpose, to correct it. When another tab
    saved a label since this tab showed the item, nothing is saved and the page shows that label.
    """
    passed = {*st.session_state.get(LABELLED_KEY, ()), *st.session_state.get(SKIPPED_KEY, ())}
    if item_key in passed and st.session_state.get(ITEM_KEY) != item_key:
        return
    seen = st.session_state.get(SEEN_KEY, {}).get(item_key)
    try:
        stored = write_with_retry(
            engine(),
            lambda s: save_label(
                item_db_id,
                session=s,
                actor=actor,
                choice=choice,
                seen=seen,
                wanted=wanted,
                confidence=st.session_state.get(f"adjudicate_confidence_{item_key}"),
                tags=st.session_state.get(f"adjudicate_tags_{item_key}", []),
                notes=st.session_state.get(f"adjudicate_notes_{item_key}", "").strip(),
            ),
        )
    except ItemFullError as exc:
        st.session_state[ERROR_KEY] = str(exc)
        st.session_state.pop(ITEM_KEY, None)
        return
    except LabelChangedError as exc:
        st.session_state.setdefault(SEEN_KEY, {})[item_key] = exc.label_id
        st.session_state[CONFLICT_KEY] = {"item": item_key, "choice": exc.choice}
        st.session_state[ITEM_KEY] = item_key
        return
    except (ValueError, AccessDeniedError) as exc:  # a bad field, or a role taken away
        st.session_state[ERROR_KEY] = str(exc)
        st.session_state[ITEM_KEY] = item_key
        return
    except (SQLAlchemyError, LostRaceError, DatabaseMovedError) as exc:  # after every retry
        why = (
            storage_problem(exc, database_url())
            or f"the database refused it ({type(exc).__name__})"
        )
        st.session_state[ERROR_KEY] = f"The label was not saved: {why}. Press the key again."
        st.session_state[ITEM_KEY] = item_key
        return
    st.session_state.setdefault(SEEN_KEY, {})[item_key] = stored.id
    st.session_state[SAVED_KEY] = stored
    st.session_state[LABELLED_KEY] = {*st.session_state.get(LABELLED_KEY, ()), item_key}
    st.session_state[SKIPPED_KEY] = [
        key for key in st.session_state.get(SKIPPED_KEY, []) if key != item_key
    ]
    for key in (ITEM_KEY, ERROR_KEY):
        st.session_state.pop(key, None)


def skip(item_key: str) -> None:
    """Put the item off to the end of this session's queue and back into the others' queues."""
    with session_scope(engine()) as s:
        release(int(db_ids[item_key]), session=s, actor=actor)
    st.session_state[SKIPPED_KEY] = [*st.session_state.get(SKIPPED_KEY, []), item_key]
    st.session_state.pop(ITEM_KEY, None)


def open_item(item_key: str) -> None:
    """Open one item on purpose, e.g. to correct its label."""
    st.session_state[ITEM_KEY] = item_key
    st.session_state.pop(SAVED_KEY, None)


def revisit() -> None:
    """Open the item picked in the revisit list."""
    if picked := st.session_state.get("adjudicate_revisit"):
        open_item(picked)


def find(mine: list[str]) -> None:
    """Open the first item of ``mine`` (queue, then labelled) whose id or text holds the search."""
    if text := st.session_state.get("adjudicate_find", "").strip():
        found = search_items(dataset, text)
        if match := next((key for key in mine if key in found), None):
            open_item(match)
        else:
            st.toast(f"No item in your queue or your labels holds {text!r}.")


def next_item(wanted: dict[str, int], items: pd.DataFrame) -> tuple[Claim | None, str | None]:
    """The queue's next item held for me (most doubtful first, skipped ones last), and the item
    this run shows: the one opened on purpose, else that one."""
    skipped = st.session_state.get(SKIPPED_KEY, [])
    order = [(key, int(db_ids[key])) for key in adjudication_queue(items, (), skipped)]
    claim = write_with_retry(
        engine(),
        lambda s: claim_next(
            dataset.id, order, session=s, actor=actor, wanted=wanted, skip=skipped
        ),
    )
    current = st.session_state.get(ITEM_KEY)
    if current not in db_ids:
        current = claim.item_key if claim else None
        st.session_state[SHOWN_KEY] = claim.item_db_id if claim else None
    return claim, current


def read_item(item_key: str) -> tuple[Item, list[Adjudication]]:
    """The item (as read ahead for this tab after the previous one was drawn, else from the
    store) and my labels of it, which this tab then counts as seen."""
    db_id = int(db_ids[item_key])
    ahead = st.session_state.get(AHEAD_KEY)
    with session() as s:
        item = ahead[1] if ahead is not None and ahead[0] == item_key else stored_item(db_id, s)
        mine = [a for a in visible_history(db_id, session=s, actor=actor) if a.annotator == who]
    st.session_state.setdefault(SEEN_KEY, {}).setdefault(item_key, mine[-1].id if mine else None)
    return item, mine


def read_ahead(claim: Claim | None, current: str) -> None:
    """Read the item the queue will most likely hold next while this one is being labelled, once
    (not again at each rerun for a confidence, a tag or a note)."""
    upcoming = next((key for key in claim.queue if key != current), None) if claim else None
    if upcoming is not None and st.session_state.get(AHEAD_KEY, (None,))[0] != upcoming:
        with session() as s:
            st.session_state[AHEAD_KEY] = (upcoming, stored_item(int(db_ids[upcoming]), s))


def show_notices(current: str | None, names: dict[str, str], mine: list[Adjudication]) -> None:
    """The saved label's confirmation, a refused save, and whether I labelled this item."""
    if error := st.session_state.pop(ERROR_KEY, None):
        st.error(f"Not saved: {escape_markdown(error)}")
    saved = st.session_state.get(SAVED_KEY)
    if saved and saved.annotator == who:
        with session() as s:
            saved_item = stored_item(saved.item_id, s)
        saved_names = display_labels(display_order(saved_item, who))
        choice = choice_label(saved.choice, saved_names)
        line, correct, details = st.columns([5, 2, 3], vertical_alignment="center")
        line.success(
            f"Saved your label for item {escape_markdown(saved_item.item_id)}: "
            f"{escape_markdown(choice)}.",
            icon=":material/check_circle:",
        )
        correct.button(
            "Correct this label",
            icon=":material/edit:",
            shortcut="U",
            on_click=open_item,
            args=(saved_item.item_id,),
            key="adjudicate_correct",
            width="stretch",
        )
        popover = details.popover(
            "What the judge decided, every label, comments"
            if sees_results
            else "Your labels of it, comments",
            width="stretch",
            key=f"adjudicate_details_{saved.id}",  # closed again for the next label saved
            on_change="rerun",
        )
        if popover.open:  # read and drawn when opened, never on the way to the next item
            with popover:
                if sees_results:
                    describe_decisions(saved_item, saved_names, "saved")
                else:
                    describe_history(saved_item, saved_names, "saved")
                comment_thread(saved.item_id, actor, "adjudicate")
        if saved_item.item_id != st.session_state.get(SCROLLED_KEY):
            st.session_state[SCROLLED_KEY] = saved_item.item_id
            # Streamlit keeps the scroll position across reruns: the next item's prompt and the
            # confirmation in view. This script (no data in it but the item key, escaped),
            # LABEL_KEYS and sign-in's link scripts are the only JavaScript the app runs.
            script = SCROLL_TO_TOP.format(item=escape_html(saved_item.item_id))
            st.html(script, unsafe_allow_javascript=True, width="content")
    conflict = st.session_state.pop(CONFLICT_KEY, None)
    if conflict and conflict["item"] == current:
        st.warning(
            "Not saved: you had already saved a label for this item in another tab or window. "
            "Your stored label is "
            f"**{escape_markdown(choice_label(conflict['choice'], names))}**. "
            "Press a key again to correct it."
        )
    if mine:
        st.info(
            "You labelled this item before. A key records a correction as a new row; the "
            "history below keeps every label.",
            icon=":material/history:",
        )


def show_item(item: Item, wanted: int) -> tuple[bool, dict[str, str]]:
    """The prompt, the candidates in my order under their buttons, and the buttons for none
    correct, cannot tell and skip; returns whether texts show plain, and the candidates' names
    in my order."""
    current = item.item_id
    db_id = int(db_ids[current])
    shown = display_order(item, who)
    names = display_labels(shown)
    plain = prompt_box(item, PROMPT_HEIGHT, short=400, key=PROMPT_KEY)
    box_height = answer_height([c.text for c in item.candidates], CANDIDATE_HEIGHT)
    cells = candidate_cells(len(shown))
    for cell, (position, candidate_id) in zip(cells, enumerate(shown, start=1), strict=True):
        with cell:
            st.button(
                f"Candidate {position}",
                key=f"adjudicate_choose_{position}_{current}",
                shortcut=str(position) if position <= 9 else None,
                help=f"Save Candidate {position} as the most factual and open the next item",
                on_click=label,
                args=(current, db_id, candidate_id, wanted),
                width="stretch",
            )
            with st.container(
                border=True, height=box_height, key=f"adjudicate_candidate_{position}"
            ):
                show_text(item.text_of(candidate_id), plain, f"{db_id}:{candidate_id}")
    st.caption(
        "Press the number of the most factual candidate: it saves at once and the next item "
        "opens. Candidates are in an order shuffled for you and this item, not the judge's "
        "order. Set confidence, tags or notes before the key."
    )
    others = st.columns(4)
    for cell, (choice, key) in zip(others, ((NONE_CORRECT, "0"), (CANNOT_TELL, "X")), strict=False):
        cell.button(
            choice_label(choice, names),
            key=f"adjudicate_choose_{choice}_{current}",
            shortcut=key,
            on_click=label,
            args=(current, db_id, choice, wanted),
            width="stretch",
        )
    others[2].button(
        "Skip for now", key="adjudicate_skip", on_click=skip, args=(current,), width="stretch"
    )
    return plain, names


def show_label_details(current: str, plan: Plan, plain: bool) -> None:
    """The optional confidence, tags and notes saved with the next key, and the guidelines."""
    label_details = st.columns([2, 3, 3])
    label_details[0].radio(
        "Confidence",
        options=list(CONFIDENCE_SCALE),
        index=None,
        format_func=confidence_label,
        key=f"adjudicate_confidence_{current}",
        help="Optional: a share from 0 (a guess) to 1 (certain), the same number the history and "
        "the exports show. Not chosen, none is saved.",
    )
    label_details[1].multiselect(
        "Tags",
        PATTERN_TAGS,
        accept_new_options=True,
        placeholder="pattern tags from the method, or type your own",
        key=f"adjudicate_tags_{current}",
    )
    label_details[2].text_area(
        "Notes", key=f"adjudicate_notes_{current}", placeholder="why (optional)", height=68
    )
    if plan.guidelines:
        with st.expander("Guidelines", icon=":material/menu_book:"):
            show_text(plan.guidelines, plain=False, key=f"guidelines:{dataset.id}")


def show_queue(claim: Claim | None, plan: Plan, p_wrong: pd.Series | None, done: set[str]) -> None:
    """How many items are left and in which order, what my labels likely cover, and finding or
    revisiting an item."""
    st.caption(
        f"{len(claim.queue) if claim else 0} item(s) left in your queue, your assigned items "
        "first, then the most doubtful; "
        f"{plan.labels_per_item} label(s) per item"
        + (", more only where labels disagree or the item is flagged" if plan.adaptive else "")
        + ". The item shown is held for you for 10 minutes."
    )
    if run is not None:
        p_wrong = p_wrong if p_wrong is not None else run_calibration_on(run, table)
        st.radio(
            "Queue order",
            ("review priority", "calibrated"),
            horizontal=True,
            key=ORDER_KEY,
            on_change=give_back_shown,
            disabled=p_wrong is None,
            help="Calibrated: the chance that the judge is wrong, learned from the instability "
            "metrics of the items with gold or human labels (out of fold for those items).",
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
    st.text_input(
        "Find an item in your queue or your labels",
        key="adjudicate_find",
        placeholder="an item id or words of its prompt or answers",
        on_change=find,
        args=([*(claim.queue if claim else ()), *sorted(done)],),
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


@st.fragment
def labelling_view() -> None:
    """The item to label and all around it. A key reruns this alone: the label saved, the next
    item held and drawn first, then what the label changed (progress, notices, the queue)."""
    with session() as s:
        plan = labelling_plan(dataset.id, session=s)
        labels = current_labels(dataset.id, session=s) if plan.adaptive else None
    items, p_wrong = index, None
    if run is not None and st.session_state.get(ORDER_KEY) == "calibrated":  # refitted per label
        p_wrong = run_calibration_on(run, table)
        if p_wrong is not None:
            items = index.assign(priority=index["item_id"].map(p_wrong))
    doubtful = needs_more_labels(table, labels) if labels is not None else set(db_ids)
    wanted = labels_wanted(plan, list(db_ids), doubtful)
    try:
        claim, current = next_item(wanted, items)
    except AccessDeniedError:  # a role taken away since the page was drawn: sign-in says so
        st.rerun()

    heading, status = st.columns([3, 2], vertical_alignment="bottom")
    heading.subheader(f"Item {escape_markdown(current)}" if current else "Nothing to label")
    # The same place in the page whatever it holds, so keys stay bound; filled once the item is
    # drawn, so that what it holds (the judge's decisions, comments) never delays the next item.
    notices = st.container()
    item, mine = read_item(current) if current is not None else (None, [])
    plain, names = show_item(item, wanted[item.item_id]) if item is not None else (False, {})

    with session() as s:
        done = adjudicated_item_keys(dataset.id, who, session=s)
        assigned = assignment_progress(dataset.id, session=s).get(who)
    labelled, total = assigned or (len(done), len(db_ids))
    status.progress(
        labelled / max(total, 1),
        text=f"{labelled} of {total} {'assigned ' if assigned else ''}items labelled by "
        f"{escape_markdown(who)}",
    )
    with notices:
        show_notices(current, names, mine)
    if item is None:
        st.success(
            f"Your queue of {escape_markdown(dataset.name)} is empty: every item has the labels "
            f"its plan asks for ({plan.labels_per_item} per item), or yours."
        )
        return
    show_label_details(item.item_id, plan, plain)
    st.divider()
    simulated_badge(run)
    show_queue(claim, plan, p_wrong, done)
    unblind = sees_results and st.toggle(
        "Unblind: show the judge's decisions and the gold label",
        key="adjudicate_unblind",
        persist_state="session",
    )
    if unblind or (mine and sees_results):
        describe_decisions(item, names, "current")
    elif mine:
        describe_history(item, names, "current")
    read_ahead(claim, item.item_id)


st.title("Adjudicate")
st.html(LABEL_KEYS, unsafe_allow_javascript=True, width="content")
labelling_view()
