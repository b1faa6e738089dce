"""Texts shown in a page: inert Markdown, escaped names, the render cap (pcf/analysis/markdown.py).

Whatever the sanitiser writes is rendered by Streamlit's own Markdown libraries
(:class:`~tests.markdown_renderer.StreamlitRenderer`); the browser tests
(``tests/e2e/test_hostile_markdown.py``) check the worst inputs in the whole app.
"""

from __future__ import annotations

import re
import time
from html import unescape

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pcf.analysis.markdown import (
    RENDER_LIMIT,
    escape_markdown,
    inert_markdown,
    preview,
)
from tests.hostile_markdown import BYPASSES, PIECES
from tests.markdown_renderer import StreamlitRenderer

LOADS_OR_LINKS = re.compile(r"<(a|img|input|iframe|video|audio|source|object|embed|h[1-6])\b")
"""Elements of the rendered HTML that load a URL or link somewhere (Streamlit gives headings an
anchor link; a task list item is an input)."""


def active_parts(streamlit: StreamlitRenderer, markdown: str) -> list[str]:
    """What ``markdown`` holds, rendered as Streamlit does, that loads, links or is syntax an
    inert text never holds: empty when nothing."""
    rendered = streamlit.render(markdown)
    return [f"{kind}: {detail}" for kind, detail in rendered.active] + [
        f"<{tag}> in the HTML" for tag in LOADS_OR_LINKS.findall(rendered.html)
    ]


def visible_text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def test_the_renderer_links_what_escaping_does_not_stop(streamlit: StreamlitRenderer):
    assert active_parts(streamlit, "![x](http://h.invalid/i.png)") == [
        "image: http://h.invalid/i.png",
        "<img> in the HTML",
    ]
    for text in ("www.h.invalid", r"http\://h.invalid", r"a\@h\.invalid", r"\:streamlit\:"):
        assert active_parts(streamlit, text), text
    assert active_parts(streamlit, r"\:material/home\:") == ["icon: home"]
    for text in ("$x$", ":red[x]", "[^1]\n\n[^1]: n", "# Title", "<b>x</b>", "- [ ] task"):
        assert active_parts(streamlit, text), text
    assert active_parts(streamlit, r"\:red\[x\] \$5 `http://h.invalid` `:streamlit:`") == []


# ---------------------------------------------------------------- what it keeps and disarms

HOSTILE_ANSWER = """### A heading
Paris. <script>alert('x')</script> <img src=http://example.invalid/p.png onerror=alert(2)>
![tracker](http://example.invalid/t.png) [click](javascript:alert(3)) <http://example.invalid/a>
See www.example.invalid/page, or mail someone@example.invalid. It costs $5 and $6 :red[now]
[ref]: http://example.invalid/r
[ref] and [text][ref] **bold** and *italic*
- a list item with `inline <b>code</b>`

```html
<b>fenced</b> [a](http://example.invalid/f)
```"""


def test_inert_markdown_renders_formatting_but_nothing_active(streamlit: StreamlitRenderer):
    markdown = inert_markdown(HOSTILE_ANSWER)
    assert active_parts(streamlit, markdown) == []
    html = streamlit.render(markdown).html
    assert set(re.findall(r"<(\w+)", html)) == {"p", "strong", "em", "ul", "li", "code", "pre"}
    assert "<p><strong>A heading</strong></p>" in html
    assert "![tracker](<code>http://example.invalid/t.png</code>)" in html
    assert (
        "<code>www.example.invalid/page</code>, or mail <code>someone@example.invalid</code>."
        in html
    )
    text = visible_text(html)
    assert "Paris. <script>alert('x')</script> <img src=http://example.invalid/p.png" in text
    assert "[click](javascript:alert(3))" in text  # markdown-it refuses the address: text
    assert "It costs $5 and $6 :red[now]" in text
    assert "[ref]: http://example.invalid/r\n[ref] and [text][ref] bold and italic" in text
    assert "a list item with inline <b>code</b>" in text
    assert "<b>fenced</b> [a](http://example.invalid/f)" in text
    assert '<code class="language-html">' in html


@pytest.mark.parametrize(
    "text",
    [
        "plain words",
        "a **b** *c* ~~d~~ `e`",
        "1. one\n2. two",
        "3. three\n4. four",
        "1. loose\n\n2. items",
        "- a\n  - nested\n- b",
        "* star\n+ plus",
        "> a quote\n> - with a list",
        "| a | b |\n|:---|---:|\n| 1 | 2 |",
        "```python\nx = `y`\n```",
        "line one  \nline two\\\nline three",
        "a\n\n___\n\nb",
    ],
)
def test_ordinary_markdown_renders_as_it_did(streamlit: StreamlitRenderer, text: str):
    assert streamlit.render(inert_markdown(text)).html == streamlit.render(text).html


@pytest.mark.parametrize(
    "text", ["plain words", "a **b** *c*", "1. one\n2. two", "| a |\n|---|\n| 1 |"]
)
def test_ordinary_markdown_is_written_as_it_was(text: str):
    assert inert_markdown(text) == text


