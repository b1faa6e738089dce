"""What a run is: one frozen :class:`RunSpec` names the dataset, the judge and the protocol.

Protocols: ``direct`` (the canonical ordering alone), ``pcf`` (K scheduled orderings per
execution), ``repeated`` (K copies of the canonical ordering) and ``apoc`` (pairs: both
orders, then a keyed confirmation call only where it can change the verdict)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pcf.choices import POLICIES, SCHEDULES, SIMULATED_MODEL
from pcf.judges import BACKENDS
from pcf.weights import DEFAULT_WEIGHTS, Weights

if TYPE_CHECKING:
    from pcf.run_settings import Identity
    from pcf.store import Run

PROTOCOLS = ("direct", "pcf", "repeated", "apoc")
_PROTOCOL_SETTINGS: dict[str, dict[str, Any]] = {
    "direct": {"k": 1, "schedule": "balanced", "executions": 1},
    "repeated": {"schedule": "repeated"},
    "apoc": {"k": 3, "schedule": "apoc", "executions": 1},
    "pcf": {},
}


@dataclass(frozen=True)
class RunSpec:
    """A run; the protocol's fixed settings are applied on construction. The fields of its
    :meth:`identity`, with the dataset, backend, model and base URL, define the run; the rest
    may change between resumptions. ``timeout_s`` is the seconds a judge waits for each answer
    (None: ``PCF_TIMEOUT``, else 60). ``adaptive`` names a stopping policy; ``risk`` and
    ``max_calls`` are the ``confident`` policy's, ``stop_on`` the weights an item settles on.
    ``structured_output`` False sends no answer schema (for a server that rejects one)."""

    dataset: str
    name: str | None = None
    backend: str = "simulated"
    model: str = SIMULATED_MODEL
    base_url: str | None = None
    replay: Path | None = None
    protocol: str = "pcf"
    k: int = 7
    schedule: str = "balanced"
    executions: int = 1
    seed: int = 0
    temperature: float = 0.0
    max_tokens: int = 2048
    limit: int | None = None
    concurrency: int = 16
    timeout_s: float | None = None
    max_attempts: int = 4
    backoff_s: float = 1.0
    parse_retries: int = 1
    ballpark_guard: bool = True
    structured_output: bool = True
    adaptive: str = "off"
    risk: float = 0.01
    max_calls: int | None = None
    stop_on: Weights = DEFAULT_WEIGHTS

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; choose one of {PROTOCOLS}")
        if self.backend not in BACKENDS:
            raise ValueError(
                f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}"
            )
        if self.k < 1 or self.executions < 1 or self.concurrency < 1 or self.max_attempts < 1:
            raise ValueError("k, executions, concurrency and max_attempts must be at least 1")
        for key, value in _PROTOCOL_SETTINGS[self.protocol].items():
            object.__setattr__(self, key, value)  # a frozen dataclass sets fields this way
        if self.protocol == "pcf" and self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {SCHEDULES}")
        if self.adaptive not in POLICIES:
            raise ValueError(f"unknown adaptive policy {self.adaptive!r}; choose one of {POLICIES}")
        if self.adaptive != "off" and self.protocol not in ("pcf", "repeated"):
            raise ValueError(f"adaptive stopping is for pcf and repeated runs, not {self.protocol}")
        if not 0 < self.risk < 1:
            raise ValueError(f"risk must be between 0 and 1, got {self.risk}")
        if self.max_calls is not None and (self.adaptive != "confident" or self.max_calls < 1):
            raise ValueError("max_calls is a positive number of calls, for the confident policy")
        if self.stop_on != DEFAULT_WEIGHTS and self.adaptive == "off":
            raise ValueError(
                "stop_on names the weights an adaptive run stops on: choose an adaptive policy"
            )

    @classmethod
    def from_run(cls, run: Run, dataset: str) -> RunSpec:
        """The spec that made stored ``run`` of ``dataset`` (other settings at their defaults)."""
        return cls(
            dataset,
            run.name,
            backend=run.backend,
            model=run.model,
            base_url=run.base_url,
            limit=run.settings.batch_limit,
            **run.settings.identity.spec_values(),
        )

    @property
    def run_name(self) -> str:
        """The run's name: the one given, or one that encodes the settings."""
        if self.name:
            return self.name
        settings = f"k{self.k}-{self.schedule}-x{self.executions}-s{self.seed}"
        return f"{self.dataset}/{self.protocol}/{self.backend}/{self.model}/{settings}"

    def identity(self) -> Identity:
        """The settings that define the run's calls (:meth:`pcf.run_settings.Identity.of`)."""
        from pcf.run_settings import Identity  # noqa: PLC0415 - `pcf --help` stays light

        return Identity.of(
            protocol=self.protocol,
            k=self.k,
            schedule=self.schedule,
            executions=self.executions,
            seed=self.seed,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            ballpark_guard=self.ballpark_guard,
            structured_output=self.structured_output,
            adaptive=self.adaptive,
            risk=self.risk,
            max_calls=self.max_calls,
            stop_on=self.stop_on,
        )
