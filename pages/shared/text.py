"""How pages show text from the data (inert Markdown or plain text, long texts in part), badges."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from pcf.analysis.difference import aligned_difference
from pcf.analysis.markdown import Preview, inert_markdown, preview
from pcf.analysis.results import ADAPTIVE_NOTE, SIMULATED_NOTE, is_simulated, stopping_label
from pcf.items import Item
from pcf.store import Run

PLAIN_KEY = "plain"  # show prompts and answers as plain text instead of inert Markdown
LONG_ANSWER = 500  # characters: longer answers scroll inside a box of fixed height


def simulated_badge(run: Run | None) -> None:
    """A clear badge on results from the simulated judge, and the note of an adaptive run."""
    if run is not None and is_simulated(run):
        st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")
    if run is not None and (label := stopping_label(run)):
        st.info(f":material/timer: **Adaptive run** ({label}): {ADAPTIVE_NOTE}.")


def prompt_box(item: Item, height: int, short: int, key: str | None = None) -> bool:
    """The item's prompt under its heading (boxed ``height`` high from ``short`` characters) and
    the per-session switch to plain text for prompts and answers; returns whether it is on."""
    heading, toggle = st.columns([4, 1], vertical_alignment="bottom")
    heading.markdown("##### Prompt")
    plain = toggle.toggle(
        "Plain text",
        key=PLAIN_KEY,
        persist_state="session",
        help="Show the prompt and the answers exactly as stored, without Markdown formatting.",
    )
    fits = len(item.prompt) < short
    with st.container(border=True, height="content" if fits else height, key=key):
        show_text(item.prompt, plain, f"{item.metadata['db_id']}:prompt")
    return plain


def candidate_cells(n: int) -> Iterator[DeltaGenerator]:
    """A cell for each of ``n`` candidates, four to a row."""
    for start in range(0, n, 4):
        yield from st.columns(min(n, 4))[: n - start]


SHOWN_IN_FULL_KEY = "shown_in_full"  # keys of the long texts this session asked to see whole


_inert = st.cache_data(max_entries=64, show_spinner=False)(inert_markdown)


@contextmanager
def _part_shown(text: str, key: str) -> Iterator[str]:
    """All of ``text`` once asked for, else its first :data:`~pcf.analysis.markdown.RENDER_LIMIT`
    characters, with a button that asks for the rest."""
    shown_in_full = st.session_state.setdefault(SHOWN_IN_FULL_KEY, set())
    part = Preview(text, 0) if key in shown_in_full else preview(text)
    yield part.text
    if part.hidden:
        st.button(
            f"Show all: {part.hidden:,} more characters",
            key=f"show_all_{key}",
            icon=":material/unfold_more:",
            on_click=st.session_state[SHOWN_IN_FULL_KEY].add,
            args=(key,),
        )


def show_text(text: str, plain: bool, key: str) -> None:
    """A prompt or an answer as inert Markdown (no HTML, images or links) or exactly as stored;
    a long one shows its start, and all of it on demand. ``key`` names the text in the page."""
    with _part_shown(text, key) as part:
        if plain:
            st.text(part)
        else:
            st.markdown(_inert(part))


def show_code(text: str, key: str, language: str | None = None) -> None:
    """A raw prompt or response as code: its start, and all of it on demand (see show_text)."""
    with _part_shown(text, key) as part:
        st.code(part, language=language, wrap_lines=True)


def change_in_points(points: float, unit: str = "points") -> dict[str, Any]:
    """``st.metric`` arguments for a change in points: green up, red down, and a grey
    "no change" (not a green "+0.0") when it rounds to zero."""
    if round(points, 1) == 0:
        return {"delta": f"no change ({unit})", "delta_color": "off", "delta_arrow": "off"}
    return {"delta": f"{points:+.1f} {unit}"}


def answer_height(texts: list[str], height: int) -> int | Literal["content"]:
    """Height of side-by-side answer boxes: ``height`` (scrolling) if one is long, else content."""
    return height if max(map(len, texts), default=0) > LONG_ANSWER else "content"


DIFFERENCE_NOTE = (
    "Aligned by sentence: words are marked inside a sentence the other answer says "
    "differently; a tinted sentence has no counterpart in the other answer."
)
DIFF_STYLE = (
    "<style>.pcf-diff{display:grid;grid-template-columns:1fr 1fr;column-gap:1rem;"
    "white-space:pre-wrap;overflow-wrap:anywhere}.pcf-diff>div{padding:.15rem .5rem}"
    ".pcf-diff .changed{border-left:3px solid #f0c000}.pcf-diff .unpaired{border-left:3px solid"
    " #9ab}.pcf-unpaired{background:rgba(120,150,180,.15)}.pcf-diff .kept{grid-column:1/span 2;"
    "color:#888;font-size:.85em;text-align:center}</style>"
)


def show_difference(titled: Sequence[tuple[str, str]], key: str) -> list[DeltaGenerator]:
    """Two texts side by side under their titles, aligned by sentence: words marked inside a
    sentence the other says differently, sentences without a counterpart tinted
    (:func:`~pcf.analysis.difference.aligned_difference`). Sentences both say are folded into
    one line unless the "Show whole answers" switch (``key``) is on. Returns a container under
    each title for what a page adds there."""
    rows = aligned_difference(titled[0][1], titled[-1][1])
    slots = []
    for column, (title, _) in zip(st.columns(2), titled, strict=False):
        with column:
            st.markdown(title)
            slots.append(st.container())
    whole = st.toggle(
        "Show whole answers",
        key=key,
        help="Every sentence of both answers, aligned; off: only the sentences that differ.",
    )
    cells, kept = [], 0
    for row in [*rows, None]:
        if row is not None and row.kind == "same" and not whole:
            kept += 1
            continue
        if kept:
            cells.append(f'<div class="kept">⋯ {kept} sentence(s) the same in both ⋯</div>')
            kept = 0
        if row is not None:
            cells.extend(f'<div class="{row.kind}">{side}</div>' for side in (row.left, row.right))
    st.html(f'{DIFF_STYLE}<div class="pcf-diff">{"".join(cells)}</div>')
    return slots
