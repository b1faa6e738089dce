"""The routes: each parses, authorises (:func:`pcf.api.guard.caller`) and calls the function
the CLI calls for the same work; none holds logic of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from sqlmodel import Session

from pcf.access import Permission
from pcf.analysis.escalate import escalate
from pcf.analysis.gate import check_run
from pcf.analysis.paging import MAX_PAGE, decision_page
from pcf.analysis.results import judgment_chunks, stored_analysis
from pcf.api.guard import caller
from pcf.api.problem_details import NotFoundError, Problem, problem
from pcf.api.schemas import (
    AssignIn,
    AssignOut,
    CheckIn,
    CheckOut,
    ClaimIn,
    ClaimOut,
    DatasetIn,
    DatasetOut,
    DatasetPage,
    DecisionPage,
    EscalateIn,
    EscalateOut,
    GoldOut,
    Health,
    ItemOut,
    ItemPage,
    ItemsAdded,
    ItemsIn,
    LabelRecords,
    LabelSaved,
    LabelsIn,
    LabelsOut,
    Me,
    PlanIn,
    PlanOut,
    QueuedItem,
    ReportOut,
    RunAccepted,
    RunIn,
    RunStatusOut,
)
from pcf.labelling.plan import Plan, labelling_plan, queue_escalated, set_plan
from pcf.labelling.posted import gold, labels_since, next_item, post_labels
from pcf.labelling.queue import assign, unassign
from pcf.labelling.tokens import TokenUser
from pcf.reports.collect import collect_report
from pcf.reports.document import build_report, report_title
from pcf.reports.render import report_file, report_json
from pcf.runs.estimate import CostEstimate
from pcf.runs.manage import add_items, open_dataset
from pcf.runs.submitted import RunRequest, cancel, estimate, run_status, submit_run
from pcf.store import (
    Dataset,
    Run,
    get_dataset,
    get_engine,
    get_run,
    item_positions,
    items_at,
    list_datasets,
    session_scope,
    write_with_retry,
)

PREFIX = "/api/v1"
ERRORS = {
    status: {"model": Problem, "content": {"application/problem+json": {}}}
    for status in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}
router = APIRouter(responses=ERRORS)  # type: ignore[arg-type]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
Cursor = Annotated[str | None, Query(pattern=r"^\d{1,12}$", description="A page's next_cursor")]
DecisionCursor = Annotated[
    str | None, Query(pattern=r"^\d{1,12}\.\d{1,4}$", description="A page's next_cursor")
]
NAME = r"^[^\x00-\x1f]*\S[^\x00-\x1f]*$"
"""A dataset's or run's name in a path: not blank, no control characters."""
RunName = Annotated[str, Path(min_length=1, max_length=1000, pattern=NAME, examples=["demo-pcf"])]
DatasetName = Annotated[str, Path(min_length=1, max_length=1000, pattern=NAME, examples=["demo"])]
Reader = Annotated[TokenUser, Depends(caller(Permission.SEE_RESULTS))]


def dataset_named(name: str, *, session: Session) -> Dataset:
    """The dataset ``name``, or 404."""
    dataset = get_dataset(name, session=session)
    if dataset is None:
        raise NotFoundError(f"no dataset {name!r}; PUT /datasets/{name} creates it")
    return dataset


def run_named(name: str, *, session: Session) -> Run:
    """The run ``name``, or 404."""
    run = get_run(name, session=session)
    if run is None:
        raise NotFoundError(
            f"no run {name!r}; GET /datasets lists the datasets, POST /runs starts one"
        )
    return run


def dataset_out(dataset: Dataset) -> DatasetOut:
    return DatasetOut(
        name=dataset.name,
        items=dataset.n_items,
        format=dataset.format,
        seed=dataset.seed,
        created_at=dataset.created_at,
    )


@router.get("/health", response_model=Health, responses={})
def health() -> Health:
    """The server answers (no token needed)."""
    return Health(status="ok")


@router.get("/me", response_model=Me)
def me(user: Annotated[TokenUser, Depends(caller())]) -> Me:
    """Who the token acts as, and what it may do now."""
    return Me(
        email=user.actor.identity,
        role=user.actor.role.value,
        scope=user.scope.value,
        token_id=user.token_id,
        permissions=sorted(p.name.lower() for p in user.permissions),
    )


@router.get("/datasets", response_model=DatasetPage)
def datasets(
    _user: Annotated[TokenUser, Depends(caller())], cursor: Cursor = None, limit: Limit = 100
) -> DatasetPage:
    """The datasets, oldest first, a page at a time."""
    after = int(cursor or 0)
    with session_scope(get_engine()) as session:
        found = [d for d in list_datasets(session=session) if d.id > after][: limit + 1]
    page, more = found[:limit], len(found) > limit
    return DatasetPage(
        datasets=[dataset_out(d) for d in page], next_cursor=str(page[-1].id) if more else None
    )


@router.put(
    "/datasets/{name}",
    response_model=DatasetOut,
    status_code=201,
    responses={200: {"model": DatasetOut, "description": "The dataset exists"}},
)
def put_dataset(
    name: Annotated[str, Path(min_length=1, max_length=200, pattern=NAME)],
    response: Response,
    user: Annotated[TokenUser, Depends(caller(Permission.IMPORT))],
    body: Annotated[DatasetIn | None, Body()] = None,
) -> DatasetOut:
    """Create dataset ``name`` with no items (201), or find it (200); items come by POST."""
    seed = (body or DatasetIn()).seed
    dataset, created = write_with_retry(  # two at once: one creates it, the other finds it
        get_engine(),
        lambda session: open_dataset(name, session=session, actor=user.actor, seed=seed),
    )
    response.status_code = 201 if created else 200
    return dataset_out(dataset)


@router.get("/datasets/{name}/items", response_model=ItemPage)
def dataset_items(
    name: DatasetName,
    user: Annotated[TokenUser, Depends(caller())],
    cursor: Cursor = None,
    limit: Limit = 100,
) -> ItemPage:
    """The dataset's items in their order, in the ``items.jsonl`` schema, a page at a time;
    ``gold`` is null for a token without the right to see results (annotators label blind)."""
    start = int(cursor or 0)
    with session_scope(get_engine()) as session:
        dataset = dataset_named(name, session=session)
        items = items_at(dataset.id, start, start + limit, session=session)
    more = start + limit < dataset.n_items
    blind = {} if Permission.SEE_RESULTS in user.permissions else {"gold": None}
    return ItemPage(
        items=[ItemOut(**item.to_dict() | blind) for item in items],
        next_cursor=str(start + limit) if more else None,
    )


@router.post("/datasets/{name}/items", response_model=ItemsAdded)
def post_items(
    name: DatasetName,
    body: ItemsIn,
    user: Annotated[TokenUser, Depends(caller(Permission.IMPORT))],
) -> ItemsAdded:
    """Add items to the dataset, all or nothing; an item stored with the same texts stays."""
    rows = [item.model_dump() for item in body.items]
    with session_scope(get_engine()) as session:
        dataset_named(name, session=session)
    counts = write_with_retry(  # two at once with the same items: the second finds them
        get_engine(), lambda session: add_items(name, rows, session=session, actor=user.actor)
    )
    return ItemsAdded(**counts)


@router.post("/runs", response_model=RunAccepted, status_code=202)
def post_run(
    body: RunIn,
    response: Response,
    user: Annotated[TokenUser, Depends(caller(Permission.RUN))],
    idempotency_key: Annotated[str, Header(min_length=1, max_length=200)],
) -> RunAccepted:
    """Start a run in the background (202, ``Location`` its status); the same
    ``Idempotency-Key`` again answers with the same run."""
    with session_scope(get_engine()) as session:
        dataset_named(body.dataset, session=session)
    submitted = submit_run(
        RunRequest(**body.model_dump()), idempotency_key, engine=get_engine(), actor=user.actor
    )
    location = f"{PREFIX}/runs/{quote(submitted.name)}"
    response.headers["Location"] = location
    return RunAccepted(name=submitted.name, started=submitted.started, location=location)


@router.post("/runs/estimate", response_model=CostEstimate)
def post_estimate(
    body: RunIn, user: Annotated[TokenUser, Depends(caller(Permission.RUN))]
) -> CostEstimate:
    """What starting the run would call and cost (``cost_usd`` null: the model is unpriced)."""
    with session_scope(get_engine()) as session:
        dataset_named(body.dataset, session=session)
    return estimate(RunRequest(**body.model_dump()), engine=get_engine(), actor=user.actor)


@router.get("/runs/{name:path}/decisions", response_model=DecisionPage)
def decisions(
    name: RunName,
    _user: Reader,
    flag: str | None = None,
    cursor: DecisionCursor = None,
    limit: Limit = 100,
) -> Response:
    """The run's decisions (``pcf export --what decisions``), those raising ``flag`` alone
    when given, a page at a time."""
    with session_scope(get_engine()) as session:
        run = run_named(name, session=session)
        page, after = decision_page(run, session=session, cursor=cursor, limit=limit, flag=flag)
    # Written as it is (its schema is DecisionPage's): checking 1,000 records against a model
    # of free-form objects would double the time of a page.
    body = json.dumps({"decisions": page, "next_cursor": after}, ensure_ascii=False)
    return Response(body, media_type="application/json")


@router.get(
    "/runs/{name:path}/judgments",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def judgments(name: RunName, _user: Reader) -> StreamingResponse:
    """The run's judgments as NDJSON (``pcf export --what judgments``), streamed."""
    engine = get_engine()
    with session_scope(engine) as session:
        run_named(name, session=session)

    def lines() -> Iterator[bytes]:
        with session_scope(engine) as session:
            for records in judgment_chunks(run_named(name, session=session), session=session):
                yield "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.post("/runs/{name:path}/check", response_model=CheckOut)
