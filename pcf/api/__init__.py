"""The HTTP API for pipelines (FastAPI), served under ``/api/v1`` beside the app on its own
port (``app.py`` mounts it in Streamlit's server) or alone (``pcf api``). Routes are in
:mod:`pcf.api.routes`; tokens, rights and limits in :mod:`pcf.api.guard`; errors are RFC 9457
problem details (:mod:`pcf.api.problem_details`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount

from pcf.api.guard import BodyLimit
from pcf.api.problem_details import add_problem_handlers, problem
from pcf.api.routes import ERRORS, PREFIX, router
from pcf.api.webhook_routes import router as webhook_router
from pcf.connectors.webhook_sender import server_sender
from pcf.runs.submitted import resume_runs
from pcf.store import SchemaError, database_url, get_engine, storage_problem

logger = logging.getLogger(__name__)


def create_api() -> FastAPI:
    """The API, to mount at :data:`PREFIX` (its OpenAPI 3.1 document at ``/openapi.json``)."""
    api = FastAPI(
        title="PCF Review API",
        version="1",
        summary="Push items, start judge runs, pull decisions, post labels, read gold.",
        openapi_url="/openapi.json",
        docs_url=None,  # the interactive pages load scripts from a CDN the operator never named
        redoc_url=None,
    )
    api.add_middleware(BodyLimit)
    add_problem_handlers(api)
    api.include_router(router)
    api.include_router(webhook_router, responses=ERRORS)  # type: ignore[arg-type]
    return api


@asynccontextmanager
async def resuming(_app: Any) -> AsyncIterator[None]:
    """A server's lifespan: on start, resume the runs submitted before it stopped, and send
    the webhooks' deliveries (:class:`pcf.connectors.webhook_sender.Sender`) until it stops.
    A database that cannot be used is logged, not fatal: the pages say so, and each request
    answers it."""
    sender = None
    try:
        resume_runs(get_engine())
        sender = server_sender(get_engine())
    except Exception as exc:
        problem = exc if isinstance(exc, SchemaError) else storage_problem(exc, database_url())
        if problem is None:
            raise
        logger.warning("submitted runs not resumed: the database cannot be used: %s", problem)
    try:
        yield
    finally:
        if sender is not None:
            sender.stop()


def routes() -> list[Mount]:
    """The API mounted at :data:`PREFIX`, for a server's routes (``st.App(routes=...)``)."""
    return [Mount(PREFIX, app=create_api())]


def standalone() -> Starlette:
    """The API alone at :data:`PREFIX`, for ``pcf api`` on a host without the app."""
    return Starlette(routes=routes(), lifespan=resuming, exception_handlers={404: outside_the_api})


def outside_the_api(request: Request, _exc: Exception) -> JSONResponse:
    """A path outside :data:`PREFIX`, as problem+json."""
    return problem(request, 404, f"no such route; the API is at {PREFIX}/")
