"""Human gold: what the people's labels say each item's right answer is, and where that came
from.

An item's human gold is its **resolution** (a reviewer's decision, the newest one) when it has
one; otherwise what its labels give under the dataset's plan (:data:`GOLD_RULE_TEXT`), once the
item has the plan's N people's labels:

- ``unanimous`` (the default): every person's current label is the same candidate;
- ``majority``: the candidate chosen by strictly more people than any other;
- ``dawid_skene``: Dawid-Skene with a full confusion matrix per person over the positions the
  candidates were shown at (:func:`dawid_skene`), learned from all their labels.

An item with fewer labels than the plan asks has no gold yet (it is ``waiting``), except under
the adaptive plan, where one label is all an item gets unless it is doubtful: its gold is kept
and marked ``single_label``, as is any gold resting on one person's vote where the plan asks
for more (the other labels 'cannot tell').

Each person's current label (their newest) counts once; ``cannot_tell`` is no label;
``none_correct`` is a label (it can make labels disagree) but never gold. Items whose labels
disagree and have no resolution are the reviewers' queue (:func:`disagreements`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlmodel import Session

from pcf.flags import FLAGS
from pcf.items import CANNOT_TELL, RESERVED_CANDIDATE_IDS, Item
from pcf.store import current_labels, get_plan, items_named, resolutions

SOURCES = ("resolution", "unanimous", "majority", "dawid_skene")
GOLD_RULE_TEXT = {
    "unanimous": "every annotator's newest label is the same candidate",
    "majority": "the candidate chosen by strictly more annotators than any other",
    "dawid_skene": "Dawid-Skene's estimate, each annotator weighed by how they answer for each "
    "position the right candidate is shown at",
}


def rule_text(rule: str) -> str:
    """One sentence on how an item gets its human gold under ``rule``, for pages and reports."""
    return (
        "An item's human gold is a reviewer's resolution where there is one, else, once it has "
        f"the plan's labels, {GOLD_RULE_TEXT[rule]} ('cannot tell' is no label; 'none correct' "
        "is never gold). Items without human gold are left out of accuracy and kappa."
    )


@dataclass(frozen=True)
class HumanGold:
    """Human gold of a dataset's labelled or resolved items.

    Attributes:
        gold: item key -> gold candidate id, or None where the labels give none; items still
            waiting for the plan's labels are not in it.
        source: item key -> where the gold came from (:data:`SOURCES`), or None.
        rule: the plan's rule for items without a resolution.
        skills: each annotator's estimated accuracy under ``dawid_skene`` (else empty).
        single_label: items whose gold rests on one person's vote where the plan asks for more.
        waiting: items with fewer people's labels than the plan asks, and no resolution.
    """

    gold: dict[str, str | None]
    source: dict[str, str | None]
    rule: str
    skills: dict[str, float]
    single_label: frozenset[str] = frozenset()
    waiting: tuple[str, ...] = ()

    def known(self) -> dict[str, str]:
        """Items that have human gold."""
        return {item: g for item, g in self.gold.items() if g is not None}

    def source_counts(self) -> dict[str, int]:
        """How many items got their gold from each source, in :data:`SOURCES` order."""
        counted = Counter(s for s in self.source.values() if s is not None)
        return {source: counted[source] for source in SOURCES if counted[source]}


def _votes(choices: pd.Series) -> list[str]:
    return [c for c in choices if c != CANNOT_TELL]


def rule_gold(votes: list[str], rule: str) -> str | None:
    """An item's gold from its people's votes under ``unanimous`` or ``majority``."""
    if not votes:
        return None
    if rule == "unanimous":
        first = votes[0]
        return (
            first
            if first not in RESERVED_CANDIDATE_IDS and all(v == first for v in votes)
            else None
        )
    counted = Counter(v for v in votes if v not in RESERVED_CANDIDATE_IDS).most_common()
    tied = len(counted) > 1 and counted[0][1] == counted[1][1]
    return counted[0][0] if counted and not tied else None


DS_ITERATIONS = 200
DS_PSEUDOCOUNT = 0.01
"""Added to every count the model learns, so that an answer a person never gave keeps a small
chance rather than ruling an item's answer out."""


