"""Throughput of decisions with flags: 100,000 random items, K=7 calls, n=4 candidates.

Measures `pcf.decisions.decide` (consensus, direct, instability metrics, flags, priority) on
packed arrays, best of 5 runs, and separately the cost of packing Judgment objects (the
Python-side step from stored judgments to arrays) on 10,000 items. Last line: JSON figures.
"""

from __future__ import annotations

import json
import time

import numpy as np

from pcf.consensus import JudgmentArrays, pack
from pcf.decisions import decide
from pcf.judgments import Judgment

ITEMS, K, N = 100_000, 7, 4


def random_arrays(items: int, rng: np.random.Generator) -> JudgmentArrays:
    """Random ok judgments: scores, ranks consistent with scores, random slot orders."""
    shape = (items, 1, K, N)
    factuality = rng.uniform(0, 10, shape)
    rank = (np.argsort(np.argsort(-factuality, axis=-1), axis=-1) + 1).astype(np.int8)
    slot = np.argsort(rng.random(shape), axis=-1).astype(np.int8)
    ok = rng.random(shape[:3]) > 0.02
    factuality[~ok] = np.nan
    rank[~ok] = 0
    ids = [("a", "b", "c", "d")] * items
    return JudgmentArrays(
        [str(i) for i in range(items)],
        ids,
        [0],
        factuality,
        rng.uniform(0, 1, shape),
        rank,
        slot,
        ok,
        np.ones(shape[:3], dtype=bool),
    )


def random_judgments(items: int, rng: np.random.Generator) -> list[Judgment]:
    ids = ("a", "b", "c", "d")
    out = []
    for i in range(items):
        for call in range(K):
            order = tuple(rng.permutation(ids).tolist())
            scores = dict(zip(ids, rng.uniform(0, 10, N).round(2).tolist(), strict=True))
            risk = dict(zip(ids, rng.uniform(0, 1, N).round(2).tolist(), strict=True))
            ranking = tuple(sorted(ids, key=lambda c: -scores[c]))
            out.append(Judgment(str(i), 0, call, order, True, None, scores, risk, ranking, 0.5))
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    arrays = random_arrays(ITEMS, rng)
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        result = decide(arrays)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    flagged = int(result.instability.flags["order_unstable"].sum())
    print(f"decide: {ITEMS:,} items x K={K} x n={N}: best {best * 1000:.1f} ms of 5 runs")
    print(f"  order_unstable flagged on {flagged:,} items (random judgments)")

    judgments = random_judgments(10_000, rng)
    start = time.perf_counter()
    pack(judgments)
    pack_s = time.perf_counter() - start
    print(f"pack: 10,000 items ({len(judgments):,} Judgment objects) in {pack_s * 1000:.0f} ms")
    print(
        json.dumps(
            {
                "items": ITEMS,
                "k": K,
                "n": N,
                "decide_s": round(best, 4),
                "items_per_s": round(ITEMS / best),
                "pack_items_per_s": round(10_000 / pack_s),
            }
        )
    )


if __name__ == "__main__":
    main()
