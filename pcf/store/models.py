"""The tables: one SQLModel class per table, no relationships (queries join explicitly).
Timestamps are :class:`sqlmodel.UTCDateTime`: naive datetimes are refused, and reads are aware
UTC even on SQLite. A numbered ``id`` is typed ``int``: it is assigned at flush, read after.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import JSON, BigInteger, Column, Index, LargeBinary, UniqueConstraint, column, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, Session, SQLModel, UTCDateTime

from pcf.run_settings import RunSettings, parse_run_settings
from pcf.store.compressed import CompressedJSON, CompressedText
from pcf.store.requests import request_digest

RowT = TypeVar("RowT", bound=SQLModel)


class RunStatus(StrEnum):
    """A run's stored status (``Run.status``)."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    CAPPED = "capped"  # stopped at its cost cap; a higher cap resumes it
    BATCH = "batch"  # has provider batches whose results are not stored yet
    FAILED = "failed"


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def saved(row: RowT, *, session: Session) -> RowT:
    """``row`` added to the session and flushed (a new row gets its id)."""
    session.add(row)
    session.flush()
    return row


def insert_new(table: type[SQLModel], values: Any, *, session: Session) -> None:
    """INSERT ``values`` (a row's, or a list of rows'), leaving out those whose key is taken."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(table).values(values).on_conflict_do_nothing())


def _created_at() -> Any:
    return Field(default_factory=utc_now, sa_type=UTCDateTime, nullable=False)


def _json(default_factory: type[list] | type[dict], *, name: str | None = None) -> Any:
    column = Column(JSON, nullable=False) if name is None else Column(name, JSON, nullable=False)
    return Field(default_factory=default_factory, sa_column=column)


class Dataset(SQLModel, table=True):
    """An imported set of items."""

    id: int = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    format: str
    source_path: str | None = None
    seed: int = 0
    created_at: datetime = _created_at()
    n_items: int = 0


class ItemRow(SQLModel, table=True):
    """One item of a dataset; ``item_key`` is its own id, ``position`` its file order, and
    ``item_metadata`` the ``metadata`` column (SQLModel owns that attribute name)."""

    __tablename__ = "item"
    __table_args__ = (
        UniqueConstraint("dataset_id", "item_key"),
        Index("ix_item_dataset_position", "dataset_id", "position"),
    )

    id: int = Field(default=None, primary_key=True)
    dataset_id: int = Field(foreign_key="dataset.id")
    item_key: str
    position: int
    prompt: str
    gold: str | None = None
    bucket: str | None = None
    item_metadata: dict[str, Any] = _json(dict, name="metadata")


class CandidateRow(SQLModel, table=True):
    """One candidate answer; ``position`` is its listing order in the item."""

    __tablename__ = "candidate"
    __table_args__ = (UniqueConstraint("item_id", "candidate_key"),)

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id")
    candidate_key: str
    position: int
    text: str


class RunSettingsJSON(TypeDecorator[RunSettings]):
    """A JSON column read as :class:`~pcf.run_settings.RunSettings`: parsed once, when the row
    is read, and written as the keys it holds (:meth:`~pcf.run_settings.RunSettings.stored`)."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: RunSettings | None, dialect: Any) -> dict[str, Any]:
        return (value or RunSettings()).stored()

    def process_result_value(self, value: dict[str, Any] | None, dialect: Any) -> RunSettings:
        return parse_run_settings(value or {})


class Run(SQLModel, table=True):
    """One protocol run of a judge over a dataset, its settings (never API keys, typed:
    :class:`~pcf.run_settings.RunSettings`) and totals."""

    id: int = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    dataset_id: int = Field(foreign_key="dataset.id")
    protocol: str
    backend: str
    model: str
    base_url: str | None = None
    k: int
    schedule: str
    seed: int = 0
    executions: int = 1
    weights: dict[str, float] = _json(dict)
    settings: RunSettings = Field(
        default_factory=RunSettings, sa_column=Column(RunSettingsJSON, nullable=False)
    )
    status: str = RunStatus.PENDING.value
    created_at: datetime = _created_at()
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # Totals over every call: 64-bit, as a run can pass PostgreSQL's 32-bit INTEGER.
    input_tokens: int = Field(default=0, sa_type=BigInteger)
    output_tokens: int = Field(default=0, sa_type=BigInteger)
    cost_usd: float = 0.0
    calls_made: int = 0
    cache_hits: int = 0
    failures: int = 0