def test_streamlit_extensions_and_shortcodes_stay_text(streamlit: StreamlitRenderer):
    markdown = inert_markdown("It costs $5 and $6 :red[now] :material/home: :streamlit: :+1:")
    assert markdown == r"It costs \$5 and \$6 \:red\[now\] \:`material/home:` `:streamlit:` `:+1:`"
    assert visible_text(streamlit.render(markdown).html) == (
        "It costs $5 and $6 :red[now] :material/home: :streamlit: :+1:"
    )


def test_links_and_images_show_their_address_as_code(streamlit: StreamlitRenderer):
    html = streamlit.render(
        inert_markdown("[a *b*][r] ![alt](<http://h.invalid/i i>)\n\n[r]: http://h.invalid/r")
    )
    assert html.html == (
        "<p>[a <em>b</em>](<code>http://h.invalid/r</code>) "
        "![alt](<code>http://h.invalid/i%20i</code>)</p>"
    )


def test_a_text_nested_too_deep_to_parse_is_shown_whole_as_code(streamlit: StreamlitRenderer):
    text = "> " * 50 + "the end is still here"
    html = streamlit.render(inert_markdown(text)).html
    assert html == f"<pre><code>{'> ' * 50}the end is still here\n</code></pre>"


@pytest.mark.parametrize("payload", BYPASSES, ids=range(len(BYPASSES)))
def test_the_known_bypasses_are_inert(streamlit: StreamlitRenderer, payload: str):
    markdown = inert_markdown(payload)
    assert active_parts(streamlit, markdown) == [], markdown


HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=24).map(
    "".join
)


@settings(max_examples=400, deadline=None)
@given(HOSTILE)
@example("`x\n`![x](http://h.invalid/i.png)`")
def test_random_hostile_markdown_never_renders_anything_active(
    streamlit: StreamlitRenderer, text: str
):
    markdown = inert_markdown(text)
    assert active_parts(streamlit, markdown) == [], markdown


# ---------------------------------------------------------------- names and ids


def test_an_escaped_name_shows_its_text_and_disarms_markup(streamlit: StreamlitRenderer):
    text = "![x](http://e.invalid/x.png) <script>alert(1)</script> **b** `c` [l](javascript:x)"
    html = streamlit.render(escape_markdown(text)).html
    assert set(re.findall(r"<(\w+)", html)) == {"p", "code"}
    assert "<code>http://e.invalid/x.png</code>" in html
    assert visible_text(html).strip() == text


@pytest.mark.parametrize(
    "name",
    ["http://x.example/run", "https://x.example", "www.x.example", "a@x.example", "mailto:a@x.ex"],
)
def test_an_address_in_a_name_is_a_code_span_never_a_link(name):
    escaped = escape_markdown(f"run ({name}), again")
    assert escaped == f"run \\(`{name}`\\)\\, again"


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_an_escaped_name_is_inert_and_keeps_every_character(
    streamlit: StreamlitRenderer, text: str
):
    escaped = escape_markdown(text)
    assert "\n" not in escaped
    for markdown in (escaped, f"**{escaped}**", f"Item {escaped}"):
        assert active_parts(streamlit, markdown) == [], markdown
    shown = " ".join(text.splitlines()).replace("\x00", "\ufffd")
    assert visible_text(streamlit.render(f"x{escaped}x").html) == f"x{shown}x".replace("\r", "")


# ---------------------------------------------------------------- how much at once


def test_a_long_text_is_previewed_up_to_a_line_break_near_the_limit():
    short = "a" * RENDER_LIMIT
    assert preview(short) == (short, 0)
    lines = ("x" * 99 + "\n") * 300  # 30,000 characters
    part = preview(lines)
    assert part.text == lines[: RENDER_LIMIT - 1]
    assert part.text.endswith("x")
    assert part.hidden == len(lines) - len(part.text)
    one_line = "y" * 1_000_000
    assert preview(one_line) == ("y" * RENDER_LIMIT, 1_000_000 - RENDER_LIMIT)


# ---------------------------------------------------------------- linear time


def cpu_seconds_per_character(text: str) -> float:
    """The least CPU time (this process only) per character of three renders of ``text``."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        inert_markdown(text)
        best = min(best, time.process_time() - start)
    return max(best, time.get_clock_info("process_time").resolution) / len(text)


@pytest.mark.parametrize("shape", ["A", "a@", "http://", ":a", "<", "&#", "\\"])
def test_long_lines_render_in_linear_time(shape: str):
    """The cost per character of a 1M-character line stays near that of a 100k one (a quadratic
    pattern made it 10 times higher, and 20k characters took 1.6 s); CPU time, not wall clock,
    and a bound of 4 times leave room for a loaded machine."""
    per_character = {
        size: cpu_seconds_per_character(shape * (size // len(shape)))
        for size in (20_000, 100_000, 1_000_000)
    }
    assert per_character[1_000_000] < 4 * per_character[100_000], per_character
    assert per_character[100_000] < 4 * max(per_character[20_000], 1e-7), per_character
