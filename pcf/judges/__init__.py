"""Judge backends behind one small protocol, and the factory that builds them by name."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from pcf.judges.base import KEY_ENV, CallContext, Judge, JudgeError, JudgeReply, JudgeRequest

BACKENDS = ("simulated", "openai", "anthropic", "replay")
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
"""The variables the providers' SDKs read for a server when no base URL is given."""
OWN_SERVERS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_PORTS = {"http": 80, "https": 443}

__all__ = [
    "BACKENDS",
    "KEY_ENV",
    "CallContext",
    "Judge",
    "JudgeError",
    "JudgeReply",
    "JudgeRequest",
    "judge_server",
    "make_judge",
]


def judge_server(backend: str, base_url: str | None) -> str | None:
    """The server a provider backend's calls go to, when it is not the provider's own.

    The server is ``base_url``, else the SDK's variable (:data:`BASE_URL_ENV`), normalised:
    scheme and host in lower case, the scheme's default port left out, the path without a
    trailing slash, and no user, password, query or fragment (where a credential could hide).
    None for the provider's own endpoint and for backends that call no server.
    """
    url = base_url or os.environ.get(BASE_URL_ENV.get(backend, ""))
    if backend not in OWN_SERVERS or not url:
        return None
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # not a port number: the SDK cannot call it either
        port = None
    host = f"[{host}]" if ":" in host else host
    address = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    server = f"{scheme}://{address}{parts.path.rstrip('/')}"
    return None if server == OWN_SERVERS[backend] else server


def make_judge(
    backend: str,
    model: str,
    *,
    base_url: str | None = None,
    replay_path: str | Path | None = None,
    seed: int = 0,
    api_key: str | None = None,
) -> Judge:
    """Build a judge by backend name; keys come from the environment, or ``api_key``.

    Args:
        backend: one of :data:`BACKENDS`.
        model: the model name (for ``simulated``, a label that is part of its seed).
        base_url: an OpenAI-compatible server (vLLM, Ollama, llama.cpp) or an Anthropic proxy.
        api_key: a key given for this judge only (a person's own, typed for one run): used
            instead of the environment's, never stored.
        replay_path: the ``judgments.jsonl`` a ``replay`` judge answers from.
        seed: the simulated judge's seed.
    """
    if backend == "simulated":
        from pcf.judges.simulated import SimulatedJudge  # noqa: PLC0415 - light on purpose

        return SimulatedJudge(model, seed=seed)
    if backend == "openai":
        from pcf.judges.openai_judge import OpenAIJudge  # noqa: PLC0415 - SDK import is slow

        return OpenAIJudge(model, base_url=base_url, api_key=api_key)
    if backend == "anthropic":
        from pcf.judges.anthropic_judge import AnthropicJudge  # noqa: PLC0415 - SDK import is slow

        return AnthropicJudge(model, base_url=base_url, api_key=api_key)
    if backend == "replay":
        if replay_path is None:
            raise ValueError("the replay backend needs a judgments.jsonl recording to answer from")
        from pcf.judges.replay import ReplayJudge  # noqa: PLC0415

        return ReplayJudge(replay_path, model=model)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