def check(name: RunName, body: CheckIn, _user: Reader) -> CheckOut:
    """``pcf check``'s JSON: each threshold's figure, value and outcome (a failed gate is 200
    with ``passed`` false)."""
    with session_scope(get_engine()) as session:
        found = check_run(run_named(name, session=session), session=session, **body.model_dump())
    checks = [asdict(c) for c in found]
    return CheckOut(run=name, passed=all(c["passed"] for c in checks), checks=checks)


@router.post("/runs/{name:path}/escalate", response_model=EscalateOut)
def post_escalate(name: RunName, body: EscalateIn, user: Reader) -> Response:
    """``pcf escalate``'s JSON: the items the judge may decide alone, with a guarantee, and
    those escalated to people; ``queue`` sends the escalated ones to the labelling queue,
    served next (it needs the right to resolve)."""
    if body.queue:
        user.require(Permission.RESOLVE)
    with session_scope(get_engine()) as session:
        found = run_named(name, session=session)
        figures = escalate(
            found,
            session=session,
            alpha=body.alpha,
            delta=body.delta,
            signal=body.signal,
            labels=body.calibration_labels,
        )
        if body.queue:
            queue_escalated(found, figures["escalated"], session=session, actor=user.actor)
    # Written by the model (an infinite figure as null, as the CLI prints it).
    out = EscalateOut.model_validate(figures | {"queued": body.queue})
    return Response(out.model_dump_json(), media_type="application/json")


