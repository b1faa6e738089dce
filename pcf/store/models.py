"""The tables: one SQLModel class per table, no relationships (queries join explicitly).

Every timestamp column is :class:`sqlmodel.UTCDateTime` (a ``DateTime(timezone=True)`` type
decorator): it refuses naive datetimes on write and returns aware UTC datetimes on read, even on
SQLite, which stores no offset. Lists and dicts are JSON columns. A numbered ``id`` is typed
``int``: the database assigns it when the row is flushed, and nothing reads it before.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import JSON, BigInteger, Column, Index, LargeBinary, UniqueConstraint, column, func
from sqlmodel import Field, Session, SQLModel, UTCDateTime

from pcf.store.compressed import CompressedJSON, CompressedText
from pcf.store.requests import request_digest

RowT = TypeVar("RowT", bound=SQLModel)


class RunStatus(StrEnum):
    """A run's stored status (``Run.status``)."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    CAPPED = "capped"
    """Stopped at its cost cap; a higher cap resumes it."""
    BATCH = "batch"
    """Has provider batches whose results are not stored yet."""
    FAILED = "failed"


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def saved(row: RowT, *, session: Session) -> RowT:
    """``row`` added to the session and flushed (a new row gets its id)."""
    session.add(row)
    session.flush()
    return row


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
    """One item of a dataset; ``item_key`` is the item's own id, ``position`` its file order.

    ``item_metadata`` is stored in the ``metadata`` column (SQLModel owns the attribute name).
    """

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


class Run(SQLModel, table=True):
    """One protocol run of a judge over a dataset, with its settings and running totals.

    ``settings`` holds sampling settings, slot keys and prices; never API keys.
    """

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
    settings: dict[str, Any] = _json(dict)
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
    """What the requests of many calls share, stored once (see :mod:`pcf.store.requests`).

    ``user_frame`` is the user message with references to the item's texts in place of
    them; ``sampling`` holds ``temperature`` and ``max_tokens`` as sent (JSON keeps ``1`` and
    ``1.0`` apart). ``digest`` is the SHA-256 of the rest: one row per content.
    """

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
    """One judge call of a run, kept whole for audit: request, raw response and judgment.

    The request is its template filled with the item's texts
    (:func:`~pcf.store.calls.call_request`); ``request_digest`` is the SHA-256 of the request
    as it was sent. The answer's text and raw response are stored compressed
    (:mod:`pcf.store.compressed`) and read back as they were.
    ``judgment`` is the parsed result (``factuality``, ``hallucination_risk``, ``ranking``,
    ``confidence``; for pairwise calls ``verdict``), with candidate ids, not slot keys.
    ``cached_from`` points at the call whose answer was reused when the content-keyed cache
    answered instead of the judge. The unique constraint's index also serves "calls of a run".
    """

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
    """An answer that is not (or no longer) its call's current answer, kept whole for audit.

    ``reason`` is ``retried`` (a failed answer that ``pcf judge --retry-failed`` asked again:
    the call row now holds the new answer) or ``duplicate`` (a paid answer that arrived for a
    call already stored, e.g. from a second writer). ``values`` are the call's column values
    (its request as ``template_id`` and ``request_digest``, like the call's).
    """

    __tablename__ = "replaced_call"

    id: int = Field(default=None, primary_key=True)
    call_id: int = Field(foreign_key="call.id", index=True)
    reason: str
    replaced_at: datetime = _created_at()
    values: dict[str, Any] = _json(dict)


class RunResult(SQLModel, table=True):
    """A result derived from a run (its decision table, packed judgments, figures against
    labels...), kept for the ``revision`` it was computed at: the run's calls (and, for
    figures against labels, the labels) as they were then. A result whose revision is not the
    current one is stale, and is computed again before it is shown.

    ``name`` says which result; ``data`` holds it in the form its reader knows (Parquet for a
    table, NumPy's ``.npz`` for arrays, JSON for figures).
    """

    __tablename__ = "run_result"

    run_id: int = Field(foreign_key="run.id", primary_key=True)
    name: str = Field(primary_key=True)
    revision: str
    computed_at: datetime = _created_at()
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class RunLease(SQLModel, table=True):
    """Who is judging the run called ``run_name`` now: one process at a time.

    The holder renews ``expires_at`` while it runs and deletes the row when it stops; a lease
    whose time ran out, or whose process is gone from this host, is dead and may be taken over.
    """

    __tablename__ = "run_lease"

    run_name: str = Field(primary_key=True)
    holder: str
    host: str
    pid: int
    acquired_at: datetime = _created_at()
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class KeyClaim(SQLModel, table=True):
    """A request being answered now: its content key and the process asking it (a run's lease
    holder), so that another run needing the same answer waits for it instead of paying again.

    The holder renews ``expires_at`` with its run's lease and deletes the row once the answer
    (or its failure) is stored; a claim whose time ran out, or whose process is gone from this
    host, is dead and may be taken over.
    """

    __tablename__ = "key_claim"

    content_key: str = Field(primary_key=True)
    holder: str = Field(index=True)
    host: str
    pid: int
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class ProviderBatch(SQLModel, table=True):
    """One submission of a run's calls to a provider's batch API.

    ``state`` is ``submitting`` (recorded before the provider was asked: a killed submit leaves
    it so, and the next submit finds or finishes its batch), ``submitted`` (``batch_id`` is
    known) or ``collected`` (every result is stored as a call). ``custom_ids`` are the content
    keys of the requests sent; ``token`` tags the provider's batch and file.
    """

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


