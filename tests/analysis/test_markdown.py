"""Texts shown in a page: inert Markdown, escaped names, the render cap (pcf/analysis/markdown.py).

Whatever the sanitiser writes is read back by :func:`active_parts`, a model of Streamlit's
renderer; the browser tests (``tests/e2e/test_hostile_markdown.py``) check the worst inputs in
the real one.
"""

from __future__ import annotations

import re
import time
from html import unescape

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from pcf.analysis.markdown import RENDER_LIMIT, escape_markdown, inert_markdown, preview
from tests.hostile_markdown import BYPASSES, PIECES

RENDERER = (
    MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).disable("text_join")
)
"""The renderer's CommonMark and GFM blocks, with escapes kept apart from the text around them
(``text_join`` off), so that :func:`active_parts` can tell ``\\:`` from ``:``."""
ACTIVE_TOKENS = {"link_open", "image", "html_inline", "html_block", "heading_open"}
"""Links, images, raw HTML, and headings (Streamlit gives each heading an anchor link)."""
TEXT_REWRITES = {
    "autolink literal": re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.IGNORECASE),
    "autolink email": re.compile(r"[-.\w+]+@[-\w]+(?:\.[-\w]+)+"),
    "logo image or icon": re.compile(r":streamlit:|:material_\w+:"),
    "emoji shortcode": re.compile(r":[\w+-]+:"),
}
"""What rewrites the text of the renderer's tree, escapes already resolved: remark-gfm's autolink
literals (its patterns, without the checks that spare some matches), Streamlit's logo and icons
and remark-emoji's shortcodes."""
SYNTAX_OUTSIDE_COMMONMARK = {
    "<": "raw HTML or an autolink",
    "&": "an entity",
    "[": "a footnote, task list item or link",
    "]": "a footnote, task list item or link",
    "$": "math (remark-math)",
    ":": "a directive (remark-directive) or a shortcode",
    "`": "an unpaired code span",
}
"""Characters that open the renderer's syntaxes that markdown-it lacks: any of them unescaped in
plain text counts as active."""


def active_parts(markdown: str) -> list[str]:
    """What in ``markdown`` would load something or link somewhere in Streamlit, as read by a
    model of its renderer: empty when nothing would."""
    source = markdown.replace(":material/", ":material_")  # as Streamlit does before parsing
    found = []
    for token in RENDERER.parse(source):
        if token.type in ACTIVE_TOKENS:
            found.append(f"{token.type}: {token.attrs or token.content}")
        for node_text, plain in text_nodes(token.children or []):
            found += [
                f"{name}: {node_text!r}" for name, p in TEXT_REWRITES.items() if p.search(node_text)
            ]
            found += [
                f"unescaped {c!r}, {what}"
                for c, what in SYNTAX_OUTSIDE_COMMONMARK.items()
                if c in plain
            ]
        for child in token.children or []:
            if child.type in ACTIVE_TOKENS:
                found.append(f"{child.type}: {child.attrs or child.content}")
    return found


def text_nodes(children) -> list[tuple[str, str]]:
    """The text nodes of an inline token as the renderer builds them: text, escapes, entities and
    soft breaks run together until other markup; each with its unescaped characters apart."""
    nodes, text, plain = [], [], []
    for child in [*children, None]:
        if child is not None and child.type in ("text", "text_special", "softbreak"):
            text.append("\n" if child.type == "softbreak" else child.content)
            plain.append(child.content if child.type == "text" else "")
        elif text:
            nodes.append(("".join(text), "".join(plain)))
            text, plain = [], []
    return nodes


def rendered(markdown: str) -> str:
    """HTML of Markdown with raw HTML allowed: the most permissive renderer."""
    return (
        MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(markdown)
    )


def visible_text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def test_the_model_sees_what_streamlit_would_render_active():
    assert active_parts("![x](http://h.invalid/i.png)")[0].startswith("image: {'src'")
    for text in ("see www.h.invalid", r"http\://h.invalid", "a@h\\.invalid", ":streamlit:"):
        assert active_parts(text), text
    assert active_parts(r"\:material/home\:")  # Streamlit rewrites `:material/` in the source
    assert active_parts("$x$")
    assert active_parts(":red[x]")
    assert active_parts("[^1]")
    assert active_parts("# Title")
    assert active_parts("<b>x</b>")
    assert not active_parts(r"\:red\[x\] \$5 `http://h.invalid` `:streamlit:`")


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


