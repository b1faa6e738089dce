"""Where the real public data in ``../shared/data`` lives (present in CI; tests that read it
skip cleanly where it is absent)."""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RB2 = SHARED / "rewardbench2" / "factuality-first120.jsonl"
JUDGEBENCH_PAIRS = (
    SHARED / "judgebench" / "data" / "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
)
JUDGEBENCH_CLAUDE_PAIRS = JUDGEBENCH_PAIRS.with_name(
    "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"
)
JUDGEBENCH_OUTPUTS = SHARED / "judgebench" / "outputs"
O1_MINI = JUDGEBENCH_OUTPUTS / (
    "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=arena_hard,"
    "judge_model=o1-mini-2024-09-12.jsonl"
)
HAIKU = JUDGEBENCH_OUTPUTS / (
    "dataset=judgebench,response_model=claude-3-5-sonnet-20240620,judge_name=arena_hard,"
    "judge_model=claude-3-haiku-20240307.jsonl"
)
LLMBAR = SHARED / "llmbar" / "Dataset" / "LLMBar"
