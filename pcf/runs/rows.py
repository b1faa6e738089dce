"""The rows of a run's calls, made (a judge's answer, the cache's, a failure) and stored (a new
call, a retried failed call's new answer, a second writer's duplicate), for live runs and
provider batches alike."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from pcf.judges.base import UNKNOWN, JudgeReply, configured_keys, redact
from pcf.parsing import PairParsed, Parsed, parse_listwise, parse_pairwise
from pcf.prompts import Rendered
from pcf.runs.call_plan import PlannedCall, Prepared, Slot, content_key
from pcf.runs.spec import RunSpec
from pcf.store import (
    Call,
    Run,
    cached_calls,
    commit_retrying,
    insert_calls,
    keep_duplicate_answers,
    replace_calls,
)

INLINE_PARSE_CHARS = 65_536
"""Longer answers are cleaned and parsed in a worker thread, off the event loop."""
MAX_RAW_DEPTH = 64
"""A raw response nested deeper is stored with ``[nested too deep]`` in place of the rest."""
NUL_REPAIR = "nul_replaced"
"""The repair recorded when NUL characters of an answer were stored as U+FFFD."""


def stored_reply(reply: JudgeReply) -> tuple[str, dict[str, Any], list[str]]:
    """A reply's text and raw response as stored, and the repair made, if any: keys masked,
    NUL characters (which PostgreSQL's text columns refuse) as U+FFFD, NaN and infinity as
    strings, nesting cut at :data:`MAX_RAW_DEPTH`, so whatever a provider sends can be stored."""
    had_nul, keys = False, configured_keys()

    def clean(text: str) -> str:
        nonlocal had_nul
        if "\x00" in text:
            had_nul, text = True, text.replace("\x00", "\ufffd")
        return redact(text, keys)

    def storable(value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return clean(value)
        if isinstance(value, dict | list) and depth >= MAX_RAW_DEPTH:
            return "[nested too deep]"
        if isinstance(value, dict):
            return {clean(str(k)): storable(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [storable(v, depth + 1) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value

    text, raw = clean(reply.text), storable(reply.raw, 0)
    return text, raw, [NUL_REPAIR] if had_nul else []


def failed_answer(error: str) -> dict[str, Any]:
    """The answer fields of a call left without a usable reply (its error, cleaned and cut)."""
    return {
        "ok": False,
        "error": redact(error.replace("\x00", "\ufffd"))[:500],
        "repaired": [],
        "judgment": None,
        "response_text": None,
        "response_raw": None,
        "latency_s": 0.0,
    }


@dataclass
class RunReport:
    """What one invocation of :func:`execute` did, updated as calls are answered."""

    planned: int = 0
    already_done: int = 0
    retried: int = 0
    to_do: int = 0
    done: int = 0
    calls_made: int = 0
    """Requests sent to the judge, retries included (``attempts`` in the summary)."""
    cache_hits: int = 0
    failures: int = 0
    duplicates: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False
    usage_unknown: int = 0
    """Answers whose server reported no token usage: the tokens and cost are unknown."""
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None
    capped: int = 0
    interrupted: int = 0
    """The signal that interrupted the run (0: none)."""
    stopped_at_once: bool = False

    @property
    def mostly_failed(self) -> bool:
        """Whether most of the calls this invocation answered failed."""
        return self.done > 0 and self.failures * 2 > self.done

    def failure_cause(self) -> str:
        """One line: how many calls failed, by reason, and the first error."""
        reasons = ", ".join(f"{reason} x{n}" for reason, n in self.errors.most_common())
        return f"{self.failures} of {self.done} calls failed ({reasons}); first: {self.first_error}"

    def as_dict(self) -> dict[str, Any]:
        """The report as a run summary's ``this_invocation``."""
        return {
            "planned": self.planned,
            "already_stored": self.already_done,
            "retried_failed": self.retried,
            "attempts": self.calls_made,
            "cache_hits": self.cache_hits,
            "failures": self.failures,
            "errors": dict(self.errors),
            "duplicate_answers": self.duplicates,
            "input_tokens": UNKNOWN if self.usage_unknown else self.input_tokens,
            "output_tokens": UNKNOWN if self.usage_unknown else self.output_tokens,
            "cost_usd": UNKNOWN if self.usage_unknown else round(self.cost_usd, 6),
            "answers_without_usage": self.usage_unknown,
            "unpriced_model": self.unpriced,
            "not_made_over_cost_cap": self.capped,
            "interrupted": self.interrupted > 0,
        }


Progress = Callable[[RunReport], None]
"""Called with the invocation's report after every answered call."""


class RunRows:
    """The rows of one run's calls in one session, and their storage; ``progress`` is called
    after each stored row."""

    def __init__(
        self,
        run: Run,
        spec: RunSpec,
        backend: str,
        model: str,
        *,
        session: Session,
        progress: Progress | None = None,
    ) -> None:
        self.run, self.spec, self.session, self.progress = run, spec, session, progress
        self.backend, self.model = backend, model
        self.report = RunReport()
        self._replacing: dict[Slot, int] = {}
        self.stopped = False

    def key(self, planned: PlannedCall, rendered: Rendered, *, server: bool = True) -> str:
        """The call's content key (its cache key and batch custom id; see :func:`content_key`)."""
        spec, repeat = self.spec, planned.repeat_index
        return content_key(self.backend, self.model, rendered, spec, repeat, server=server)

    def prepare(self, calls: Iterable[PlannedCall]) -> list[Prepared]:
        """Each call with its rendered prompt and content key."""
        structured = self.spec.structured_output
        return [(p, r, self.key(p, r)) for p in calls for r in [p.render(structured=structured)]]

    def base(self, planned: PlannedCall, rendered: Rendered, key: str) -> dict[str, Any]:
        """The columns of the call's row that do not depend on the answer."""
        item = planned.item
        return {
            "run_id": self.run.id,
            "item_id": planned.item_db_id,
            "execution": planned.execution,
            "call_index": planned.call_index,
            "repeat_index": planned.repeat_index,
            "order": list(planned.order),
            "keys": list(rendered.keys),
            "content_key": key,
            "request": {
                "backend": self.backend,
                "model": self.model,
                "system": rendered.system,
                "user": rendered.user,
                "schema": rendered.schema,
                "temperature": self.spec.temperature,
                "max_tokens": self.spec.max_tokens,
            },
            "request_texts": (item.prompt, [item.text_of(cid) for cid in planned.order]),
        }

    def parse(self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply) -> dict[str, Any]:
        """Fields of the row that come from the answer: ok, error, repairs, judgment."""
        if reply.refusal:
            return {"ok": False, "error": "refusal", "repaired": [], "judgment": None}
        parsed: Parsed | PairParsed
        if planned.pairwise:
            parsed = parse_pairwise(reply.text, rendered.key_to_id)
            judgment: dict[str, Any] = {"verdict": parsed.verdict, "confidence": parsed.confidence}
        else:
            parsed = parse_listwise(reply.text, rendered.key_to_id, planned.order)
            judgment = {
                "factuality": parsed.factuality,
                "hallucination_risk": parsed.hallucination_risk,
                "ranking": list(parsed.ranking),
                "confidence": parsed.confidence,
            }
        return {
            "ok": parsed.ok,
            "error": parsed.error,
            "repaired": list(parsed.repaired),
            "judgment": judgment if parsed.ok else None,
        }

    async def answered(
        self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply
    ) -> dict[str, Any]:
        """Fields of the row that come from a judge's reply; a long answer is parsed in a worker
        thread, so the event loop keeps serving the calls in flight."""
        if len(reply.text) < INLINE_PARSE_CHARS:
            return self._answer_fields(planned, rendered, reply)
        return await asyncio.to_thread(self._answer_fields, planned, rendered, reply)

    def _answer_fields(
        self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply
    ) -> dict[str, Any]:
        text, raw, repairs = stored_reply(reply)
        parsed = self.parse(planned, rendered, dataclasses.replace(reply, text=text))
        return parsed | {
            "repaired": repairs + parsed["repaired"],
            "response_text": text,
            "response_raw": raw,
            "latency_s": reply.latency_s,
        }

    def from_cache(
        self, planned: PlannedCall, rendered: Rendered, key: str, hit: Call | None
    ) -> dict[str, Any] | None:
        """The row of a call the cache answers with ``hit``, or None without a hit or when
        ``hit`` does not parse against this call's keys (the same text may label other ids).
        A paid answer that failed (``hit`` not ok) is reused as it failed, unless this call is
        asked again (``--retry-failed``)."""
        if hit is None:
            return None
        reused = self.parse(planned, rendered, JudgeReply(text=hit.response_text or ""))
        if not reused["ok"]:
            if hit.ok or planned.slot in self._replacing:
                return None
            reused = {"ok": False, "error": hit.error, "repaired": hit.repaired, "judgment": None}
        self.report.cache_hits += 1
        return (
            self.base(planned, rendered, key)
            | reused
            | {
                "response_text": hit.response_text,
                "response_raw": hit.response_raw,
                "attempts": 0,
                "cached_from": hit.cached_from or hit.id,
            }
        )

    def cached(self, prepared: Sequence[Prepared]) -> tuple[list[dict[str, Any]], list[Prepared]]:
        """The rows of the calls the cache answers, and the calls left for the judge."""
        hits = cached_calls([key for *_, key in prepared], session=self.session)
        rows: list[dict[str, Any]] = []
        rest = []
        for planned, rendered, key in prepared:
            row = self.from_cache(planned, rendered, key, hits.get(key))
            if row is None:
                rest.append((planned, rendered, key))
            else:
                rows.append(row)
        return rows, rest

    def retry(self, failed: Iterable[Call]) -> int:
        """Store the next answers at these failed calls' slots as replacements; returns how many."""
        slots = {(call.item_id, call.execution, call.call_index): call.id for call in failed}
        self._replacing |= slots
        return len(slots)

    def commit(self, rows: list[dict[str, Any]], *, also: Callable[[], None] | None = None) -> None:
        """Store rows of calls in one transaction, with a plain INSERT (this runs in the event
        loop once per call), and what ``also`` writes. A call another writer stored meanwhile is
        kept as a duplicate; an error other than a lost connection stops the run."""
        try:
            self._store(rows, also)
        except IntegrityError:  # rolled back: store them one by one
            for row in rows:
                self._commit_alone(row, also)
        except Exception:
            self.stopped = True
            raise
        for row in rows:
            if not row["ok"]:
                self.report.failures += 1
                self.report.errors[(row["error"] or "failed").split(":")[0]] += 1
                self.report.first_error = self.report.first_error or row["error"]
            self.report.done += 1
            if self.progress:
                self.progress(self.report)

    def _store(self, rows: list[dict[str, Any]], also: Callable[[], None] | None) -> None:
        """Commit new calls, and new answers of retried failed calls."""
        new = [row for row in rows if slot_of(row) not in self._replacing]
        retried = {self._replacing[slot_of(r)]: r for r in rows if slot_of(r) in self._replacing}

        def write() -> None:
            if also is not None:
                also()
            if new:
                insert_calls(new, session=self.session)
            if retried:
                replace_calls(retried, session=self.session)

        commit_retrying(self.session, write)
        for row in rows:
            self._replacing.pop(slot_of(row), None)

    def _commit_alone(self, row: dict[str, Any], also: Callable[[], None] | None) -> None:
        """Store one call, or keep it as a duplicate when its slot is taken."""
        try:
            self._store([row], also)
        except IntegrityError:

            def duplicate() -> None:
                if also is not None:
                    also()
                keep_duplicate_answers([row], session=self.session)

            commit_retrying(self.session, duplicate)
            self.report.duplicates += 1


def slot_of(row: dict[str, Any]) -> Slot:
    """Where a row's call sits in its run."""
    return row["item_id"], row["execution"], row["call_index"]