def test_inert_markdown_renders_formatting_but_nothing_active():
    markdown = inert_markdown(HOSTILE_ANSWER)
    assert active_parts(markdown) == []
    html = rendered(markdown)
    assert set(re.findall(r"<(\w+)", html)) == {"p", "strong", "em", "ul", "li", "code", "pre"}
    assert "<p><strong>A heading</strong></p>" in html
    assert "&lt;script&gt;alert('x')&lt;/script&gt;" in html
    assert "![tracker](<code>http://example.invalid/t.png</code>)" in html
    assert "[click](javascript:alert(3))" in html  # markdown-it refuses the address: text
    assert (
        "<code>www.example.invalid/page</code>, or mail <code>someone@example.invalid</code>."
        in html
    )
    assert "It costs $5 and $6 :red[now]" in html
    assert "[ref]: <code>http://example.invalid/r</code>\n[ref] and [text][ref]" in html
    assert "<code>inline &lt;b&gt;code&lt;/b&gt;</code>" in html
    assert (
        '<code class="language-html">&lt;b&gt;fenced&lt;/b&gt; [a](http://example.invalid/f)'
        in html
    )


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
def test_ordinary_markdown_renders_as_it_did(text: str):
    assert rendered(inert_markdown(text)) == rendered(text)


@pytest.mark.parametrize(
    "text", ["plain words", "a **b** *c*", "1. one\n2. two", "| a |\n|---|\n| 1 |"]
)
def test_ordinary_markdown_is_written_as_it_was(text: str):
    assert inert_markdown(text) == text


def test_streamlit_extensions_and_shortcodes_stay_text():
    markdown = inert_markdown("It costs $5 and $6 :red[now] :material/home: :streamlit: :+1:")
    assert markdown == (r"It costs \$5 and \$6 \:red\[now\] `:material/home:` `:streamlit:` `:+1:`")


def test_links_and_images_show_their_address_as_code():
    html = rendered(
        inert_markdown("[a *b*][r] ![alt](<http://h.invalid/i i>)\n\n[r]: http://h.invalid/r")
    )
    assert html == (
        "<p>[a <em>b</em>](<code>http://h.invalid/r</code>) "
        "![alt](<code>http://h.invalid/i%20i</code>)</p>\n"
    )


def test_a_text_nested_too_deep_to_parse_is_shown_whole_as_code():
    text = "> " * 50 + "the end is still here"
    html = rendered(inert_markdown(text))
    assert html == f"<pre><code>{'&gt; ' * 50}the end is still here\n</code></pre>\n"


@pytest.mark.parametrize("payload", BYPASSES, ids=range(len(BYPASSES)))
def test_the_known_bypasses_are_inert(payload: str):
    markdown = inert_markdown(payload)
    assert active_parts(markdown) == [], markdown
    assert "<a" not in rendered(markdown)
    assert "<img" not in rendered(markdown)


HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=24).map(
    "".join
)


@settings(max_examples=400, deadline=None)
@given(HOSTILE)
@example("`x\n`![x](http://h.invalid/i.png)`")
def test_random_hostile_markdown_never_renders_anything_active(text: str):
    markdown = inert_markdown(text)
    assert active_parts(markdown) == [], markdown


# ---------------------------------------------------------------- names and ids


def test_an_escaped_name_shows_its_text_and_disarms_markup():
    text = "![x](http://e.invalid/x.png) <script>alert(1)</script> **b** `c` [l](javascript:x)"
    html = rendered(escape_markdown(text))
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
def test_an_escaped_name_is_inert_and_keeps_every_character(text: str):
    escaped = escape_markdown(text)
    assert "\n" not in escaped
    for markdown in (escaped, f"**{escaped}**", f"Item {escaped}"):
        assert active_parts(markdown) == [], markdown
    shown = " ".join(text.splitlines()).replace("\x00", "\ufffd")
    assert visible_text(rendered(f"x{escaped}x")) == f"x{shown}x\n".replace("\r", "")


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
