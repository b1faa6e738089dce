"""Tests for pcf/judges/base.py: sound usage counts and the one key-redaction function."""

from __future__ import annotations

import pytest

from pcf.judges.base import (
    MAX_CALL_TOKENS,
    REDACTED,
    JudgeReply,
    configured_keys,
    redact,
    usage_count,
)

OPENAI_SHAPED = "sk-proj-" + "Ab3_x-" * 8
ANTHROPIC_SHAPED = "sk-ant-api03-" + "Zz9" * 20


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1234, 1234),
        (0, 0),
        (-1, 0),
        (-(10**20), 0),
        (10**20, MAX_CALL_TOKENS),
        (2**62, MAX_CALL_TOKENS),
        (MAX_CALL_TOKENS, MAX_CALL_TOKENS),
        (True, None),
        (12.0, None),
        ("12", None),
        (None, None),
    ],
)
def test_usage_counts_are_ints_clamped_to_a_sane_range_else_unknown(
    value: object, expected: int | None
) -> None:
    assert usage_count(value) == expected


def test_a_reply_is_sound_whoever_built_it() -> None:
    reply = JudgeReply("{}", input_tokens=-5, output_tokens=2**62)
    assert (reply.input_tokens, reply.output_tokens) == (0, MAX_CALL_TOKENS)


def test_the_environments_keys_and_key_shaped_strings_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "local-openai-key-1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "local-anthropic-key-2")
    monkeypatch.setenv("GEMINI_API_KEY", "local-gemini-key-3")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "0123456789abcdef0123456789abcdef")
    google_shaped = "AIza" + "Sy0123456789abcdefghijklmnopqrstuvw"
    text = (
        "keys: local-openai-key-1, local-anthropic-key-2, local-gemini-key-3, "
        "0123456789abcdef0123456789abcdef; "
        f"others: {OPENAI_SHAPED}, {ANTHROPIC_SHAPED} and {google_shaped}; given: my-own-secret."
    )
    keys = f"keys: {REDACTED}, {REDACTED}, {REDACTED}, {REDACTED}"
    others = f"others: {REDACTED}, {REDACTED} and {REDACTED}"
    assert redact(text) == f"{keys}; {others}; given: my-own-secret."
    assert redact(text, [*configured_keys(), "my-own-secret"]) == (
        f"{keys}; {others}; given: {REDACTED}."
    )
    assert redact(text, ["my-own-secret"]).startswith("keys: local-openai-key-1,")


def test_short_key_values_and_ordinary_text_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "abc")
    for name in ("ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    text = "abc: the task-list of sk-short and risk-averse answers"
    assert configured_keys() == []
    assert redact(text) == redact(text, ["", None]) == text
