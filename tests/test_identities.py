"""The identity rule: spellings compared stripped, NFKC-normalised and case-folded; a spelling
that normalisation changes beyond ASCII case, or that hides an invisible character, is refused
with the character named."""

from __future__ import annotations

import re

import pytest

from pcf.identities import IdentityError, folded, identity_key


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("kate@example.com", "kate@example.com"),
        (" KATE@Example.COM\n", "kate@example.com"),
        ("josé@example.com", "josé@example.com"),  # precomposed, lower case: itself
        ("Local Tester", "local tester"),
        ("rater-1", "rater-1"),
    ],
)
def test_a_spelling_is_one_person_in_any_ascii_case(spelling: str, key: str):
    assert identity_key(spelling) == key == folded(spelling)


@pytest.mark.parametrize(
    ("spelling", "why"),
    [
        ("\u212aate@example.com", "U+212A KELVIN SIGN, which reads as 'k'"),
        ("\uff4bate@example.com", "U+FF4B FULLWIDTH LATIN SMALL LETTER K, which reads as 'k'"),
        ("\ufb01le@example.com", "U+FB01 LATIN SMALL LIGATURE FI, which reads as 'fi'"),
        ("stra\u00dfe@example.com", "U+00DF LATIN SMALL LETTER SHARP S, which reads as 'ss'"),
        ("JOS\u00c9@example.com", "U+00C9 LATIN CAPITAL LETTER E WITH ACUTE, which reads as 'é'"),
        ("jose\u0301@example.com", "characters that normalisation combines into 'josé@"),
        ("kate@example.com\u200b", "invisible character (U+200B ZERO WIDTH SPACE)"),
        ("ka\u00adte@example.com", "invisible character (U+00AD SOFT HYPHEN)"),
        ("kate\ufe0f@example.com", "invisible character (U+FE0F VARIATION SELECTOR-16)"),
        ("kate\u202e@example.com", "RIGHT-TO-LEFT OVERRIDE"),
        ("kate\u00a0smith", "NO-BREAK SPACE"),
    ],
)
def test_a_lookalike_or_hidden_character_is_refused_by_name(spelling: str, why: str):
    with pytest.raises(IdentityError, match=re.escape(why)):
        identity_key(spelling)
