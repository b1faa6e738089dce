"""Errors as RFC 9457 problem details (``application/problem+json``): a status, a title, a
detail that says what to do, and for bad input an ``errors`` list naming each field
(``items[3].prompt``), so that a client never has to parse a message."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from pcf.access import AccessDeniedError
from pcf.errors import DataError
from pcf.labelling.plan import PlanChangedError
from pcf.labelling.tokens import TokenError
from pcf.runs.manage import CostCapError, DatasetConflictError, RunBusyError, RunConflictError
from pcf.runs.submitted import IdempotencyConflictError
from pcf.store import SchemaError, database_url, storage_problem

PROBLEM_JSON = "application/problem+json"
HEADER_FIELDS = {
    "idempotency-key": "Idempotency-Key",
    "authorization": "Authorization",
    "if-match": "If-Match",
}


class FieldError(BaseModel):
    """One field of the request that is wrong."""

    field: str
    detail: str


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None


class NotFoundError(LookupError):
    """A dataset or run the request names that does not exist (404)."""


def problem(
    request: Request,
    status: int,
    detail: str,
    *,
    errors: list[dict[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem+json response."""
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=request.url.path,
        errors=None if errors is None else [FieldError(**e) for e in errors],
    )
    content = body.model_dump(exclude_none=True)
    return JSONResponse(content, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def field_name(loc: tuple[int | str, ...]) -> str:
    """A FastAPI error location as the field's path: ``items[3].prompt``, ``limit``."""
    where, *path = loc or ("body",)
    if where == "header" and path:
        return HEADER_FIELDS.get(str(path[0]).lower(), str(path[0]))
    parts = (f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return "".join(parts).removeprefix(".") or str(where)


def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e["type"] == "json_invalid" for e in errors):
        detail = f"the body is not JSON: {errors[0].get('ctx', {}).get('error', 'malformed')}"
        return problem(request, 400, detail)
    named = [{"field": field_name(tuple(e["loc"])), "detail": e["msg"]} for e in errors]
    shown = "; ".join(f"{e['field']}: {e['detail']}" for e in named[:5])
    if any(e["type"] == "missing" and field_name(tuple(e["loc"])) == "If-Match" for e in errors):
        detail = f"nothing was done: send If-Match with the ETag a GET gave ({shown})"
        return problem(request, 428, detail, errors=named)  # RFC 6585: Precondition Required
    return problem(request, 422, f"nothing was done: {shown}", errors=named)


def _data_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DataError)
    named = [
        {
            "field": f"{p.file}[{p.line}]" + (f".{p.field}" if p.field else "")
            if p.line is not None
            else p.file,
            "detail": p.message,
        }
        for p in exc.problems
    ]
    shown = "; ".join(f"{e['field']}: {e['detail']}" for e in named[:5])
    return problem(request, 422, f"nothing was stored: {shown}", errors=named)


def _status(status: int) -> Any:
    def handle(request: Request, exc: Exception) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return problem(request, status, str(exc), headers=headers)

    return handle


def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette's Allow names the first route's methods alone
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem(request, exc.status_code, str(exc.detail), headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method the routes of the request's path answer."""
    methods: set[str] = set()
    for route in request.app.routes:
        found, _ = route.matches({**request.scope, "method": "*"})
        if found != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _storage(request: Request, exc: Exception) -> JSONResponse:
    problem_text = exc if isinstance(exc, SchemaError) else storage_problem(exc, database_url())
    if problem_text is None:
        raise exc
    return problem(request, 503, f"the database cannot be used: {problem_text}")


def add_problem_handlers(api: FastAPI) -> None:
    """Answer every error of ``api`` as problem+json."""
    api.add_exception_handler(RequestValidationError, _invalid)
    api.add_exception_handler(DataError, _data_error)
    api.add_exception_handler(HTTPException, _http)
    api.add_exception_handler(TokenError, _status(401))
    api.add_exception_handler(AccessDeniedError, _status(403))
    api.add_exception_handler(NotFoundError, _status(404))
    api.add_exception_handler(PlanChangedError, _status(412))
    conflicts = (IdempotencyConflictError, RunConflictError, RunBusyError, CostCapError)
    for conflict in (*conflicts, DatasetConflictError):
        api.add_exception_handler(conflict, _status(409))
    api.add_exception_handler(ValueError, _status(422))
    api.add_exception_handler(SchemaError, _storage)
    api.add_exception_handler(DBAPIError, _storage)
