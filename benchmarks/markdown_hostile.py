"""Inert Markdown of hostile answers: single lines of 20k, 100k and 1M characters, in linear time.

Before the sanitiser was rewritten on a markdown-it parse, its address pattern backtracked:
``inert_markdown("A" * 20000)`` took 1.6 s, 100,000 characters 36 s, and 1,000,000 did not
finish in 1200 s; while it ran the server answered nobody. Now each shape costs time linear
in its length (the rows at 20k, 100k and 1M grow about tenfold per step, not a hundredfold), and
a page renders at most :data:`pcf.analysis.markdown.RENDER_LIMIT` characters of a text unless
asked for all of it. The slowest shapes are long runs of brackets, which make markdown-it try a
link at every one: on this 2-core machine, loaded, 0.9 s for 20,000 characters of ``![`` and
43 s for 1,000,000 (the worst case of Show all; the server answers others meanwhile), against
0.012 s for 1,000,000 letters.

Each figure is the best of ``--repeat`` renders, in seconds of CPU. Last line: JSON figures.

Run: ``.venv/bin/python -m benchmarks.markdown_hostile [--repeat N] [--max-size N]``
"""

from __future__ import annotations

import argparse
import gc
import json
import time

from pcf.analysis.markdown import RENDER_LIMIT, inert_markdown

SIZES = (20_000, 100_000, 1_000_000)
SHAPES = {
    "letters": "A",
    "words": "lorem ipsum ",
    "emails": "a@",
    "schemes": "http://",
    "www": "www.",
    "colons": ":a",
    "backticks": "`",
    "backticks_growing": None,
    "brackets": "[",
    "images": "![",
    "links": "[a](",
    "emphasis": "*a",
    "html": "<",
    "entities": "&#",
    "backslashes": "\\",
    "list_markers": "- ",
    "quote_markers": "> ",
    "table_rows": "|a|\n",
}


def hostile(shape: str | None, size: int) -> str:
    """``size`` characters of ``shape`` repeated; ``None`` is runs of 1, 2, 3... backticks."""
    if shape is not None:
        return shape * (size // len(shape))
    runs, length, total = [], 1, 0
    while total < size:
        runs.append("`" * length + "a")
        total += length + 1
        length += 1
    return "".join(runs)[:size]


def best_time(text: str, repeat: int) -> float:
    """The least CPU time of ``repeat`` renders of ``text``."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()  # not the garbage of the shape before
        start = time.process_time()
        inert_markdown(text)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    """Time every shape at 20k, 100k and 1M characters; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-size", type=int, default=max(SIZES))
    args = parser.parse_args()
    figures: dict[str, float] = {}
    for name, shape in SHAPES.items():
        row = []
        for size in (s for s in SIZES if s <= args.max_size):
            seconds = best_time(hostile(shape, size), args.repeat)
            figures[f"{name}@{size}"] = round(seconds, 4)
            row.append(f"{seconds:9.4f}")
        print(f"{name:>18} " + " ".join(row), flush=True)
    at_limit = {
        name: round(best_time(hostile(shape, RENDER_LIMIT), args.repeat), 4)
        for name, shape in SHAPES.items()
    }
    print(
        json.dumps(
            {
                "render_limit": RENDER_LIMIT,
                "slowest_at_render_limit_s": max(at_limit.values()),
                "letters_1M_s": figures.get("letters@1000000"),
                **figures,
            }
        )
    )


if __name__ == "__main__":
    main()