class RequestTemplate(SQLModel, table=True):
    """What the requests of many calls share, stored once (:mod:`pcf.store.requests`): one row
    per ``digest`` of the rest; ``sampling`` as sent (JSON keeps ``1`` and ``1.0`` apart)."""

    __tablename__ = "request_template"

    id: int = Field(default=None, primary_key=True)
    digest: str = Field(unique=True)
    backend: str
    model: str
    system: str
    output_schema: dict[str, Any] = _json(dict)
    sampling: dict[str, Any] = _json(dict)
    user_frame: list[Any] = _json(list)


class Call(SQLModel, table=True):
    """One judge call of a run, kept whole for audit: its request (a template filled with the
    item's texts, and the SHA-256 of the request sent), the raw response (compressed) and the
    parsed ``judgment``, by candidate ids. ``cached_from``: the call whose answer the cache
    reused. The unique constraint's index also serves "calls of a run"."""

    __table_args__ = (
        UniqueConstraint("run_id", "item_id", "execution", "call_index"),
        Index("ix_call_content_key", "content_key"),
    )

    id: int = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    item_id: int = Field(foreign_key="item.id")
    execution: int = 0
    call_index: int
    repeat_index: int = 0
    order: list[str] = _json(list)
    keys: list[str] = _json(list)
    content_key: str
    template_id: int = Field(foreign_key="request_template.id")
    request_digest: str
    response_text: str | None = Field(default=None, sa_type=CompressedText)
    response_raw: dict[str, Any] | None = Field(default=None, sa_type=CompressedJSON)
    ok: bool
    error: str | None = None
    repaired: list[str] = _json(list)
    judgment: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSON(none_as_null=True), nullable=True)
    )
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    attempts: int = 1
    cached_from: int | None = Field(default=None, foreign_key="call.id")
    created_at: datetime = _created_at()

    def verdict(self) -> str | None:
        """The pairwise verdict of an ok call (a candidate id or ``tie``), else None."""
        return (self.judgment or {}).get("verdict") if self.ok else None

    def sent(self, request: dict[str, Any]) -> bool:
        """Whether ``request`` is the one this call sent: it hashes to ``request_digest``."""
        return request_digest(request) == self.request_digest


class ReplacedCall(SQLModel, table=True):
    """An answer that is not (or no longer) its call's, kept whole for audit: ``reason`` is
    ``retried`` (asked again by ``--retry-failed``) or ``duplicate`` (a paid answer to a call
    stored already, e.g. by a second writer); ``values`` are the call's column values."""

    __tablename__ = "replaced_call"

    id: int = Field(default=None, primary_key=True)
    call_id: int = Field(foreign_key="call.id", index=True)
    reason: str
    replaced_at: datetime = _created_at()
    values: dict[str, Any] = _json(dict)


class RunResult(SQLModel, table=True):
    """A result derived from a run (decision table, packed judgments, figures against labels),
    kept for the ``revision`` of the calls (and labels) it was computed from; a stale one is
    computed again. ``data`` is in its reader's form (Parquet, NumPy ``.npz``, JSON)."""

    __tablename__ = "run_result"

    run_id: int = Field(foreign_key="run.id", primary_key=True)
    name: str = Field(primary_key=True)
    revision: str
    computed_at: datetime = _created_at()
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class RunLease(SQLModel, table=True):
    """Who is judging the run ``run_name`` now, one process at a time; renewed while it runs,
    deleted when it stops. A lease past ``expires_at`` or whose process is gone is dead."""

    __tablename__ = "run_lease"

    run_name: str = Field(primary_key=True)
    holder: str
    host: str
    pid: int
    acquired_at: datetime = _created_at()
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class KeyClaim(SQLModel, table=True):
    """A request being answered now, by content key, and who asks it: another run needing the
    answer waits instead of paying again. Renewed and ended like a :class:`RunLease`."""

    __tablename__ = "key_claim"

    content_key: str = Field(primary_key=True)
    holder: str = Field(index=True)
    host: str
    pid: int
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class ProviderBatch(SQLModel, table=True):
    """One submission of a run's calls to a provider's batch API; ``state`` is ``submitting``
    (before the provider was asked: the next submit finds or finishes a killed one),
    ``submitted`` or ``collected``. ``custom_ids`` are the content keys sent."""

    __tablename__ = "provider_batch"

    id: int = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    token: str = Field(unique=True)
    state: str = "submitting"
    file_id: str | None = None
    batch_id: str | None = None
    custom_ids: list[str] = _json(list)
    created_at: datetime = _created_at()
    submitted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    collected_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    provider_status: str | None = None