def _fit_mace(
    item_of: np.ndarray,
    worker_of: np.ndarray,
    chosen: np.ndarray,
    possible: np.ndarray,
    start: np.ndarray,
) -> tuple[np.ndarray, float]:
    """EM from the answer shares ``start`` (items x answers): the answers' posterior and the
    data's log-likelihood."""
    workers = int(worker_of.max()) + 1
    given = np.bincount(worker_of, minlength=workers)
    posterior = start
    knows = np.full(workers, 0.5)
    habit = np.full((workers, possible.shape[1]), 1 / possible.shape[1])
    labels = np.arange(len(chosen))
    log_likelihood = -np.inf
    for _ in range(DS_ITERATIONS):
        # M-step: how much of each label came from knowing the answer, not from habit
        right = posterior[item_of, chosen]
        kn = knows[worker_of]
        knowing = right * kn / (kn + (1 - kn) * habit[worker_of, chosen])
        knows = (np.bincount(worker_of, knowing, workers) + DS_PSEUDOCOUNT) / (
            given + 2 * DS_PSEUDOCOUNT
        )
        habit = np.full_like(habit, DS_PSEUDOCOUNT)
        np.add.at(habit, (worker_of, chosen), 1 - knowing)
        habit /= habit.sum(axis=1, keepdims=True)
        prior = posterior.sum(axis=0) + DS_PSEUDOCOUNT
        # E-step: P(answer | truth t) = knows * [answer == t] + (1 - knows) * habit[answer]
        kn = knows[worker_of]
        likelihood = np.repeat(((1 - kn) * habit[worker_of, chosen])[:, None], len(prior), 1)
        likelihood[labels, chosen] += kn
        joint = np.log(prior / prior.sum()) + np.zeros_like(posterior)
        np.add.at(joint, item_of, np.log(likelihood))
        joint[~possible] = -np.inf
        top = joint.max(axis=1, keepdims=True)
        posterior = np.exp(joint - top)
        total = posterior.sum(axis=1, keepdims=True)
        posterior /= total
        previous, log_likelihood = log_likelihood, float((top + np.log(total)).sum())
        if log_likelihood - previous < 1e-9:
            break
    return posterior, log_likelihood


def dawid_skene(
    labels: pd.DataFrame, items: Mapping[str, Item]
) -> tuple[dict[str, str | None], dict[str, float]]:
    """A spammer-aware Dawid-Skene model (MACE, Hovy et al. 2013): each item's estimated answer
    and each annotator's estimated accuracy (the expected share of their labels that are the
    item's answer).

    Each person, on each item, either knows the answer and gives it, or answers from a habit
    of their own: a distribution over listing positions (A, B... in the dataset's order, the
    label set every item shares) and 'none correct'. A person who always answers the same
    position is all habit and weighs nothing; one who always answers the first position they
    are shown (the Adjudicate page shuffles the order per person and item,
    :func:`pcf.labelling.adjudications.display_order`) answers at random in listing positions,
    a uniform habit. One-coin Dawid-Skene took a constant answer for skill. The class prior is
    learned; EM starts from the vote shares of everyone and of everyone but each person in
    turn, and the fit of highest likelihood is kept. An item whose best estimate is 'none
    correct' has no gold.
    """
    usable = labels[(labels["choice"] != CANNOT_TELL) & labels["item_key"].isin(list(items))]
    if usable.empty:
        return {}, {}
    keys = list(dict.fromkeys(usable["item_key"].astype(str)))
    row = {key: i for i, key in enumerate(keys)}
    workers, worker_of = np.unique(usable["annotator"].to_numpy(dtype=str), return_inverse=True)
    k = max(len(items[key].candidates) for key in keys)
    none = k  # the answer 'none correct' (as is any choice not a candidate)
    item_of = np.array([row[key] for key in usable["item_key"]])
    chosen = np.array(
        [
            items[key].candidate_ids.index(c) if c in items[key].candidate_ids else none
            for key, c in zip(usable["item_key"], usable["choice"], strict=True)
        ]
    )
    possible = np.zeros((len(keys), k + 1), dtype=bool)
    for key, i in row.items():
        possible[i, : len(items[key].candidates)] = True
    possible[:, none] = True
    fits = []
    for left_out in (-1, *range(len(workers) if len(workers) > 2 else 0)):
        start = np.full(possible.shape, 1e-3) * possible
        counted = worker_of != left_out
        np.add.at(start, (item_of[counted], chosen[counted]), 1.0)
        fits.append(_fit_mace(item_of, worker_of, chosen, possible, start / start.sum(1)[:, None]))
    posterior, _ = max(fits, key=lambda fit: fit[1])
    best = posterior.argmax(axis=1)
    answers = {
        key: items[key].candidate_ids[best[i]] if best[i] != none else None
        for key, i in row.items()
    }
    right = posterior[item_of, chosen]
    skills = {str(w): float(right[worker_of == j].mean()) for j, w in enumerate(workers)}
    return answers, skills


