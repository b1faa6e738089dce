"""A dataset's labelling plan: people's labels per item (adaptive: beyond the first only where
needed), the gold rule, the guidelines, the random calibration share served first regardless of
doubt, and the escalated items sent next."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.guarantees import random_order
from pcf.store import (
    Dataset,
    Run,
    add_audit_event,
    get_plan,
    item_positions,
    lock_plan,
    save_plan,
)

GOLD_RULES = ("unanimous", "majority", "dawid_skene")
"""How unresolved items' labels become gold (:mod:`pcf.labelling.human_gold`)."""
MAX_LABELS_PER_ITEM = 10
MAX_GUIDELINES_CHARS = 100_000


class PlanChangedError(Exception):
    """The plan changed since the version a change was made on (HTTP 412)."""


@dataclass(frozen=True)
class Plan:
    """The plan in force (a dataset without one has the defaults)."""

    labels_per_item: int = 1
    adaptive: bool = False
    gold_rule: str = "unanimous"
    guidelines: str = ""
    calibration_share: float = 0.0
    escalated: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        """A digest of the plan's content: equal for equal plans, other after any change (the
        HTTP API's ETag)."""
        text = json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def labelling_plan(dataset_id: int, *, session: Session) -> Plan:
    """The dataset's plan, or the default plan (one label per item, unanimous gold)."""
    stored = get_plan(dataset_id, session=session)
    if stored is None:
        return Plan()
    values = stored.model_dump(include={field.name for field in fields(Plan)})
    return Plan(**values | {"escalated": tuple(stored.escalated)})


def calibration_order(dataset_id: int, *, session: Session) -> list[str]:
    """The plan's random calibration share of the dataset's items, drawn by its seed, in the
    order drawn: the queue serves it in this order (never most doubtful first), so any part of
    it labelled so far is a random sample too."""
    share = labelling_plan(dataset_id, session=session).calibration_share
    dataset = session.get(Dataset, dataset_id)
    if not share or dataset is None:
        return []
    keys = [key for key, _, _ in item_positions(dataset_id, session=session)]
    return random_order(keys, round(share * len(keys)), "labelling", dataset.seed)


def human_calibration_items(dataset_id: int, *, session: Session) -> set[str]:
    """The keys of :func:`calibration_order`."""
    return set(calibration_order(dataset_id, session=session))


def set_plan(
    dataset_id: int,
    *,
    session: Session,
    actor: Actor,
    labels_per_item: int | None = None,
    adaptive: bool | None = None,
    gold_rule: str | None = None,
    guidelines: str | None = None,
    calibration_share: float | None = None,
    if_version: str | None = None,
) -> Plan:
    """Change the dataset's plan (what is None stays as it is); with ``if_version``, only if
    the plan's :attr:`Plan.version` is still that one.

    Raises:
        ValueError: no such dataset, or a value out of range (guidelines: too long or with NUL).
        PlanChangedError: the plan is no longer at ``if_version``.
    """
    actor = authorize(actor, Permission.PLAN_LABELLING, session=session)
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        raise ValueError(f"no dataset with id {dataset_id}")
    if if_version is not None:
        lock_plan(dataset_id, session=session)  # then read: a change at once waits for this one
        current = labelling_plan(dataset_id, session=session).version
        if current != if_version:
            raise PlanChangedError(
                f"the plan of {dataset.name!r} changed since version {if_version} (it is at "
                f"{current} now); read it again and make the change on it"
            )
    if labels_per_item is not None and not 1 <= labels_per_item <= MAX_LABELS_PER_ITEM:
        raise ValueError(f"labels per item must be 1 to {MAX_LABELS_PER_ITEM}")
    if gold_rule is not None and gold_rule not in GOLD_RULES:
        raise ValueError(f"unknown gold rule {gold_rule!r}; choose one of {', '.join(GOLD_RULES)}")
    if guidelines is not None and (len(guidelines) > MAX_GUIDELINES_CHARS or "\x00" in guidelines):
        raise ValueError(
            f"guidelines must be at most {MAX_GUIDELINES_CHARS:,} characters, without NUL"
        )
    if calibration_share is not None and not 0 <= calibration_share <= 1:
        raise ValueError("the calibration share must be 0 to 1")
    given: dict[str, object] = {
        "labels_per_item": labels_per_item,
        "adaptive": adaptive,
        "gold_rule": gold_rule,
        "guidelines": guidelines,
        "calibration_share": calibration_share,
    }
    changes = {name: value for name, value in given.items() if value is not None}
    save_plan(dataset_id, session=session, updated_by=actor.identity, **changes)
    details = {k: v for k, v in changes.items() if k != "guidelines"}
    if "guidelines" in changes:
        details["guidelines_chars"] = len(guidelines or "")
    add_audit_event(
        "labelling_plan_set",
        session=session,
        actor=actor.identity,
        target=dataset.name,
        details=details,
    )
    return labelling_plan(dataset_id, session=session)


def queue_escalated(run: Run, item_keys: list[str], *, session: Session, actor: Actor) -> None:
    """Serve ``item_keys`` (escalated by ``pcf escalate``) after the calibration share, before
    the others, in place of those sent before."""
    actor = authorize(actor, Permission.RESOLVE, session=session)
    save_plan(run.dataset_id, session=session, updated_by=actor.identity, escalated=item_keys)
    add_audit_event(
        "escalated_queued",
        session=session,
        actor=actor.identity,
        target=run.name,
        details={"items": len(item_keys)},
    )
