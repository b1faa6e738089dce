"""Reading the tables of an HTML report in tests."""

from __future__ import annotations

from collections import Counter
from html.parser import HTMLParser


class HtmlTables(HTMLParser):
    """Cell texts of every table row, and every tag and attribute of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: Counter = Counter()
        self.attrs: list[tuple[str, str | None]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        self.attrs += attrs
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> HtmlTables:
    parsed = HtmlTables()
    parsed.feed(page)
    parsed.close()
    return parsed
