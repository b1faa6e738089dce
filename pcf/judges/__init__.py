"""Judge backends behind one small protocol, the factory that builds them by name, and the
one parser of models named ``provider/name``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from pcf.judges.base import KEY_ENV, Judge, key_names

BACKENDS = ("simulated", "openai", "anthropic", "google", "azure", "replay")
BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "google": "GOOGLE_GEMINI_BASE_URL",
    "azure": "AZURE_OPENAI_ENDPOINT",
}
"""The variables the providers' SDKs read for a server when no base URL is given."""
OWN_SERVERS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "google": "https://generativelanguage.googleapis.com",
}
"""The providers' own endpoints (an Azure endpoint is always the operator's resource)."""
DEFAULT_PORTS = {"http": 80, "https": 443}
LOCAL_SERVERS = {"ollama": "http://localhost:11434/v1", "vllm": "http://localhost:8000/v1"}
"""OpenAI-compatible servers by name, at their default addresses."""
PROVIDERS = (*BACKENDS, "openai-compatible", *LOCAL_SERVERS)
"""What ``provider/name`` may name (:func:`parse_model`)."""

__all__ = ["BACKENDS", "KEY_ENV", "judge_server", "key_names", "make_judge", "parse_model"]


class JudgeModel(NamedTuple):
    """A model named ``provider/name``: the backend that calls it, its name and its server."""

    backend: str
    model: str
    base_url: str | None


def parse_model(
    name: str, *, backend: str | None = None, base_url: str | None = None
) -> JudgeModel:
    """The judge ``provider/name`` names, e.g. ``openai/gpt-4o-mini`` or ``ollama/llama3.1``
    (OpenAI-compatible servers are the ``openai`` backend); with ``backend`` (the older
    ``--backend``), or with no ``/``, ``name`` is the model as it is."""
    provider, slash, model = name.partition("/")
    if backend is not None or not slash:
        return JudgeModel(backend or "simulated", name, base_url)
    if provider not in PROVIDERS or not model:
        raise ValueError(
            f"model {name!r}: name it provider/name, the provider one of {', '.join(PROVIDERS)} "
            "(e.g. openai/gpt-4o-mini)"
        )
    if provider == "openai-compatible" and not (base_url or os.environ.get(BASE_URL_ENV["openai"])):
        raise ValueError(f"model {name!r}: give the server's base URL (--base-url)")
    if provider in BACKENDS:
        return JudgeModel(provider, model, base_url)
    return JudgeModel("openai", model, base_url or LOCAL_SERVERS.get(provider))


def judge_server(backend: str, base_url: str | None) -> str | None:
    """The server a provider backend's calls go to (``base_url``, else the SDK's variable),
    normalised, without user, password, query or fragment (where a credential could hide);
    None for the provider's own endpoint and for backends that call no server."""
    url = base_url or os.environ.get(BASE_URL_ENV.get(backend, ""))
    if backend not in BASE_URL_ENV or not url:
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
    return None if server == OWN_SERVERS.get(backend) else server


def make_judge(
    backend: str,
    model: str,
    *,
    base_url: str | None = None,
    replay_path: str | Path | None = None,
    seed: int = 0,
    api_key: str | None = None,
) -> Judge:
    """Build a judge by backend name; keys come from the environment, or ``api_key`` (a
    person's own for this judge only, never stored)."""
    if backend == "simulated":
        from pcf.judges.simulated import SimulatedJudge  # noqa: PLC0415 - light on purpose

        return SimulatedJudge(model, seed=seed)
    options: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "seed": seed}

    if backend in ("openai", "azure"):
        from pcf.judges.openai_judge import AzureJudge, OpenAIJudge  # noqa: PLC0415 - slow import

        return (OpenAIJudge if backend == "openai" else AzureJudge)(model, **options)
    if backend == "anthropic":
        from pcf.judges.anthropic_judge import AnthropicJudge  # noqa: PLC0415 - SDK import is slow

        return AnthropicJudge(model, **options)
    if backend == "google":
        try:
            from pcf.judges.google_judge import GoogleJudge  # noqa: PLC0415 - an optional extra
        except ImportError as exc:
            raise ValueError(
                "google/ models need the google-genai SDK: pip install 'pcf-review[google]'"
            ) from exc
        return GoogleJudge(model, **options)
    if backend == "replay":
        if replay_path is None:
            raise ValueError("the replay backend needs a judgments.jsonl recording to answer from")
        from pcf.judges.replay import ReplayJudge  # noqa: PLC0415

        return ReplayJudge(replay_path, model=model)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