ADJUDICATION_CHAIN = Index(
    "ux_adjudication_chain",
    "item_id",
    "annotator",
    func.coalesce(column("supersedes"), 0),
    unique=True,
)
"""One successor per label (and one first label) per item and annotator: the history stays a
line even when two saves race; the loser of the race saves again on top of the winner."""


class Adjudication(SQLModel, table=True):
    """A human label for an item. Never updated: a correction is a new row that ``supersedes``
    the annotator's previous one, and the newest row is the annotator's current label.

    ``choice`` is a candidate key, ``none_correct`` or ``cannot_tell``. ``source`` names the
    file or tool an imported label came from (``pcf labels import``); None: saved in PCF.
    """

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
    """A person who may use the app, by the email their sign-in provider vouches for, and the
    role that says what they may do (:mod:`pcf.access`).

    ``issuer`` and ``subject`` are the provider account (the ID token's ``iss`` and ``sub``)
    of the member's first sign-in: only that account signs in as them afterwards. In local mode
    (no sign-in configured) the one local person is the member with ``local`` set: ``email``
    then holds the name they gave, and they are admin.
    """

    email: str = Field(primary_key=True)
    role: str
    local: bool = False
    added_by: str
    added_at: datetime = _created_at()
    issuer: str | None = None
    subject: str | None = None


class AuditEvent(SQLModel, table=True):
    """Who did what, when: sign-ins, imports, runs started, resumed or deleted, members changed.

    ``target`` names what was acted on (a dataset, a run, a member); ``details`` says more
    (settings, the role given, counts deleted). Rows are only ever added.
    """

    __tablename__ = "audit_event"

    id: int = Field(default=None, primary_key=True)
    at: datetime = _created_at()
    actor: str = Field(index=True)
    action: str
    target: str = ""
    details: dict[str, Any] = _json(dict)


class LabellingPlan(SQLModel, table=True):
    """How a dataset is labelled: labels per item, the guidelines, how gold is decided.

    ``labels_per_item`` is N: an item's queue place is free while it has fewer than N people's
    labels. With ``adaptive`` the labels after the first are asked only where needed (the
    labels disagree with each other or with the PCF decision, or the item is flagged).
    ``gold_rule`` is ``unanimous``, ``majority`` or ``dawid_skene`` (see
    :mod:`pcf.labelling.resolutions`). ``calibration_share`` is the random share of items served
    first, regardless of doubt; ``escalated`` the item keys ``pcf escalate --queue`` sent next.
    """

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


class Reservation(SQLModel, table=True):
    """An item held for one annotator while they label it, so that people labelling at once
    do not give it more labels than its plan asks; it lapses at ``expires_at``."""

    item_id: int = Field(foreign_key="item.id", primary_key=True)
    annotator: str = Field(primary_key=True)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class Assignment(SQLModel, table=True):
    """An item given to one annotator: it is served to them first, and to nobody else until
    they label it or the assignment is removed (:mod:`pcf.labelling.queue`)."""

    item_id: int = Field(foreign_key="item.id", primary_key=True)
    annotator: str = Field(index=True)
    assigned_by: str
    assigned_at: datetime = _created_at()


class Resolution(SQLModel, table=True):
    """A reviewer's decision of an item's gold where its labels disagree. Never updated and
    never a vote: a new decision is a new row, and the newest is the item's resolution.

    ``choice`` is a candidate key, or ``none_correct``.
    """

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id", index=True)
    choice: str
    reason: str = ""
    resolved_by: str
    created_at: datetime = _created_at()


class Comment(SQLModel, table=True):
    """One message in an item's thread, where the people who labelled or resolve it discuss
    it (see :mod:`pcf.labelling.resolutions`). Never updated."""

    id: int = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="item.id", index=True)
    author: str
    text: str
    created_at: datetime = _created_at()
