"""A run's settings (``Run.settings``): what defines its calls, and what its judging recorded.

The store keeps them as one JSON object and parses it into :class:`RunSettings` when it reads
the run (its column type, ``pcf.store.models.RunSettingsJSON``), so every other module reads
typed fields; the names of the stored keys appear in this module alone. Every field has the
default that reads a run stored before the field existed, and a run writes only the keys it
was given (the stored JSON is the one earlier releases wrote). A key this release does not
know (written by a newer one) is kept and written back unchanged (``extra="allow"``), never
dropped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from pcf.weights import DEFAULT_WEIGHTS, Weights

UNVERSIONED = 1
"""The version of a stop recorded before stops carried one."""
DATASET_SEED = "dataset_seed"
"""``canonical_orders`` of a run planned with canonical orders from its dataset's seed."""


class _Stored(BaseModel):
    """A stored JSON object: immutable, unknown keys kept, written back with only the keys set."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def stored(self) -> dict[str, Any]:
        """The JSON object as stored: the keys read or given, unknown ones included."""
        return self.model_dump(mode="json", exclude_unset=True)


class Identity(_Stored):
    """The settings that define a run's calls: a run resumes only with the same values. The
    optional ones are written only when they differ from what a run without them did
    (:meth:`of`), so runs stored before them keep their identity."""

    protocol: str | None = None
    k: int | None = None
    schedule: str | None = None
    executions: int | None = None
    seed: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    ballpark_guard: bool | None = None
    structured_output: bool = True
    adaptive: str = "off"
    max_calls: int | None = None
    risk: float | None = None
    stop_on: list[float] | None = None

    @classmethod
    def of(
        cls,
        *,
        protocol: str,
        k: int,
        schedule: str,
        executions: int,
        seed: int,
        temperature: float,
        max_tokens: int,
        ballpark_guard: bool,
        structured_output: bool,
        adaptive: str,
        risk: float,
        max_calls: int | None,
        stop_on: Weights,
    ) -> Identity:
        """A new run's identity: structured output only when off; the adaptive policy and its
        ``max_calls`` only for an adaptive run, its ``risk`` only for ``confident``, its weights
        only when they are not the proposed ones."""
        identity = cls(
            protocol=protocol,
            k=k,
            schedule=schedule,
            executions=executions,
            seed=seed,
            temperature=temperature,
            max_tokens=max_tokens,
            ballpark_guard=ballpark_guard,
        )
        if not structured_output:
            identity = identity.model_copy(update={"structured_output": False})
        if adaptive != "off":
            identity = identity.model_copy(update={"adaptive": adaptive, "max_calls": max_calls})
        if adaptive == "confident":
            identity = identity.model_copy(update={"risk": risk})
        if adaptive != "off" and stop_on != DEFAULT_WEIGHTS:
            identity = identity.model_copy(update={"stop_on": list(stop_on.as_tuple())})
        return identity

    @property
    def weights(self) -> Weights:
        """The weights the run is decided with: those an adaptive run stopped on, else the
        proposed ones."""
        return Weights(*self.stop_on) if self.stop_on else DEFAULT_WEIGHTS

    def spec_values(self) -> dict[str, Any]:
        """The stored values as :class:`pcf.runs.spec.RunSpec` fields (``stop_on`` as
        :class:`~pcf.weights.Weights`); unknown keys are left out."""
        values = self.model_dump(exclude_unset=True, include=set(type(self).model_fields))
        if self.stop_on:
            values["stop_on"] = self.weights
        else:
            values.pop("stop_on", None)
        return values


class StopRecord(_Stored):
    """Where an adaptive run stopped one item (:class:`pcf.stopping.Stop`) and the stopping
    policies' version that stopped it."""

    calls: int
    reason: str
    winner: int
    version: int = UNVERSIONED


