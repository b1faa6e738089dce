"""A Python client of the HTTP API (docs: Pipelines), over httpx: ``Client()`` reads the API's
address from ``PCF_API_URL`` and its token from ``PCF_API_TOKEN``; paged routes are iterators
that follow the cursors. An error answer raises :class:`ApiError` with its problem details."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

URL_ENV = "PCF_API_URL"
TOKEN_ENV = "PCF_API_TOKEN"  # noqa: S105 - the variable's name, not a token
PAGE = 1000


class ApiError(Exception):
    """An error answer: ``status``, and the RFC 9457 ``problem`` (its ``errors`` name fields)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status, self.problem = status, problem
        super().__init__(f"{status}: {problem.get('detail', problem)}")


class Client:
    """The API at ``url`` (by default ``PCF_API_URL``, e.g. ``http://localhost:8501/api/v1``)
    with ``token`` (by default ``PCF_API_TOKEN``); ``http`` replaces the httpx client."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        url = url or os.environ.get(URL_ENV)
        token = token or os.environ.get(TOKEN_ENV)
        if http is None and not url:
            raise ValueError(f"give the API's address, or set {URL_ENV}")
        self.http = http or httpx.Client(base_url=url or "", timeout=timeout_s)
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """The answer to one request; ApiError for a 4xx or 5xx."""
        answer = self.http.request(method, path, **options)
        if answer.status_code >= 400:
            try:
                problem = answer.json()
            except ValueError:
                problem = {"detail": answer.text}
            raise ApiError(answer.status_code, problem)
        return answer

    def _pages(self, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        cursor = None
        while True:
            query = {k: v for k, v in params.items() if v is not None} | {"limit": PAGE}
            page = self.request("GET", path, params=query | ({"cursor": cursor} if cursor else {}))
            yield from page.json()[key]
            if (cursor := page.json()["next_cursor"]) is None:
                return

    def me(self) -> dict[str, Any]:
        """Who the token acts as, and what it may do."""
        return self.request("GET", "/me").json()

    def datasets(self) -> Iterator[dict[str, Any]]:
        """Every dataset, oldest first."""
        return self._pages("/datasets", "datasets")

    def create_dataset(self, name: str, *, seed: int = 0) -> dict[str, Any]:
        """The dataset ``name``, created empty if missing."""
        return self.request("PUT", f"/datasets/{name}", json={"seed": seed}).json()

    def add_items(self, dataset: str, items: Iterable[dict[str, Any]]) -> dict[str, int]:
        """Add items (``items.jsonl`` records), :data:`PAGE` per request (each all or nothing);
        how many were added and unchanged."""
        totals = {"added": 0, "unchanged": 0}
        batch: list[dict[str, Any]] = []
        for item in [*items, None]:
            if item is not None:
                batch.append(item)
            if batch and (item is None or len(batch) == PAGE):
                done = self.request("POST", f"/datasets/{dataset}/items", json={"items": batch})
                totals = {key: totals[key] + done.json()[key] for key in totals}
                batch = []
        return totals

    def items(self, dataset: str) -> Iterator[dict[str, Any]]:
        """The dataset's items in their order."""
        return self._pages(f"/datasets/{dataset}/items", "items")

    def start_run(self, idempotency_key: str, **settings: Any) -> dict[str, Any]:
        """Start a run (``pcf judge``'s settings); the same key again is the same run."""
        headers = {"Idempotency-Key": idempotency_key}
        return self.request("POST", "/runs", json=settings, headers=headers).json()

    def estimate(self, **settings: Any) -> dict[str, Any]:
        """What a run would call and cost."""
        return self.request("POST", "/runs/estimate", json=settings).json()

    def run(self, name: str) -> dict[str, Any]:
        """A run's status, progress and spend."""
        return self.request("GET", f"/runs/{name}").json()

    def wait(self, name: str, *, poll_s: float = 1.0, timeout_s: float | None = None) -> dict:
        """The run's status once it is no longer starting or running.

        Raises:
            TimeoutError: it still runs after ``timeout_s``.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (status := self.run(name))["status"] in ("starting", "pending", "running"):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {name!r} is still {status['status']}")
            time.sleep(poll_s)
        return status

    def cancel(self, name: str) -> dict[str, Any]:
        """Stop a run after the calls it answered."""
        return self.request("POST", f"/runs/{name}/cancel").json()

    def decisions(self, name: str, *, flag: str | None = None) -> Iterator[dict[str, Any]]:
        """The run's decisions (``pcf export --what decisions``), those raising ``flag``."""
        return self._pages(f"/runs/{name}/decisions", "decisions", flag=flag)

    def judgments(self, name: str) -> Iterator[dict[str, Any]]:
        """The run's judgments (``pcf export --what judgments``), streamed."""
        with self.http.stream("GET", f"/runs/{name}/judgments") as answer:
            if answer.status_code >= 400:
                answer.read()
                raise ApiError(answer.status_code, answer.json())
            for line in answer.iter_lines():
                if line:
                    yield json.loads(line)

    def check(self, name: str, **thresholds: float) -> dict[str, Any]:
        """``pcf check``'s JSON for the run."""
        return self.request("POST", f"/runs/{name}/check", json=thresholds).json()

    def post_labels(self, dataset: str, labels: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Save labels as the token's member (each with its ``label_id``), all or nothing."""
        return self.request("POST", f"/datasets/{dataset}/labels", json={"labels": labels}).json()[
            "labels"
        ]

    def labels(self, dataset: str, *, since: str | None = None) -> list[dict[str, Any]]:
        """The dataset's labels saved after ``since`` (ISO 8601), oldest first."""
        params = {"since": since} if since else {}
        return self.request("GET", f"/datasets/{dataset}/labels", params=params).json()["labels"]

    def gold(self, dataset: str) -> list[dict[str, Any]]:
        """The dataset's human gold."""
        return self.request("GET", f"/datasets/{dataset}/gold").json()["gold"]

    def escalate(self, name: str, *, queue: bool = False, **options: Any) -> dict[str, Any]:
        """``pcf escalate``'s JSON for the run (``alpha``, ``delta``, ``signal``,
        ``calibration_labels``); ``queue`` sends the escalated items to the labelling queue."""
        body = options | {"queue": queue}
        return self.request("POST", f"/runs/{name}/escalate", json=body).json()

    def report(self, name: str, *, kind: str = "json") -> Any:
        """``pcf report`` of the run: ``json`` (report.json, as data), ``md`` or ``html`` (text)."""
        media = {"json": "application/json", "md": "text/markdown", "html": "text/html"}[kind]
        answer = self.request("GET", f"/runs/{name}/report", headers={"Accept": media})
        return answer.json() if kind == "json" else answer.text

    def plan(self, dataset: str) -> tuple[dict[str, Any], str]:
        """The dataset's labelling plan and its version (the ETag to change it with)."""
        answer = self.request("GET", f"/datasets/{dataset}/plan")
        return answer.json(), answer.headers["ETag"]

    def set_plan(self, dataset: str, version: str, **changes: Any) -> tuple[dict[str, Any], str]:
        """Change the plan if it is still at ``version`` (else ApiError 412: read it again);
        the new plan and its version."""
        answer = self.request(
            "PUT", f"/datasets/{dataset}/plan", json=changes, headers={"If-Match": version}
        )
        return answer.json(), answer.headers["ETag"]

    def next_item(
        self, dataset: str, *, run: str | None = None, skip: Iterable[str] = ()
    ) -> dict[str, Any] | None:
        """Hold the token's member's next item to label (most doubtful first by ``run``;
        ``skip``-ped items last), or None when their queue is empty."""
        body = {"run": run, "skip": list(skip)}
        return self.request("POST", f"/datasets/{dataset}/queue/next", json=body).json()["item"]

    def assign(self, dataset: str, to: str, **which: Any) -> dict[str, Any]:
        """``pcf labels assign``: give member ``to`` the ``items`` named, or the ``first`` N
        (or ``share``) free ones; ``remove=True`` takes theirs back."""
        body = {"to": to} | which
        return self.request("POST", f"/datasets/{dataset}/assignments", json=body).json()

    def create_webhook(self, url: str, events: list[str]) -> dict[str, Any]:
        """Subscribe ``url`` (its host on the server's ``PCF_WEBHOOK_HOSTS``) to ``events``;
        the answer's ``secret`` (``whsec_...``) is shown this once: keep it to verify."""
        return self.request("POST", "/webhooks", json={"url": url, "events": events}).json()

    def webhooks(self) -> list[dict[str, Any]]:
        """Every webhook (without secrets)."""
        return self.request("GET", "/webhooks").json()["webhooks"]

    def webhook(self, webhook_id: int) -> dict[str, Any]:
        """One webhook (without its secret)."""
        return self.request("GET", f"/webhooks/{webhook_id}").json()

    def delete_webhook(self, webhook_id: int) -> None:
        """Delete a webhook and its delivery log."""
        self.request("DELETE", f"/webhooks/{webhook_id}")

    def deliveries(self, webhook_id: int) -> list[dict[str, Any]]:
        """A webhook's deliveries, newest first, each with its ``attempts``."""
        return self.request("GET", f"/webhooks/{webhook_id}/deliveries").json()["deliveries"]

    def redeliver(self, webhook_id: int, delivery_id: int) -> dict[str, Any]:
        """Send a delivery again (the same ``webhook-id``)."""
        path = f"/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"
        return self.request("POST", path).json()
