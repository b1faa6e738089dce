"""When two spellings name one person: the identity rule for members' emails, sign-ins and the
annotators of imported labels (docs/team.md, "One spelling per person").

Spellings are compared stripped, NFKC-normalised and case-folded (:func:`folded`). A spelling is
accepted (:func:`identity_key`) only when that form is its ASCII lowercase: normalisation may
change its ASCII case and nothing else. So an accepted spelling never reads as another person's
(the KELVIN SIGN of ``\\u212aate@example.com`` is no ``k``), and one that holds an invisible
character (a zero width space) is refused rather than taken for the visible name.
"""

from __future__ import annotations

import unicodedata

INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
"""Controls, format characters (zero width space, joiners, bidi marks), unassigned, private use
and surrogate code points, line and paragraph separators."""
INVISIBLE_MARKS = frozenset(
    {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0}
    | set(range(0x180B, 0x1810))
    | set(range(0xFE00, 0xFE10))
    | set(range(0xE0100, 0xE01F0))
)
"""Characters Unicode says to draw as nothing (default ignorable) outside those categories:
the grapheme joiner, Hangul fillers, Khmer inherent vowels and the variation selectors."""


class IdentityError(ValueError):
    """A spelling of a person that the identity rule refuses; the message says why."""


def folded(text: str) -> str:
    """``text`` as spellings of people are compared: stripped, NFKC-normalised, case-folded."""
    return unicodedata.normalize("NFKC", text.strip()).casefold()


def identity_key(text: str) -> str:
    """The one spelling of the person ``text`` names (:func:`folded`), which is then its ASCII
    lowercase.

    Raises:
        IdentityError: ``text`` holds an invisible character, or one that normalisation turns
            into another (a lookalike such as U+212A KELVIN SIGN, a ligature, a full-width or
            accented capital letter); the message names the character.
    """
    spelling = text.strip()
    for character in spelling:
        if _invisible(character):
            raise IdentityError(
                f"{spelling!r} holds an invisible character ({_named(character)}), with which "
                "it could pass for someone else's: remove it"
            )
    key = folded(spelling)
    if key == _ascii_lower(spelling):
        return key
    changed = next((c for c in spelling if folded(c) != _ascii_lower(c)), None)
    what = (
        f"{_named(changed)}, which reads as {folded(changed)!r}"
        if changed is not None
        else f"characters that normalisation combines into {key!r}"
    )
    raise IdentityError(
        f"{spelling!r} holds {what}: a spelling that normalisation changes beyond the case of "
        "A to Z could pass for someone else's"
    )


def _invisible(character: str) -> bool:
    category = unicodedata.category(character)
    return (
        category in INVISIBLE_CATEGORIES
        or (category == "Zs" and character != " ")
        or ord(character) in INVISIBLE_MARKS
    )


def _ascii_lower(text: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def _named(character: str) -> str:
    name = unicodedata.name(character, "an unnamed character")
    return f"U+{ord(character):04X} {name}"
