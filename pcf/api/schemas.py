"""The bodies the API takes and gives (Pydantic v2 models, so the OpenAPI document states
them): requests refuse unknown fields and values of the wrong type, naming the field."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from pcf.analysis.gate import MAX_FAILED, MIN_ITEMS
from pcf.analysis.paging import MAX_PAGE
from pcf.choices import SIMULATED_MODEL


def _no_bool(value: object) -> object:
    """``value``, unless it is true or false where a number belongs."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


NO_BOOL = BeforeValidator(_no_bool)
Name = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(min_length=1)]
Share = Annotated[float, Field(ge=0, le=1), NO_BOOL]


class Strict(BaseModel):
    """A request body: unknown fields are refused (and, as always in Pydantic, a number is no
    string, nor a word a number)."""

    model_config = ConfigDict(extra="forbid")


class Health(BaseModel):
    status: str


class Me(BaseModel):
    email: str
    role: str
    scope: str
    token_id: int
    permissions: list[str]


class DatasetIn(Strict):
    seed: Annotated[int, Field(ge=0, le=2**31), NO_BOOL] = 0


class DatasetOut(BaseModel):
    name: str
    items: int
    format: str
    seed: int
    created_at: datetime


class DatasetPage(BaseModel):
    datasets: list[DatasetOut]
    next_cursor: str | None


class CandidateIn(Strict):
    id: Text
    text: Text


class ItemIn(Strict):
    """An item in the ``items.jsonl`` schema."""

    item_id: Text
    prompt: Text
    candidates: list[CandidateIn]
    gold: str | None = None
    bucket: str | None = None
    metadata: dict[str, Any] = {}


class ItemsIn(Strict):
    items: Annotated[list[ItemIn], Field(min_length=1, max_length=MAX_PAGE)]


class ItemsAdded(BaseModel):
    added: int
    unchanged: int


class ItemOut(BaseModel):
    item_id: str
    prompt: str
    candidates: list[dict[str, str]]
    gold: str | None
    bucket: str | None


class ItemPage(BaseModel):
    items: list[ItemOut]
    next_cursor: str | None


class RunIn(Strict):
    """A run to start: ``pcf judge``'s settings (bounded)."""

    dataset: Name
    name: Name | None = None
    model: Name = SIMULATED_MODEL
    protocol: str = "pcf"
    k: Annotated[int, Field(ge=1, le=64), NO_BOOL] = 7
    schedule: str = "balanced"
    executions: Annotated[int, Field(ge=1, le=16), NO_BOOL] = 1
    seed: Annotated[int, Field(ge=0, le=2**31), NO_BOOL] = 0
    temperature: Annotated[float, Field(ge=0, le=2), NO_BOOL] = 0.0
    max_tokens: Annotated[int, Field(ge=1, le=100_000), NO_BOOL] = 2048
    limit: Annotated[int, Field(ge=1), NO_BOOL] | None = None
    max_cost: Annotated[float, Field(ge=0), NO_BOOL] | None = None


class RunAccepted(BaseModel):
    name: str
    started: bool
    location: str


class RunStatusOut(BaseModel):
    """A run's status; its totals are null while a submitted run is not stored yet."""

    name: str
    status: str
    done: int | None
    total: int | None
    error: str | None
    calls_made: int | None
    cache_hits: int | None
    failures: int | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    created_at: str
    finished_at: str | None


class EstimateOut(BaseModel):
    items: int
    planned: int
    stored: int
    cached: int
    to_call: int
    confirmations_max: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    resumes: bool
    batch_cost_usd: float | None
    conflict: str | None


class DecisionPage(BaseModel):
    decisions: list[dict[str, Any]]
    next_cursor: str | None


class CheckIn(Strict):
    """``pcf check``'s thresholds (the failed shares' always checked) and fewest items."""

    max_failed: Share = MAX_FAILED
    min_items: Annotated[int, Field(ge=1), NO_BOOL] = MIN_ITEMS
    max_order_unstable: Share | None = None
    max_position_driven: Share | None = None
    min_kappa: Annotated[float, Field(ge=-1, le=1), NO_BOOL] | None = None
    min_accuracy: Share | None = None


class CheckOut(BaseModel):
    run: str
    passed: bool
    checks: list[dict[str, Any]]


class LabelIn(Strict):
    """A label: ``answer`` a candidate id, ``none_correct`` or ``cannot_tell``."""

    label_id: Name
    item_id: Text
    answer: Text
    confidence: Share | None = None
    note: str = ""


class LabelsIn(Strict):
    labels: Annotated[list[LabelIn], Field(min_length=1, max_length=MAX_PAGE)]


class LabelSaved(BaseModel):
    label_id: str
    adjudication_id: int
    saved: bool


class LabelsOut(BaseModel):
    labels: list[LabelSaved]


class LabelRecords(BaseModel):
    labels: list[dict[str, Any]]


class GoldOut(BaseModel):
    gold: list[dict[str, Any]]
