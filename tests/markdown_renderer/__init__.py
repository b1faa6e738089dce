"""Streamlit's Markdown pipeline, run by Node.js for the sanitiser's tests (``render.mjs``).

The libraries st.markdown renders with (remark-parse, remark-gfm with its autolink literals and
footnotes, remark-math, remark-directive, remark-emoji, remark-rehype) and Streamlit's own
rewrites of the text, in Streamlit's order. ``npm ci`` in this folder installs them (the
Makefile and ``.ci/run`` do); without them the tests that need the renderer skip, except under
``CI``, where they fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
SCRIPT = FOLDER / "render.mjs"


def missing() -> str | None:
    """Why the renderer cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "Node.js is missing: install Debian's nodejs and npm"
    if not (FOLDER / "node_modules").is_dir():
        return f"the renderer's libraries are missing: run `npm ci --prefix {FOLDER}`"
    return None


@dataclass(frozen=True)
class Rendered:
    """What the pipeline made of one Markdown text.

    Attributes:
        html: the HTML it renders (raw HTML as text, as react-markdown shows it).
        active: ``[kind, detail]`` of every node that loads a URL or links somewhere, or is
            syntax an inert text never holds: links, images, raw HTML, headings, math,
            directives, icons, footnotes, task list items.
    """

    html: str
    active: list[list[str]] = field(default_factory=list)


class StreamlitRenderer:
    """One Node.js process that renders Markdown after Markdown, as st.markdown does."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["node", str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )

    def render(self, markdown: str) -> Rendered:
        self.process.stdin.write(json.dumps(markdown) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"render.mjs stopped (exit code {self.process.poll()})")
        return Rendered(**json.loads(line))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)