def human_gold(
    labels: pd.DataFrame,
    resolved: pd.DataFrame,
    *,
    rule: str = "unanimous",
    items: Mapping[str, Item] | None = None,
    labels_per_item: int = 1,
    adaptive: bool = False,
) -> HumanGold:
    """Human gold of every item with a resolution or the plan's labels, in label order.

    Args:
        labels: current labels (:func:`pcf.store.current_labels`).
        resolved: resolutions, oldest first (:func:`pcf.store.people.resolutions`).
        rule: ``unanimous``, ``majority`` or ``dawid_skene``.
        items: the labelled items (``dawid_skene`` only: their candidates and shown orders).
        labels_per_item: the plan's N: an item with fewer people's labels has no gold yet.
        adaptive: the adaptive plan, where one label may be an item's only one: then its gold
            is kept and marked ``single_label``.
    """
    gold: dict[str, str | None] = {}
    source: dict[str, str | None] = {}
    skills: dict[str, float] = {}
    estimated: dict[str, str | None] = {}
    single: set[str] = set()
    waiting: list[str] = []
    if rule == "dawid_skene":
        estimated, skills = dawid_skene(labels, items or {})
    for item_key, choices in labels.groupby("item_key", sort=False)["choice"]:
        item = str(item_key)
        if len(choices) < labels_per_item and not (adaptive and len(choices) == 1):
            waiting.append(item)
            continue
        votes = _votes(choices)
        value = estimated.get(item) if rule == "dawid_skene" else rule_gold(votes, rule)
        gold[item] = value if value not in RESERVED_CANDIDATE_IDS else None
        source[item] = rule if gold[item] is not None else None
        if gold[item] is not None and len(votes) == 1 and labels_per_item > 1:
            single.add(item)
    newest = resolved.drop_duplicates("item_key", keep="last")
    for item_key, choice in zip(newest["item_key"], newest["choice"], strict=True):
        gold[str(item_key)] = None if choice in RESERVED_CANDIDATE_IDS else choice
        source[str(item_key)] = "resolution"
    single -= set(newest["item_key"].astype(str))
    still = tuple(item for item in waiting if item not in gold)
    return HumanGold(gold, source, rule, skills, frozenset(single), still)


def disagreements(labels: pd.DataFrame, resolved: pd.DataFrame) -> list[str]:
    """Items, in label order, whose people's current labels disagree (two or more different
    votes) and that no reviewer resolved yet."""
    done = set(resolved["item_key"])
    out = []
    for item_key, choices in labels.groupby("item_key", sort=False)["choice"]:
        if str(item_key) not in done and len(set(_votes(choices))) > 1:
            out.append(str(item_key))
    return out


def dataset_gold(dataset_id: int, *, session: Session) -> HumanGold:
    """:func:`human_gold` of a stored dataset under its plan's rule."""
    plan = get_plan(dataset_id, session=session)
    rule = plan.gold_rule if plan is not None else "unanimous"
    labels = current_labels(dataset_id, session=session)
    items = None
    if rule == "dawid_skene":
        labelled = items_named(
            dataset_id, labels["item_key"].unique(), session=session, texts=False
        )
        items = {item.item_id: item for item in labelled}
    return human_gold(
        labels,
        resolutions(dataset_id, session=session),
        rule=rule,
        items=items,
        labels_per_item=plan.labels_per_item if plan is not None else 1,
        adaptive=plan.adaptive if plan is not None else False,
    )


def needs_more_labels(table: pd.DataFrame | None, labels: pd.DataFrame) -> set[str]:
    """Where an adaptive plan asks for more than one label: items with an instability flag,
    or whose labels disagree with each other or with the run's PCF winner.

    Args:
        table: the run's decision table (``RunAnalysis.table``), or None without a run (then
            only disagreeing labels count).
        labels: current labels.
    """
    doubtful: set[str] = set()
    winners: dict[str, object] = {}
    if table is not None:
        flagged = table[list(FLAGS)].any(axis=1)
        doubtful |= set(table.loc[flagged, "item_id"])
        winners = dict(zip(table["item_id"], table["winner"], strict=True))
    for item_key, choices in labels.groupby("item_key", sort=False)["choice"]:
        votes = set(_votes(choices))
        if len(votes) > 1 or (item_key in winners and votes - {winners[item_key]}):
            doubtful.add(str(item_key))
    return doubtful
