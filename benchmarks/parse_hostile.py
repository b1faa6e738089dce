"""Parsing hostile answers: brace bombs of 10 MB, and bombs at the size cap, in well under 1 s.

Before the parser was bounded, ``{`` x 300,000 took 32 s, ``{\\n`` x 300,000 took 95 s and a
10 MB answer did not finish in 300 s (every brace was decoded from, and every failed decode
counted the lines before it). Now an answer over :data:`pcf.parsing.MAX_ANSWER_CHARS` fails as
``too_large`` at once, and one at the cap costs a bounded, linear amount of work: the rows at
1/4, 1/2 and all of the cap show the time growing with the length, not its square.

Each figure is the best of ``--repeat`` parses (listwise, three keys). Last line: JSON figures.

Run: ``.venv/bin/python -m benchmarks.parse_hostile [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import time

from pcf.parsing import MAX_ANSWER_CHARS, parse_listwise

KEY_TO_ID = {"A": "a", "B": "b", "C": "c"}
ORDER = ("a", "b", "c")
TEN_MB = 10_000_000
SHAPES = {
    "braces": "{",
    "brace_newline": "{\n",
    "open_keys": '{"',
    "deep_objects": '{"a": ',
    "deep_lists": '{"": [',
    "empty_objects": "{}",
}


def best_time(text: str, repeat: int) -> tuple[float, str | None]:
    """The fastest of ``repeat`` parses of ``text``, and the parse's failure reason."""
    best, error = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        error = parse_listwise(text, KEY_TO_ID, ORDER).error
        best = min(best, time.perf_counter() - start)
    return best, error


def main() -> None:
    """Time every shape at 10 MB and at 1/4, 1/2 and 1 of the size cap; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, dict[str, float | str | None]] = {}
    for name, shape in SHAPES.items():
        for label, size in (
            ("10MB", TEN_MB),
            ("cap/4", MAX_ANSWER_CHARS // 4),
            ("cap/2", MAX_ANSWER_CHARS // 2),
            ("cap", MAX_ANSWER_CHARS),
        ):
            text = shape * (size // len(shape))
            seconds, error = best_time(text, args.repeat)
            figures[f"{name}@{label}"] = {"seconds": round(seconds, 4), "error": error}
            print(f"{name:>14} {label:>6} {len(text):>10,} chars  {seconds:8.4f} s  {error}")
    slowest = max(f["seconds"] for f in figures.values())  # type: ignore[type-var]
    print(json.dumps({"max_answer_chars": MAX_ANSWER_CHARS, "slowest_s": slowest, **figures}))


if __name__ == "__main__":
    main()
