"""Judge backends behind one small protocol, the factory that builds them by name, and the
one parser of models named ``provider/name``."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple

from pcf.judges.base import KEY_ENV, Judge, key_names
from pcf.judges.servers import BASE_URL_ENV, judge_server, normalised_server

BACKENDS = ("simulated", "openai", "anthropic", "google", "azure", "replay")
LOCAL_SERVERS = {"ollama": "http://localhost:11434/v1", "vllm": "http://localhost:8000/v1"}
"""OpenAI-compatible servers by name, at their default addresses."""
PROVIDERS = (*BACKENDS, "openai-compatible", *LOCAL_SERVERS)
"""What ``provider/name`` may name (:func:`parse_model`)."""
DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_ENV = "PCF_TIMEOUT"
"""The variable that sets the seconds a judge waits for each answer (``--timeout`` wins)."""

__all__ = [
    "BACKENDS",
    "KEY_ENV",
    "default_timeout",
    "judge_label",
    "judge_server",
    "key_names",
    "make_judge",
    "parse_model",
    "self_hosted",
]


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


def default_timeout(timeout: float | None = None) -> float:
    """The seconds a judge waits for each answer: ``timeout``, else ``PCF_TIMEOUT``, else 60."""
    value: object = timeout
    if value is None:
        value = os.environ.get(TIMEOUT_ENV, "").strip() or DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)  # type: ignore[arg-type]  # a number or the variable's text
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        source = f"{TIMEOUT_ENV}={value!r}" if timeout is None else f"--timeout {value}"
        raise ValueError(f"{source}: give the seconds to wait for an answer, a positive number")
    return seconds


def self_hosted(backend: str, base_url: str | None) -> bool:
    """Whether calls go to an OpenAI-compatible server of the operator's own (``ollama/``,
    ``vllm/``, ``openai-compatible/``, or ``openai/`` with a base URL): a local server that may
    answer one request at a time, where a timed-out request still runs."""
    return backend == "openai" and judge_server(backend, base_url) is not None


def judge_label(backend: str, model: str, base_url: str | None) -> str:
    """How a run's judge is named wherever the run is described: ``provider/model``, and
    ``at SERVER`` for a server that is not the provider's own; a server of the operator's
    own is named ``ollama/``, ``vllm/`` (at their default addresses) or
    ``openai-compatible/``, never ``openai/`` as if it were OpenAI's API, e.g.
    ``ollama/llama3.1 at http://localhost:11434/v1``."""
    server = normalised_server(backend, base_url) if base_url and backend in BASE_URL_ENV else None
    if server is None:
        return f"{backend}/{model}"
    provider = backend
    if backend == "openai":
        local = {normalised_server(backend, url): name for name, url in LOCAL_SERVERS.items()}
        provider = local.get(server, "openai-compatible")
    return f"{provider}/{model} at {server}"


def make_judge(
    backend: str,
    model: str,
    *,
    base_url: str | None = None,
    replay_path: str | Path | None = None,
    seed: int = 0,
    api_key: str | None = None,
    timeout: float | None = None,
) -> Judge:
    """Build a judge by backend name; keys come from the environment, or ``api_key`` (a
    person's own for this judge only, never stored); a provider's judge waits ``timeout``
    seconds for an answer (:func:`default_timeout`)."""
    if backend == "simulated":
        from pcf.judges.simulated import SimulatedJudge  # noqa: PLC0415 - light on purpose

        return SimulatedJudge(model, seed=seed)
    options: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "seed": seed}
    if backend not in ("simulated", "replay"):
        options["timeout"] = default_timeout(timeout)

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