class Stopping(_Stored):
    """The stopping policy a finished adaptive run was finished with, the policy versions of
    its stops, and a ``confident`` run's calibration (:meth:`pcf.stopping.Calibration.as_dict`)."""

    policy: str | None = None
    risk: float | None = None
    stop_on: list[float] | None = None
    max_calls: int | None = None
    versions: list[int] = []
    calibration: dict[str, Any] | None = None


class Recorded(_Stored):
    """A replay run's provenance: what made the recording it answered from
    (:func:`pcf.judgments.recording_provenance`)."""

    backends: list[str] = []
    simulated: bool = False


class RunSettings(_Stored):
    """A run's settings, as stored in ``Run.settings``.

    ``identity``: what defines its calls. ``ballpark_guard``: whether APOC runs apply the
    ballpark guard. ``canonical_orders``: :data:`DATASET_SEED` for a run planned with canonical
    orders from the dataset's seed (unset: from the run's own). ``recorded``: a replay run's
    provenance. ``batch_limit`` and ``batch_max_cost_usd``: the limit and cost cap of a batch
    run's latest submit, for collecting. ``stops`` and ``stopping``: an adaptive run's stop of
    each item and the policy it finished with. ``answers_without_usage``: the answers a server
    gave without their token usage (the run's token totals are unknown from the first)."""

    identity: Identity = Identity()
    ballpark_guard: bool = True
    canonical_orders: str | None = None
    recorded: Recorded | None = None
    batch_limit: int | None = None
    batch_max_cost_usd: float | None = None
    stops: dict[str, StopRecord] = {}
    stopping: Stopping | None = None
    answers_without_usage: int = 0

    @classmethod
    def of_new_run(cls, identity: Identity, *, recorded: Recorded | None = None) -> RunSettings:
        """A new run's settings: its identity, planned with canonical orders from the dataset's
        seed, with a replay's ``recorded`` provenance."""
        settings = cls(
            identity=identity,
            ballpark_guard=bool(identity.ballpark_guard),
            canonical_orders=DATASET_SEED,
        )
        return settings if recorded is None else settings.model_copy(update={"recorded": recorded})

    @property
    def is_adaptive(self) -> bool:
        """Whether the run stops its items adaptively (``pcf judge --adaptive``)."""
        return self.identity.adaptive != "off"

    @property
    def is_replay_of_simulated(self) -> bool:
        """Whether the run replayed a recording that the simulated judge made."""
        return self.recorded is not None and self.recorded.simulated

    def is_simulated(self, backend: str) -> bool:
        """Whether the answers of a run of ``backend`` came from the simulated judge: its
        backend, or the recording a replay run answered from."""
        return backend == "simulated" or self.is_replay_of_simulated

    @property
    def usage(self) -> int:
        """How many answers came without their token usage: the run's token totals and cost
        are unknown when any did."""
        return self.answers_without_usage

    @property
    def plans_from_dataset_seed(self) -> bool:
        """Whether the run takes canonical orders from its dataset's seed (runs planned before
        that took them from their own)."""
        return self.canonical_orders is not None

    def with_stops(self, stops: Mapping[str, StopRecord], stopping: Stopping) -> RunSettings:
        """These settings with the run's ``stops`` and the policy it finished with."""
        return self.model_copy(update={"stops": dict(stops), "stopping": stopping})

    def with_batch(self, limit: int | None, max_cost_usd: float | None) -> RunSettings:
        """These settings with the limit and cost cap of the run's latest batch submit."""
        return self.model_copy(update={"batch_limit": limit, "batch_max_cost_usd": max_cost_usd})

    def with_unknown_usage(self, answers: int) -> RunSettings:
        """These settings with ``answers`` more answers that came without their usage."""
        return self.model_copy(update={"answers_without_usage": self.usage + answers})


def parse_run_settings(stored: Mapping[str, Any]) -> RunSettings:
    """The :class:`RunSettings` of a stored JSON object (ValueError naming the field that does
    not parse)."""
    return RunSettings.model_validate(stored)
