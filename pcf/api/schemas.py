"""The bodies the API takes and gives (Pydantic v2 models, so the OpenAPI document states
them): requests refuse unknown fields and values of the wrong type, naming the field."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from pcf.analysis.escalate import SMALLEST_RISK
from pcf.analysis.gate import MAX_FAILED, MIN_ITEMS
from pcf.analysis.paging import MAX_PAGE
from pcf.choices import SIMULATED_MODEL
from pcf.labelling.plan import MAX_GUIDELINES_CHARS, MAX_LABELS_PER_ITEM


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
    gold: str | None = Field(description="null also without the right to see results")
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
    attempts: int | None = Field(description="requests sent to the judge, retries included")
    cache_hits: int | None
    failures: int | None
    cost_usd: float | None = Field(
        description="USD spent; null while not stored, or when the model is unpriced (never 0)"
    )
    input_tokens: int | None
    output_tokens: int | None
    created_at: str
    finished_at: str | None


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


class EscalateIn(Strict):
    """``pcf escalate``'s options: ``queue`` sends the escalated items to the labelling queue."""

    alpha: Annotated[float, Field(ge=SMALLEST_RISK, lt=1), NO_BOOL] = 0.1
    delta: Annotated[float, Field(ge=SMALLEST_RISK, lt=1), NO_BOOL] = 0.1
    signal: Literal["top_agreement", "margin", "calibrated"] = "top_agreement"
    calibration_labels: Literal["gold", "humans"] = "gold"
    queue: bool = False


class EscalateOut(BaseModel):
    """``pcf escalate``'s JSON (its figures beside these fields), and whether it was queued."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="null")

    run: str
    signal: str
    alpha: float
    delta: float
    threshold: float | None
    decided: list[str]
    escalated: list[str]
    queued: bool


class ReportOut(BaseModel):
    """``report.json``: every table of the report as records, and what each table is."""

    title: str
    simulated: bool
    tables: dict[str, list[dict[str, Any]]]
    about: dict[str, list[dict[str, Any]]]


class PlanOut(BaseModel):
    """A dataset's labelling plan (``escalated``: the items ``pcf escalate --queue`` sent)."""

    labels_per_item: int
    adaptive: bool
    gold_rule: str
    guidelines: str
    calibration_share: float
    escalated: list[str]


class PlanIn(Strict):
    """``pcf labelling set``'s settings; a field left out stays as it is."""

    labels_per_item: Annotated[int, Field(ge=1, le=MAX_LABELS_PER_ITEM), NO_BOOL] | None = None
    adaptive: bool | None = None
    gold_rule: Literal["unanimous", "majority", "dawid_skene"] | None = None
    guidelines: Annotated[str, Field(max_length=MAX_GUIDELINES_CHARS)] | None = None
    calibration_share: Share | None = None


class ClaimIn(Strict):
    """Whose doubt orders the queue (a run of the dataset; none: the dataset's order), and
    items to serve last (skipped before)."""

    run: Name | None = None
    skip: Annotated[list[Text], Field(max_length=MAX_PAGE)] = []


class QueuedItem(BaseModel):
    """An item held for the caller: its candidates in the order shown to them (no gold)."""

    item_id: str
    prompt: str
    candidates: list[dict[str, str]]
    held_until: datetime


class ClaimOut(BaseModel):
    """The caller's next item (null when their queue is empty), and how many items their
    queue holds with it."""

    item: QueuedItem | None
    queue: int


class AssignIn(Strict):
    """``pcf labels assign``: give ``to`` the ``items`` named, else the ``first`` N (or the
    ``share`` of the dataset's) items in file order nobody has or labelled; ``remove`` takes
    back every item assigned to ``to`` instead."""

    to: Name
    items: Annotated[list[Text], Field(max_length=MAX_PAGE)] = []
    first: Annotated[int, Field(ge=0), NO_BOOL] = 0
    share: Share = 0.0
    remove: bool = False


class AssignOut(BaseModel):
    to: str
    assigned: list[str]
    removed: int