class Spend(SQLModel, table=True):
    """One request's price in its run's spend (:mod:`pcf.store.spend`): its reservation, the
    upper bound committed before it left (``settled`` false), replaced by the bill once it is
    answered. A request that never answered (a timeout, a lost connection, a process that died)
    stays counted at its reservation. ``provider_batch_id``: a batch submission's requests, as
    one row; tokens: those billed (of a settled row) or reserved."""

    id: int = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    provider_batch_id: int | None = Field(default=None, foreign_key="provider_batch.id")
    usd: float
    input_tokens: int = Field(default=0, sa_type=BigInteger)
    output_tokens: int = Field(default=0, sa_type=BigInteger)
    settled: bool = False


ADJUDICATION_CHAIN = Index(
    "ux_adjudication_chain",
    "item_id",
    "annotator",
    func.coalesce(column("supersedes"), 0),
    unique=True,
)
"""One successor per label (and one first label) per item and annotator: the history stays a
line when two saves race."""


class Adjudication(SQLModel, table=True):
    """A human label for an item, never updated: a correction is a new row that
    ``supersedes`` the annotator's previous one. ``source``: where an imported label came from."""

    __table_args__ = (
        Index("ix_adjudication_item_annotator", "item_id", "annotator"),
        ADJUDICATION_CHAIN,
    )

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id")
    annotator: str
    created_at: datetime = _created_at()
    choice: str
    confidence: float | None = None
    tags: list[str] = _json(list)
    notes: str = ""
    supersedes: int | None = Field(default=None, foreign_key="adjudication.id")
    source: str | None = None


class Member(SQLModel, table=True):
    """A person who may use the app, by the email their sign-in provider vouches for, and
    their role (:mod:`pcf.access`). ``issuer`` and ``subject``: the account of their first
    sign-in, the only one that signs in as them. The local person of local mode has ``local``
    set and their name as ``email``."""

    email: str = Field(primary_key=True)
    role: str
    local: bool = False
    added_by: str
    added_at: datetime = _created_at()
    issuer: str | None = None
    subject: str | None = None


class AuditEvent(SQLModel, table=True):
    """Who did what to which ``target``, when (sign-ins, imports, runs, members); rows are
    only ever added."""

    __tablename__ = "audit_event"

    id: int = Field(default=None, primary_key=True)
    at: datetime = _created_at()
    actor: str = Field(index=True)
    action: str
    target: str = ""
    details: dict[str, Any] = _json(dict)


class LabellingPlan(SQLModel, table=True):
    """How a dataset is labelled (:mod:`pcf.labelling.plan`): people's labels per item (with
    ``adaptive``, beyond the first only where needed), the gold rule, the guidelines, the random
    calibration share served first and the ``escalated`` items served next."""

    __tablename__ = "labelling_plan"

    dataset_id: int = Field(foreign_key="dataset.id", primary_key=True)
    labels_per_item: int = 1
    adaptive: bool = False
    gold_rule: str = "unanimous"
    guidelines: str = ""
    calibration_share: float = 0.0
    escalated: list[str] = _json(list)
    updated_by: str
    updated_at: datetime = _created_at()


