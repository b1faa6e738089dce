"""The difference between two answers, as a reviewer reads it: sentences aligned first, words
marked only inside a sentence the other answer says differently (docs/reviewing.md).

Two essays that say the same thing in other words have few words in common in order, so a
word-level difference of the whole texts marks nearly every word. Here the texts are cut into
sentences; identical sentences are matched first (:class:`difflib.SequenceMatcher` on the
sentences), then, between them, each sentence is paired with the most similar one of the other
answer (a monotone alignment that maximises the summed similarity of the pairs, pairs below
:data:`PAIR_SIMILARITY` left out). Words are marked inside a pair; a sentence without a pair is
shown as a whole, tinted, and its words are not marked one by one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from html import escape as escape_html
from typing import Literal

PAIR_SIMILARITY = 0.5
"""Share of words in common (SequenceMatcher's ratio) from which two sentences are a pair."""
MAX_PAIRING = 40_000
"""Sentence comparisons a stretch of changed sentences may take (left x right); a larger one is
shown unpaired, so that two very long texts cannot take quadratic time."""

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]»”’]*[ \t]+|[ \t]*\n\s*")
_SPACE = re.compile(r"(\s+)")

RowKind = Literal["same", "changed", "unpaired"]


@dataclass(frozen=True)
class DiffRow:
    """One row of two answers side by side, each side inert HTML (escaped text, ``<mark>`` on
    changed words, ``<span class="pcf-unpaired">`` around a sentence without a pair).

    ``kind``: ``same`` (both say these sentences), ``changed`` (a pair of similar sentences, the
    words that differ marked) or ``unpaired`` (sentences with no counterpart on the other side;
    either side may be empty)."""

    kind: RowKind
    left: str
    right: str


def sentences(text: str) -> list[str]:
    """``text`` cut after each sentence's end (``.``, ``!`` or ``?`` and a space) and at each
    line break, every piece keeping the space that follows it: the pieces join to ``text``."""
    pieces, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        if end.end() > start:
            pieces.append(text[start : end.end()])
            start = end.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def aligned_difference(text: str, other: str) -> list[DiffRow]:
    """The rows of ``text`` (left) and ``other`` (right) aligned by sentence (see the module)."""
    left, right = sentences(text), sentences(other)
    matcher = SequenceMatcher(None, [_norm(s) for s in left], [_norm(s) for s in right], False)
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(
                DiffRow("same", escape_html(a), escape_html(b))
                for a, b in zip(left[i1:i2], right[j1:j2], strict=True)
            )
        else:
            rows.extend(_paired_rows(left[i1:i2], right[j1:j2]))
    return rows


def marked_words(text: str, other: str) -> tuple[str, str]:
    """Both texts as inert HTML, each with the words the other does not say in ``<mark>``; the
    whitespace between words is kept as written and every piece is escaped."""
    pieces = [_SPACE.split(text), _SPACE.split(other)]  # words at even places, spaces between
    marked: list[set[int]] = [set(), set()]
    matcher = SequenceMatcher(None, pieces[0][::2], pieces[1][::2], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            marked[0].update(2 * i for i in range(i1, i2))
            marked[1].update(2 * j for j in range(j1, j2))
    first, second = (
        "".join(
            f"<mark>{escape_html(piece)}</mark>" if i in marks and piece else escape_html(piece)
            for i, piece in enumerate(words)
        )
        for words, marks in zip(pieces, marked, strict=True)
    )
    return first, second


def _norm(sentence: str) -> str:
    return " ".join(sentence.split())


def _similarity(a: str, b: str) -> float:
    matcher = SequenceMatcher(None, a.split(), b.split(), autojunk=False)
    if matcher.real_quick_ratio() < PAIR_SIMILARITY or matcher.quick_ratio() < PAIR_SIMILARITY:
        return 0.0
    return matcher.ratio()


def _pairs(left: list[str], right: list[str]) -> list[tuple[int, int]]:
    """The pairs ``(i, j)`` of a monotone alignment of ``left`` and ``right`` that maximises the
    summed similarity of its pairs, each at least :data:`PAIR_SIMILARITY`."""
    if not left or not right or len(left) * len(right) > MAX_PAIRING:
        return []
    n, m = len(left), len(right)
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            score = _similarity(left[i], right[j])
            paired = best[i + 1][j + 1] + score if score >= PAIR_SIMILARITY else 0.0
            best[i][j] = max(paired, best[i + 1][j], best[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if best[i][j] == best[i + 1][j]:
            i += 1
        elif best[i][j] == best[i][j + 1]:
            j += 1
        else:
            pairs.append((i, j))
            i, j = i + 1, j + 1
    return pairs


def _unpaired(left: list[str], right: list[str]) -> list[DiffRow]:
    if not left and not right:
        return []
    tinted = (
        "".join(f'<span class="pcf-unpaired">{escape_html(s)}</span>' for s in side)
        for side in (left, right)
    )
    return [DiffRow("unpaired", *tinted)]


def _paired_rows(left: list[str], right: list[str]) -> list[DiffRow]:
    """Rows of a stretch of changed sentences: pairs with their words marked, and the sentences
    between pairs unpaired."""
    rows: list[DiffRow] = []
    i = j = 0
    for pi, pj in _pairs(left, right):
        rows.extend(_unpaired(left[i:pi], right[j:pj]))
        rows.append(DiffRow("changed", *marked_words(left[pi], right[pj])))
        i, j = pi + 1, pj + 1
    rows.extend(_unpaired(left[i:], right[j:]))
    return rows
