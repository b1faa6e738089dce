"""Judge backends behind one small protocol, and the factory that builds them by name."""

from __future__ import annotations

from pathlib import Path

from pcf.judges.base import CallContext, Judge, JudgeError, JudgeReply, JudgeRequest

BACKENDS = ("simulated", "openai", "anthropic", "replay")
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

__all__ = [
    "BACKENDS",
    "KEY_ENV",
    "CallContext",
    "Judge",
    "JudgeError",
    "JudgeReply",
    "JudgeRequest",
    "make_judge",
]


def make_judge(
    backend: str,
    model: str,
    *,
    base_url: str | None = None,
    replay_path: str | Path | None = None,
    timeout: float = 60.0,
    seed: int = 0,
) -> Judge:
    """Build a judge by backend name; keys come from the environment only.

    Args:
        backend: one of :data:`BACKENDS`.
        model: the model name (for ``simulated``, a label that is part of its seed).
        base_url: an OpenAI-compatible server (vLLM, Ollama, llama.cpp) or an Anthropic proxy.
        replay_path: the ``judgments.jsonl`` a ``replay`` judge answers from.
        timeout: seconds per request for real providers.
        seed: the simulated judge's seed.
    """
    if backend == "simulated":
        from pcf.judges.simulated import SimulatedJudge  # noqa: PLC0415 - light on purpose

        return SimulatedJudge(model, seed=seed)
    if backend == "openai":
        from pcf.judges.openai_judge import OpenAIJudge  # noqa: PLC0415 - SDK import is slow

        return OpenAIJudge(model, base_url=base_url, timeout=timeout)
    if backend == "anthropic":
        from pcf.judges.anthropic_judge import AnthropicJudge  # noqa: PLC0415 - SDK import is slow

        return AnthropicJudge(model, base_url=base_url, timeout=timeout)
    if backend == "replay":
        if replay_path is None:
            raise ValueError("the replay backend needs a judgments.jsonl (--replay PATH)")
        from pcf.judges.replay import ReplayJudge  # noqa: PLC0415

        return ReplayJudge(replay_path, model=model)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
