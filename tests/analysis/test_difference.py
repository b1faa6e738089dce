"""The difference of two answers: sentences aligned first, words marked inside pairs only."""

from __future__ import annotations

import re
from html import unescape

from hypothesis import given
from hypothesis import strategies as st

from pcf.analysis.difference import (
    aligned_difference,
    marked_words,
    sentences,
)

ESSAY = (
    "The Treaty of Westphalia was signed in 1648. It ended the Thirty Years' War in the Holy "
    "Roman Empire. Historians often call it the start of the modern system of sovereign states. "
    "Its negotiations took place in Osnabrück and Münster.\n"
    "Delegates from many states attended."
)
OTHER = (
    "The Treaty of Westphalia was signed in 1658. It ended the Thirty Years' War in the Holy "
    "Roman Empire. Some scholars doubt that it founded the modern state system at all. "
    "Its negotiations took place in Osnabrück and in Münster.\n"
    "Delegates from many states attended."
)


def bare(html: str) -> str:
    """The text of a side of a row, without its marks and tints."""
    return unescape(re.sub(r"</?(mark|span)[^>]*>", "", html))


def test_sentences_cut_after_ends_and_at_line_breaks_and_join_to_the_text():
    text = 'He said "stop." Then? Yes!  e.g.3.14 ok\nNext line\n\n  last'
    assert sentences(text) == [
        'He said "stop." ',
        "Then? ",
        "Yes!  ",
        "e.g.3.14 ok\n",
        "Next line\n\n  ",
        "last",
    ]


def test_only_the_changed_words_of_a_paired_sentence_are_marked():
    rows = aligned_difference(ESSAY, OTHER)
    assert [r.kind for r in rows] == ["changed", "same", "unpaired", "changed", "same"]
    assert "<mark>1648.</mark>" in rows[0].left
    assert "<mark>1658.</mark>" in rows[0].right
    assert rows[0].left.count("<mark>") == rows[0].right.count("<mark>") == 1
    assert "<mark>" not in rows[1].left + rows[2].left + rows[2].right + rows[4].right
    assert rows[2].left.startswith('<span class="pcf-unpaired">Historians')
    assert rows[3].right.count("<mark>") == 1  # "in" added before Münster
    assert "".join(bare(r.left) for r in rows) == ESSAY
    assert "".join(bare(r.right) for r in rows) == OTHER


def test_two_essays_that_share_little_mark_no_word_one_by_one():
    """The case that marked nearly every word: two long answers in other words throughout."""
    left = " ".join(f"Point {i} is that the river floods every spring." for i in range(40))
    right = " ".join(f"Claim {i}: rain in April swells lakes nearby." for i in range(40))
    rows = aligned_difference(left, right)
    assert {r.kind for r in rows} == {"unpaired"}
    assert not any("<mark>" in r.left + r.right for r in rows)


def test_an_added_sentence_leaves_the_rest_aligned():
    first = "One. Two. Three."
    rows = aligned_difference(first, "One. Two and a half. Two. Three.")
    assert [(r.kind, bare(r.left), bare(r.right)) for r in rows] == [
        ("same", "One. ", "One. "),
        ("unpaired", "", "Two and a half. "),
        ("same", "Two. ", "Two. "),
        ("same", "Three.", "Three."),
    ]


def test_the_marked_words_are_the_words_one_text_says_and_the_other_does_not():
    first, second = marked_words(
        "Here's the list of years\n<b>2000</b> to 2010", "Here's a list of years 2000 to 2010"
    )
    assert first == (
        "Here&#x27;s <mark>the</mark> list of years\n<mark>&lt;b&gt;2000&lt;/b&gt;</mark> to 2010"
    )
    assert second == "Here&#x27;s <mark>a</mark> list of years <mark>2000</mark> to 2010"


TEXTS = st.text(alphabet=st.sampled_from(list("ab <>&.!?\n\"' ")), max_size=80) | st.text()


@given(TEXTS, TEXTS)
def test_each_side_is_its_text_escaped_with_marks_and_tints_and_nothing_else(a, b):
    rows = aligned_difference(a, b)
    for text, side in ((a, [r.left for r in rows]), (b, [r.right for r in rows])):
        html = "".join(side)
        tags = re.sub(r"</?mark>|<span class=\"pcf-unpaired\">|</span>", "", html)
        assert "<" not in tags
        assert unescape(tags) == text
