"""Small deterministic factories for test data."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pcf.items import Candidate, Item
from pcf.judgments import Judgment


def make_item(item_id: str = "i1", n: int = 4, gold: str | None = "c0") -> Item:
    """An item with candidates c0..c{n-1}."""
    cands = tuple(Candidate(f"c{i}", f"Answer number {i}.") for i in range(n))
    return Item(item_id, f"Question {item_id}?", cands, gold)


def judgment(
    item_id: str,
    call_index: int,
    order: Sequence[str],
    factuality: dict[str, float],
    *,
    execution: int = 0,
    risk: dict[str, float] | None = None,
    ranking: Sequence[str] | None = None,
    ok: bool = True,
) -> Judgment:
    """A judgment whose ranking follows factuality (ties by slot) unless given."""
    order = tuple(order)
    if not ok:
        return Judgment(item_id, execution, call_index, order, False, "no_json")
    if ranking is None:
        ranking = sorted(order, key=lambda c: (-factuality[c], order.index(c)))
    risk = risk if risk is not None else dict.fromkeys(order, 0.5)
    return Judgment(
        item_id,
        execution,
        call_index,
        order,
        True,
        None,
        dict(factuality),
        risk,
        tuple(ranking),
        0.8,
    )


def random_judgments(
    rng: random.Random,
    item_id: str,
    ids: Sequence[str],
    k: int,
    executions: int = 1,
    fail_rate: float = 0.0,
) -> list[Judgment]:
    """Random judgments (integer scores, so exact ties happen) over random orders."""
    out = []
    for e in range(executions):
        for c in range(k):
            order = list(ids)
            rng.shuffle(order)
            if rng.random() < fail_rate:
                out.append(judgment(item_id, c, order, {}, execution=e, ok=False))
                continue
            scores = {cid: float(rng.randint(0, 10)) for cid in ids}
            risk = {cid: rng.choice([0.0, 0.25, 0.5, 1.0]) for cid in ids}
            ranking = list(ids)
            rng.shuffle(ranking)
            out.append(judgment(item_id, c, order, scores, execution=e, risk=risk, ranking=ranking))
    return out
