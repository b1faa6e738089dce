"""Texts from the data shown in a page: inert Markdown, escaped names, and how much at once
(docs/reviewing.md says what shows how). Texts anyone can write are shown through Streamlit's
Markdown renderer (react-markdown with remark-gfm, remark-math, remark-directive, remark-emoji,
and Streamlit's rewrites of ``:streamlit:`` and ``:material/name:``), which renders images and
links to any address.

How, and why this way:

- **Inertness is decided on a parse, never on lines.** The text is parsed once by markdown-it
  (CommonMark with GFM tables and strikethrough, the same block and inline rules as the renderer)
  and Markdown is written anew from its tree: nothing of the source reaches the output except
  through a text run, a code span or a fenced block that this module writes. Writing a new
  document from the tree, rather than patching the old one, leaves no room for a pairing the
  patch did not foresee (backticks across lines, lazy continuation lines, nested brackets).
- **Every text run is escaped**: each ASCII punctuation character gets a backslash, so no run
  can open a construct of any of the renderer's syntaxes (links, images, autolinks, HTML,
  entities, footnotes, directives, math, emphasis, tables, block markers at a line start).
- **Rewrites of the tree's text ignore escapes**, so escaping cannot stop them: GFM's autolink
  literals (``http://``, ``www.``, ``a@b.c``), emoji and Streamlit's ``:streamlit:`` and
  ``:material/...:`` run on text after the escapes are gone. Each of them needs one of a few
  triggers inside one word: ``://``, ``www.``, ``@`` after the word's first character, or two
  colons. A word that holds a trigger becomes a code span from the start of its address on
  (whose text no rewrite reads), trailing brackets, quotes and sentence punctuation left out;
  the whole word when what comes before the address holds a trigger too. Inline markup written
  here (``*``, ``~~``, code spans, breaks) separates text nodes, and none of its characters can
  complete a trigger if it fails to pair; code that touches code is one span.
- **Streamlit rewrites the source too**: ``:material/`` becomes ``:material_`` before parsing,
  code included, so a code span writes the colon of each outside itself. (A fenced code block
  cannot: there it shows as ``:material_``, inert.)
- **Lossless**: a text nested deeper than markdown-it follows (40 levels; it skips the rest)
  is shown whole as a code block.
- **What would load or link shows its address as code**: an image as ``![alt](`src`)``, a link
  as ``[text](`href`)``, an autolink as its address; headings become bold lines (Streamlit gives
  a heading an anchor link); raw HTML becomes escaped text.
- **Checked in the renderer's own libraries**: the tests render the output with remark and
  Streamlit's rewrites under Node.js (``tests/markdown_renderer``), not with markdown-it.
- **Linear time**: one parse (markdown-it is linear in the length, see
  ``benchmarks/markdown_hostile.py``), one pass over the tree, and only simple patterns without
  backtracking on the text (``\\s+`` and runs of backticks).

What a page renders at once is capped (:data:`RENDER_LIMIT`, :func:`preview`): the renderer in
the browser, not only this module, pays for every character.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator
from typing import NamedTuple

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

RENDER_LIMIT = 20_000
"""Characters of one text a page renders at once; the rest is shown on demand."""
_CUT_WINDOW = 0.8
"""A cut falls at the last line break after this share of the limit, when there is one."""

_MAX_NESTING = 40
"""Blocks nested deeper than this are skipped by markdown-it: such a text is shown as code."""
_PARSER = MarkdownIt("commonmark", {"html": True, "maxNesting": _MAX_NESTING}).enable(
    ["table", "strikethrough"]
)
_ESCAPED = str.maketrans({c: "\\" + c for c in string.punctuation})
_MARKUP = str.maketrans({c: "\\" + c for c in "\\`*_~[]<>!&|$#"})
"""What :func:`markdown_literal` escapes: the characters that open inline markup."""
_SPACE = re.compile(r"(\s+)")
_BACKTICKS = re.compile(r"`+")
_SCHEME = string.ascii_letters + string.digits + "+.-"
_LOCAL_PART = string.ascii_letters + string.digits + "_+.-"
_TRAILING = ".,;!?)]}>\"'"
_LANGUAGE = re.compile(r"[\w+#.-]{1,40}")
_ALIGN = {"text-align:left": ":---", "text-align:center": ":---:", "text-align:right": "---:"}


class Preview(NamedTuple):
    """The part of a text a page renders at once, and how many characters it leaves out."""

    text: str
    hidden: int


def preview(text: str, limit: int = RENDER_LIMIT) -> Preview:
    """The first ``limit`` characters of ``text``, cut at a line break near the limit if any."""
    if len(text) <= limit:
        return Preview(text, 0)
    cut = text.rfind("\n", int(limit * _CUT_WINDOW), limit)
    cut = limit if cut < 0 else cut
    return Preview(text[:cut], len(text) - cut)


def inert_markdown(text: str) -> str:
    """Markdown of ``text`` that renders its formatting and nothing active.

    Lists, quotes, emphasis, strikethrough, code and tables render; headings become bold lines;
    raw HTML, Streamlit's extensions (``:red[...]``, ``:material/...:``, ``$math$``) and emoji
    shortcodes stay text; links and images show their address as code; a word holding a bare
    address (``http://``, ``www.``, ``a@b.c``) or two colons is a code span.
    """
    tokens = _PARSER.parse(text)
    if any(token.level >= _MAX_NESTING - 1 for token in tokens if token.nesting == 1):
        return "\n".join(_code_lines(text, ""))  # the parser skipped what lies deeper
    return "\n".join(_blocks(SyntaxTreeNode(tokens).children, tight=False))


def escape_markdown(text: str) -> str:
    """``text`` as inert Markdown on one line, for names, ids and messages shown in a page.

    Every ASCII punctuation character is backslash-escaped and line breaks become spaces; a
    word holding an address or two colons is a code span (see the module's notes).
    """
    return _inert_text(" ".join(text.splitlines()))


# ---------------------------------------------------------------- text


def markdown_literal(text: str, *, in_table: bool = False) -> str:
    """``text`` as inert Markdown on one line, for a Markdown file that people also read raw
    (``report.md``): like :func:`escape_markdown`, but only the characters that open inline
    markup are escaped (backslash, backtick, ``*_~[]<>!&|$#``), so ``s/pcf (K=7)`` stays as it
    is; ``in_table``: for a pipe table's cell.

    Nothing it writes links or loads in a CommonMark or GFM renderer: brackets, ``<`` and
    ``&`` are escaped, and a word holding an address is a code span.
    """
    return _inert_text(" ".join(text.splitlines()), in_table=in_table, escapes=_MARKUP)


def _inert_text(run: str, *, in_table: bool = False, escapes: dict[int, str] = _ESCAPED) -> str:
    """One text run written inert (see :class:`_Inline`)."""
    writer = _Inline(in_table=in_table, escapes=escapes)
    writer.text(run)
    return writer.result()


def _pieces(run: str) -> Iterator[tuple[bool, str]]:
    """A text run cut into ``(is_code, text)`` pieces: risky words' addresses are code."""
    if not _risky(run):  # no word of it can be risky either
        yield False, run
        return
    for word in _SPACE.split(run):
        if not _risky(word):
            yield False, word
            continue
        start = _address_start(word)
        if _risky(word[:start]):
            start = 0
        core = word[start:].rstrip(_TRAILING)
        yield False, word[:start]
        yield True, core
        yield False, word[start + len(core) :]


def _risky(word: str) -> bool:
    """Whether a word (no whitespace) could be rewritten into a link, an image or an icon."""
    return "@" in word[1:] or "://" in word or word.count(":") >= 2 or "www." in word.lower()


def _address_start(word: str) -> int:
    """Where the first address or shortcode in a risky word starts: its scheme, ``www.``, the
    local part of ``a@b`` (or its ``mailto:``), or the first colon."""
    starts = []
    if (at := word.find("://")) >= 0:
        starts.append(len(word[:at].rstrip(_SCHEME)))
    if (at := word.lower().find("www.")) >= 0:
        starts.append(at)
    if (at := word.find("@", 1)) >= 0:
        local = len(word[:at].rstrip(_LOCAL_PART))
        scheme = next((p for p in ("mailto:", "xmpp:") if word[:local].lower().endswith(p)), "")
        starts.append(local - len(scheme))
    if (at := word.find(":")) >= 0 and word.count(":") >= 2:
        starts.append(at)
    return min(starts)


def _code_span(content: str, *, in_table: bool = False) -> str:
    """``content`` as a code span: fenced by more backticks than any run inside it."""
    content = " ".join(content.splitlines())
    if in_table:
        content = content.replace("|", "\\|")
    if not content:
        return ""
    fence = "`" * (1 + _longest_backticks(content))
    stripped = content.startswith(" ") and content.endswith(" ") and content.strip(" ")
    pad = " " if content[0] == "`" or content[-1] == "`" or stripped else ""
    return f"{fence}{pad}{content}{pad}{fence}"


def _longest_backticks(text: str) -> int:
    return max(map(len, _BACKTICKS.findall(text)), default=0)


class _Inline:
    """Inline Markdown being written.

    Text is gathered into runs, as the renderer merges it into one text node, before it is cut
    into pieces; code that follows code is merged into one span, so that two fences never touch.
    """

    def __init__(self, *, in_table: bool, escapes: dict[int, str] = _ESCAPED) -> None:
        self.in_table = in_table
        self.escapes = escapes
        self.parts: list[str] = []
        self.run: list[str] = []
        self.pending_code: list[str] = []

    def text(self, text: str) -> None:
        self.run.append(text)

    def code(self, content: str) -> None:
        self._end_run()
        self.pending_code.append(content)

    def markup(self, markup: str) -> None:
        self._end_run()
        self._end_code()
        self.parts.append(markup)

    def result(self) -> str:
        self._end_run()
        self._end_code()
        return "".join(self.parts)

    def _end_run(self) -> None:
        for is_code, piece in _pieces("".join(self.run)):
            if is_code:
                self.pending_code.append(piece)
            elif piece:
                self._end_code()
                self.parts.append(piece.translate(self.escapes))
        self.run.clear()

    def _end_code(self) -> None:
        """Write the code gathered; Streamlit turns ``:material/`` into ``:material_`` even in
        code, so the colon of each is written outside the span, as text."""
        if self.pending_code:
            first, *rest = "".join(self.pending_code).split(":material/")
            spans = [first, *(f"material/{part}" for part in rest)]
            self.parts.append("\\:".join(_code_span(s, in_table=self.in_table) for s in spans))
            self.pending_code.clear()


def _write_inline(nodes: list[SyntaxTreeNode], out: _Inline) -> None:
    wrappers = {"em": "*", "strong": "**", "s": "~~"}
    for node in nodes:
        kind = node.type
        if kind in wrappers:
            out.markup(wrappers[kind])
            _write_inline(node.children, out)
            out.markup(wrappers[kind])
        elif kind == "code_inline":
            out.code(node.content)
        elif kind == "softbreak":
            out.text("\n")
        elif kind == "hardbreak":
            out.markup("\\\n")
        elif kind == "link" and node.markup == "autolink":
            out.code("".join(child.content for child in node.children))
        elif kind in ("link", "image"):
            address = str(node.attrs.get("href" if kind == "link" else "src", ""))
            out.text("[" if kind == "link" else "![")
            _write_inline(node.children, out)
            out.text("](")
            out.code(address)
            out.text(")")
        else:  # text, html_inline, and anything else: its source as text
            out.text(node.content)


# ---------------------------------------------------------------- blocks


def _blocks(nodes: list[SyntaxTreeNode], *, tight: bool) -> list[str]:
    """Lines of a sequence of blocks: a blank line between blocks, none in a tight list."""
    lines: list[str] = []
    for node in nodes:
        block = _block(node)
        if not block:
            continue
        if lines and not tight:
            lines.append("")
        lines += block
    return lines


def _block(node: SyntaxTreeNode) -> list[str]:
    """The lines of one block; a block this module does not know is written as text."""
    writer = _BLOCK_WRITERS.get(node.type)
    if writer is not None:
        return writer(node)
    if node.children:
        return _blocks(node.children, tight=False)
    return _paragraph(_inert_text(node.content))


def _inline_of(node: SyntaxTreeNode, *, in_table: bool = False) -> str:
    """The inline content of a paragraph, heading or cell, written inert ('' when it has none)."""
    if not node.children:
        return ""
    writer = _Inline(in_table=in_table)
    _write_inline(node.children[0].children, writer)
    return writer.result()


def _heading(node: SyntaxTreeNode) -> list[str]:
    """A heading as a bold line: Streamlit gives a heading an anchor link."""
    content = _inline_of(node)
    return _paragraph(f"**{content}**" if content.strip() else "")


def _quote(node: SyntaxTreeNode) -> list[str]:
    return [f"> {line}" if line else ">" for line in _blocks(node.children, tight=False)]


def _paragraph(markdown: str) -> list[str]:
    """Lines of a paragraph; indentation at a line start is dropped (it means nothing there)."""
    lines = [line.lstrip(" \t") for line in markdown.split("\n")]
    return lines if any(lines) else []


def _code(node: SyntaxTreeNode) -> list[str]:
    """A fenced or indented code block, fenced anew."""
    return _code_lines(node.content, node.info if node.type == "fence" else "")


def _code_lines(content: str, info: str) -> list[str]:
    """A fenced code block whose fence no line of ``content`` can close."""
    fence = "`" * max(3, 1 + _longest_backticks(content))
    words = info.split()
    language = words[0] if words and _LANGUAGE.fullmatch(words[0]) else ""
    return [fence + language, *content.removesuffix("\n").split("\n"), fence]


def _html_as_text(node: SyntaxTreeNode) -> list[str]:
    """Raw HTML shown as text: its lines kept apart by hard breaks, blank lines as paragraphs."""
    paragraphs: list[list[str]] = [[]]
    for line in node.content.split("\n"):
        if line.strip():
            paragraphs[-1].append(_inert_text(line.strip()))
        elif paragraphs[-1]:
            paragraphs.append([])
    lines: list[str] = []
    for paragraph in filter(None, paragraphs):
        lines += [*([""] if lines else []), *(line + "\\" for line in paragraph[:-1])]
        lines.append(paragraph[-1])
    return lines


def _list(node: SyntaxTreeNode) -> list[str]:
    """A list with its markers, numbering and tightness; items indented under their marker."""
    items = node.children
    tight = all(
        child.hidden for item in items for child in item.children if child.type == "paragraph"
    )
    start = int(node.attrs.get("start", 1)) if node.type == "ordered_list" else 0
    lines: list[str] = []
    for number, item in enumerate(items, start=start):
        marker = f"{number}{node.markup}" if node.type == "ordered_list" else node.markup
        body = _blocks(item.children, tight=tight)
        if lines and not tight:
            lines.append("")
        indent = " " * (len(marker) + 1)
        lines.append(f"{marker} {body[0]}" if body else marker)
        lines += [indent + line if line else "" for line in body[1:]]
    return lines


def _table(node: SyntaxTreeNode) -> list[str]:
    """A GFM table: cells written inert, pipes in them escaped, alignments kept."""
    rows = [row for part in node.children for row in part.children]
    if not rows:
        return []
    header = rows[0].children
    aligns = [_ALIGN.get(str(cell.attrs.get("style", "")), "---") for cell in header]
    lines = []
    for index, row in enumerate(rows):
        cells = [_inline_of(cell, in_table=True).strip() for cell in row.children]
        lines.append("| " + " | ".join(cells) + " |")
        if index == 0:
            lines.append("|" + "|".join(aligns) + "|")
    return lines


_BLOCK_WRITERS: dict[str, Callable[[SyntaxTreeNode], list[str]]] = {
    "paragraph": lambda node: _paragraph(_inline_of(node)),
    "heading": _heading,
    "fence": _code,
    "code_block": _code,
    "html_block": _html_as_text,
    "hr": lambda node: ["___"],
    "blockquote": _quote,
    "bullet_list": _list,
    "ordered_list": _list,
    "table": _table,
}