class ItemHold(SQLModel, table=True):
    """An item held for one annotator while they label it (so that people labelling at once
    give it no more labels than its plan asks), until ``expires_at``."""

    __tablename__ = "reservation"

    item_id: int = Field(foreign_key="item.id", primary_key=True)
    annotator: str = Field(primary_key=True)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class Assignment(SQLModel, table=True):
    """An item given to one annotator: served to them first, to nobody else until they label
    it (:mod:`pcf.labelling.queue`)."""

    item_id: int = Field(foreign_key="item.id", primary_key=True)
    annotator: str = Field(index=True)
    assigned_by: str
    assigned_at: datetime = _created_at()


class Resolution(SQLModel, table=True):
    """A reviewer's decision of an item's gold (a candidate key or ``none_correct``); never a
    vote, never updated: the newest row is the item's resolution."""

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id", index=True)
    choice: str
    reason: str = ""
    resolved_by: str
    created_at: datetime = _created_at()


class Comment(SQLModel, table=True):
    """One message in an item's thread (:mod:`pcf.labelling.resolutions`); never updated."""

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id", index=True)
    author: str
    text: str
    created_at: datetime = _created_at()


class ApiToken(SQLModel, table=True):
    """A token of the HTTP API (:mod:`pcf.labelling.tokens`): only the SHA-256 of its secret is
    kept (``digest``), with its first characters (``prefix``) to tell tokens apart in a list.
    It acts as member ``email`` within ``scope``; revoked or expired, it is refused."""

    __tablename__ = "api_token"

    id: int = Field(default=None, primary_key=True)
    email: str = Field(index=True)
    scope: str
    digest: str = Field(unique=True)
    prefix: str
    created_by: str
    created_at: datetime = _created_at()
    expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class ApiRun(SQLModel, table=True):
    """A run started through the HTTP API, kept so that a restarted server resumes it:
    ``idempotency_key`` is the client's (one run per member and key), ``request`` the settings
    asked for (compared when a key comes again), ``cancelled`` set by a cancel."""

    __tablename__ = "api_run"
    __table_args__ = (UniqueConstraint("email", "idempotency_key"),)

    run_name: str = Field(primary_key=True)
    email: str
    idempotency_key: str
    request: dict[str, Any] = _json(dict)
    cancelled: bool = False
    created_at: datetime = _created_at()


class ApiLabel(SQLModel, table=True):
    """A label posted through the HTTP API under the client's ``label_id``: posted again, it
    is the label ``adjudication_id`` already saved, not a second one."""

    __tablename__ = "api_label"

    email: str = Field(primary_key=True)
    label_id: str = Field(primary_key=True)
    adjudication_id: int = Field(foreign_key="adjudication.id")


class Webhook(SQLModel, table=True):
    """A subscription (:mod:`pcf.connectors.webhook_sender`): the ``events`` it wants, POSTed to
    ``url`` and signed with ``secret`` (Standard Webhooks ``whsec_...``; kept to sign, never
    shown again)."""

    __tablename__ = "webhook"

    id: int = Field(default=None, primary_key=True)
    url: str
    events: list[str] = _json(list)
    secret: str
    created_by: str
    created_at: datetime = _created_at()


class WebhookDelivery(SQLModel, table=True):
    """One event for one webhook, written in the transaction of the change it tells (the
    outbox): ``pending`` until a sender's attempt succeeds (``delivered``) or the last retry
    fails (``failed``); ``message_id`` is the ``webhook-id`` header, the same on each retry."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_due", "state", "next_attempt_at"),)

    id: int = Field(default=None, primary_key=True)
    webhook_id: int = Field(foreign_key="webhook.id", index=True)
    message_id: str = Field(unique=True)
    event: str
    payload: dict[str, Any] = _json(dict)
    state: str = "pending"
    attempts: int = 0
    next_attempt_at: datetime = _created_at()
    created_at: datetime = _created_at()
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class WebhookAttempt(SQLModel, table=True):
    """One attempt to send a delivery: the receiver's HTTP ``status`` (None when none came) and
    the ``error`` ("" when it answered 2xx)."""

    __tablename__ = "webhook_attempt"

    id: int = Field(default=None, primary_key=True)
    delivery_id: int = Field(foreign_key="webhook_delivery.id", index=True)
    status: int | None = None
    error: str = ""
    at: datetime = _created_at()
