"""From judgments to decisions: consensus winner, direct winner, instability and flags."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pcf.choices import RULES
from pcf.consensus import (
    RULE_WEIGHTS,
    Consensus,
    JudgmentArrays,
    consensus,
    consensus_ranking,
    kemeny,
    pack,
)
from pcf.instability import Instability, instability
from pcf.items import Item
from pcf.judgments import Judgment
from pcf.weights import DEFAULT_WEIGHTS, Weights


@dataclass(frozen=True)
class Decisions:
    """Decisions for the items of one :class:`JudgmentArrays` group.

    Attributes:
        ranking: (I, n) candidate columns best first (-1 rows without an ok judgment): by ``C``
            for Eq. 5 and its one-weight rules, the Kemeny ranking for ``kemeny``.
        kemeny_search: for ``kemeny``, ``exact`` (n <= 6) or ``local`` (a local search's
            optimum, n > 6); None for the other rules.
    """

    arrays: JudgmentArrays
    consensus: Consensus
    direct: Consensus
    instability: Instability
    ranking: np.ndarray
    kemeny_search: str | None = None

    def records(self) -> list[dict[str, Any]]:
        """One ``decisions.jsonl`` object per item."""
        a, c, d, ins = self.arrays, self.consensus, self.direct, self.instability
        winners = c.winner_ids(a)
        direct_winners = d.winner_ids(a)
        out = []
        for row, (item_id, ids) in enumerate(zip(a.item_ids, a.candidate_ids, strict=True)):
            has_ok = bool(ins.n_ok[row])

            def per_candidate(values: np.ndarray, row: int = row, ids: Sequence[str] = ids) -> dict:
                return {cid: _num(v) for cid, v in zip(ids, values[row], strict=True)}

            out.append(
                {
                    "item_id": item_id,
                    "winner": winners[row],
                    "ranking": [ids[col] for col in self.ranking[row] if col >= 0],
                    "consensus": per_candidate(c.score) if has_ok else {},
                    "flags": ins.flag_names(row),
                    "metrics": {
                        "top_agreement": _num(ins.top_agreement[row]),
                        "top_entropy": _num(ins.top_entropy[row]),
                        "kendall_w": _num(ins.kendall_w[row]),
                        "margin": _num(ins.margin[row]),
                        "slot_following": _num(ins.slot_following[row]),
                        "direct_winner": direct_winners[row],
                        "priority": _num(ins.priority[row]),
                        "n_ok": int(ins.n_ok[row]),
                        "n_calls": int(ins.n_calls[row]),
                        "components": {
                            "S": per_candidate(c.mean_score),
                            "B": per_candidate(c.borda),
                            "V": per_candidate(c.vote),
                            "U": per_candidate(c.certainty),
                        }
                        if has_ok
                        else {},
                    }
                    | ({"kemeny_search": self.kemeny_search} if self.kemeny_search else {}),
                }
            )
        return out


def _num(value: float) -> float | None:
    """A metric for JSON: rounded to 6 decimals, None for NaN, never ``-0.0``."""
    value = float(value)
    return None if math.isnan(value) else round(value, 6) + 0.0


def _apply_rule(
    arrays: JudgmentArrays, rule: str, weights: Weights
) -> tuple[Consensus, np.ndarray, str | None]:
    """The rule's consensus (its winner), full ranking and, for Kemeny, how it was found."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(RULES)}")
    result = consensus(arrays, RULE_WEIGHTS.get(rule, weights))
    if rule != "kemeny":
        return result, consensus_ranking(result), None
    ranking, exact = kemeny(arrays)
    search = "exact" if exact else "local"
    return dataclasses.replace(result, winner=ranking[:, 0]), ranking, search


def decide(
    arrays: JudgmentArrays,
    *,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
) -> Decisions:
    """Decide every item of a group.

    Args:
        arrays: packed judgments.
        weights: Eq. 5 weights (used by ``eq5`` and for the consensus scores of ``kemeny``).
        k: keep the first K calls of each execution (K ablation by prefixes).
        executions: keep each item's first this many executions.
        rule: one of :data:`pcf.consensus.RULES`; direct applies the same rule to the
            canonical call alone (call_index 0 of execution 0).
    """
    used = arrays.prefix(k, executions)
    result, ranking, search = _apply_rule(used, rule, weights)
    baseline, _, _ = _apply_rule(arrays.execution(0).prefix(k=1), rule, weights)
    return Decisions(
        used,
        result,
        baseline,
        instability(used, result, baseline.winner),
        ranking,
        search,
    )


def aggregate(
    judgments: Iterable[Judgment],
    *,
    items: Sequence[Item] | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
) -> list[dict[str, Any]]:
    """``decisions.jsonl`` records for every judged item.

    Items come out in the items file's order when ``items`` is given (its listing order also
    breaks exact ties), else in order of first appearance in ``judgments``.
    """
    judgments = list(judgments)
    listing: dict[str, Sequence[str]] | None = (
        {i.item_id: i.candidate_ids for i in items} if items else None
    )
    records: dict[str, dict[str, Any]] = {}
    for group in pack(judgments, listing):
        for record in decide(
            group, weights=weights, k=k, executions=executions, rule=rule
        ).records():
            records[record["item_id"]] = record
    order = (
        [i.item_id for i in items] if items else list(dict.fromkeys(j.item_id for j in judgments))
    )
    return [records[i] for i in order if i in records]