REPORT_TYPES = {"application/json": "json", "text/markdown": "md", "text/html": "html"}
"""What ``GET /runs/{name}/report`` answers, by the Accept header: report.json, .md or .html."""


def report_kind(accept: str | None) -> str | None:
    """The first kind of :data:`REPORT_TYPES` that ``accept`` names (``*/*`` or none: JSON),
    or None when it names none of them."""
    for part in (accept or "*/*").split(","):
        media = part.split(";")[0].strip().lower()
        if media in REPORT_TYPES:
            return REPORT_TYPES[media]
        if media in ("*/*", "application/*"):
            return "json"
        if media == "text/*":
            return "md"
    return None


@router.get(
    "/runs/{name:path}/report",
    response_model=ReportOut,
    responses={
        200: {"content": {"text/markdown": {}, "text/html": {}}},
        406: {"model": Problem, "content": {"application/problem+json": {}}},
    },
)
def report(
    request: Request,
    name: RunName,
    _user: Reader,
    seed: Annotated[int, Query(ge=0, le=2**31)] = 0,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """``pcf report`` of the run: report.json (``Accept: application/json``, the default),
    report.md (``text/markdown``) or the self-contained report.html (``text/html``)."""
    kind = report_kind(accept)
    if kind is None:
        shown = ", ".join(REPORT_TYPES)
        return problem(request, 406, f"Accept one of {shown}; the report has no other form")
    with session_scope(get_engine()) as session:
        data = collect_report([run_named(name, session=session)], session=session)
    made = build_report(data, title=report_title([name]), seed=seed)
    media = {kind: media for media, kind in REPORT_TYPES.items()}[kind]
    if kind == "json":
        return JSONResponse(report_json(made))
    return Response(report_file(made, kind), media_type=f"{media}; charset=utf-8")


@router.post("/runs/{name:path}/cancel", response_model=RunStatusOut)
def cancel_run(
    name: RunName, user: Annotated[TokenUser, Depends(caller(Permission.RUN))]
) -> RunStatusOut:
    """Stop the run after the calls it has answered (they stay; starting it again resumes)."""
    status = run(name, user)  # 404 for no such run
    if cancel(name, engine=get_engine(), actor=user.actor):
        status = run(name, user)
    return status


@router.get("/runs/{name:path}", response_model=RunStatusOut)
def run(name: RunName, _user: Reader) -> RunStatusOut:
    """The run's status, progress and spend (``cost_usd`` null: its model is unpriced)."""
    status = run_status(name, engine=get_engine())
    if status is None:
        raise NotFoundError(f"no run {name!r}; POST /runs starts one")
    return RunStatusOut(**status)


@router.post("/datasets/{name}/labels", response_model=LabelsOut)
def post_labels_route(
    name: DatasetName,
    body: LabelsIn,
    user: Annotated[TokenUser, Depends(caller(Permission.LABEL))],
) -> LabelsOut:
    """Save labels as the token's member, all or nothing; a ``label_id`` posted before is the
    label it saved then (``saved`` false)."""
    rows = [label.model_dump() for label in body.labels]
    with session_scope(get_engine()) as session:
        dataset_named(name, session=session)
    saved = write_with_retry(  # one label_id twice at once: the second finds the first's
        get_engine(), lambda session: post_labels(name, rows, session=session, actor=user.actor)
    )
    return LabelsOut(labels=[LabelSaved(**s) for s in saved])


@router.get("/datasets/{name}/labels", response_model=LabelRecords)
def get_labels(name: DatasetName, user: Reader, since: datetime | None = None) -> LabelRecords:
    """The dataset's labels (corrections too) saved after ``since``, oldest first."""
    with session_scope(get_engine()) as session:
        dataset_named(name, session=session)
        found = labels_since(name, session=session, actor=user.actor, since=since)
    return LabelRecords(labels=found)


@router.get("/datasets/{name}/gold", response_model=GoldOut)
def get_gold(name: DatasetName, user: Reader) -> GoldOut:
    """The dataset's human gold (``pcf gold export``)."""
    with session_scope(get_engine()) as session:
        dataset_named(name, session=session)
        return GoldOut(gold=gold(name, session=session, actor=user.actor))


def plan_out(plan: Plan, response: Response) -> PlanOut:
    """The plan, its version as the response's ETag."""
    response.headers["ETag"] = f'"{plan.version}"'
    return PlanOut(**asdict(plan))


@router.get("/datasets/{name}/plan", response_model=PlanOut)
def get_plan(
    name: DatasetName, response: Response, _user: Annotated[TokenUser, Depends(caller())]
) -> PlanOut:
    """The dataset's labelling plan (guidelines too), its version in the ``ETag`` header."""
    with session_scope(get_engine()) as session:
        found = labelling_plan(dataset_named(name, session=session).id, session=session)
    return plan_out(found, response)


@router.put(
    "/datasets/{name}/plan",
    response_model=PlanOut,
    responses={
        status: {"model": Problem, "content": {"application/problem+json": {}}}
        for status in (412, 428)
    },
)
def put_plan(
    name: DatasetName,
    body: PlanIn,
    response: Response,
    user: Annotated[TokenUser, Depends(caller(Permission.PLAN_LABELLING))],
    if_match: Annotated[str, Header(min_length=1, max_length=200)],
) -> PlanOut:
    """``pcf labelling set``: change the plan (a field left out stays as it is), only if it is
    still at the version ``If-Match`` names (the ETag of ``GET``): 412 when it changed since,
    428 without ``If-Match``."""
    version = if_match.strip().removeprefix("W/").strip('"')
    changes = body.model_dump()
    saved = write_with_retry(
        get_engine(),
        lambda session: set_plan(
            dataset_named(name, session=session).id,
            session=session,
            actor=user.actor,
            if_version=version,
            **changes,
        ),
    )
    return plan_out(saved, response)


@router.post("/datasets/{name}/queue/next", response_model=ClaimOut)
def queue_next(
    name: DatasetName,
    user: Annotated[TokenUser, Depends(caller(Permission.LABEL))],
    body: Annotated[ClaimIn | None, Body()] = None,
) -> ClaimOut:
    """Hold the token's member's next item to label, from the Label page's queue (most
    doubtful first by ``run``; an item held for them stays theirs, others' holds are not
    served): ``item`` is null when their queue is empty. A hold ends after ten minutes, or
    when they post its label."""
    asked = body or ClaimIn()
    table = None
    with session_scope(get_engine()) as session:
        dataset = dataset_named(name, session=session)
        if asked.run is not None:
            ordering = run_named(asked.run, session=session)
            if ordering.dataset_id != dataset.id:
                raise ValueError(f"run {asked.run!r} judged another dataset than {name!r}")
            table = stored_analysis(ordering, session=session).table
    held, queue = write_with_retry(
        get_engine(),
        lambda session: next_item(
            name, session=session, actor=user.actor, table=table, skip=asked.skip
        ),
    )
    return ClaimOut(item=None if held is None else QueuedItem(**held), queue=queue)


@router.post("/datasets/{name}/assignments", response_model=AssignOut)
def post_assignments(
    name: DatasetName,
    body: AssignIn,
    user: Annotated[TokenUser, Depends(caller(Permission.ASSIGN))],
) -> AssignOut:
    """``pcf labels assign``: give ``to`` items (their queue serves them first, nobody else's
    until they label them), or with ``remove`` take back every item assigned to them."""

    def change(session: Session) -> AssignOut:
        dataset = dataset_named(name, session=session)
        if body.remove:
            removed = unassign(dataset.id, body.to, session=session, actor=user.actor)
            return AssignOut(to=body.to, assigned=[], removed=removed)
        order = [(key, db_id) for key, db_id, _ in item_positions(dataset.id, session=session)]
        assigned = assign(
            dataset.id,
            order,
            session=session,
            actor=user.actor,
            to=body.to,
            items=body.items,
            first=body.first,
            share=body.share,
        )
        return AssignOut(to=body.to, assigned=assigned, removed=0)

    return write_with_retry(get_engine(), change)
