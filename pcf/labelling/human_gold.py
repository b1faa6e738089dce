"""Human gold: what the people's labels say each item's right answer is, and where that came
from: its newest resolution, else the plan's N people's labels under its rule
(:data:`GOLD_RULE_TEXT`); waiting items and ``single_label``: docs/reviewing.md, "Gold".
Disagreeing items without a resolution are the reviewers' queue (:func:`disagreements`).
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
from pcf.labelling.adjudications import display_order
from pcf.labelling.plan import labelling_plan
from pcf.store import current_labels, items_named, resolutions

SOURCES = ("resolution", "unanimous", "majority", "dawid_skene")
GOLD_RULE_TEXT = {
    "unanimous": "every annotator's newest label is the same candidate",
    "majority": "the candidate chosen by strictly more annotators than any other",
    "dawid_skene": "Dawid-Skene's estimate (MACE over the candidates' listing positions A, B...), "
    "each annotator weighed by how often their answers agree with the estimated answers",
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
    """Human gold of a dataset's labelled or resolved items: ``gold`` (None where the labels
    give none; waiting items left out) and its ``source`` (:data:`SOURCES`) by item key, and the
    annotators' ``skills`` (``dawid_skene`` only)."""

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
    if rule == "unanimous":
        return votes[0] if len(set(votes)) == 1 and votes[0] not in RESERVED_CANDIDATE_IDS else None
    counted = Counter(v for v in votes if v not in RESERVED_CANDIDATE_IDS).most_common()
    tied = len(counted) > 1 and counted[0][1] == counted[1][1]
    return counted[0][0] if counted and not tied else None


DS_ITERATIONS = 200
DS_PSEUDOCOUNT = 0.01  # an answer never given keeps a small chance, ruling nothing out


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


HABIT_SHARE = 0.9
HABIT_MIN_LABELS = 10


def position_habits(labels: pd.DataFrame, items: Mapping[str, Item]) -> dict[str, float]:
    """Each person's favourite position share over their candidate choices (``labels``: none
    'cannot tell', of ``items``): as shown to them (shuffled, so knowing the answers cannot make
    it high) or as listed, where the others' choices on the same items are less one-sided (a
    dataset that lists the right answer first is not a habit)."""
    keys, names, choices = labels["item_key"], labels["annotator"], labels["choice"]
    placed = labels.assign(
        shown=[
            display_order(items[k], a).index(c) if c in items[k].candidate_ids else None
            for k, a, c in zip(keys, names, choices, strict=True)
        ],
        listed=[
            items[k].candidate_ids.index(c) if c in items[k].candidate_ids else None
            for k, c in zip(keys, choices, strict=True)
        ],
    )
    pairs = placed.merge(placed[["item_key", "annotator", "listed"]], on="item_key")
    pairs = pairs[pairs["annotator_x"] != pairs["annotator_y"]]
    shares = {}
    for person, mine in placed.dropna(subset=["listed"]).groupby("annotator"):
        share = float(mine["shown"].value_counts(normalize=True).max())
        favourite = mine["listed"].value_counts(normalize=True)
        theirs = pairs[pairs["annotator_x"] == person]["listed_y"]
        if theirs.empty or (theirs == favourite.index[0]).mean() < HABIT_SHARE / 2:
            share = max(share, float(favourite.iloc[0]))
        shares[str(person)] = share
    return shares


def habitual(labels: pd.DataFrame, items: Mapping[str, Item]) -> set[str]:
    """The people whose choices sit at one position (:func:`position_habits`): at least
    :data:`HABIT_SHARE` of at least :data:`HABIT_MIN_LABELS` candidate choices."""
    pairs = zip(labels["item_key"], labels["choice"], strict=True)
    counts = labels[[c in items[k].candidate_ids for k, c in pairs]].groupby("annotator").size()
    return {
        person
        for person, share in position_habits(labels, items).items()
        if counts.get(person, 0) >= HABIT_MIN_LABELS and share >= HABIT_SHARE
    }


def dawid_skene(
    labels: pd.DataFrame, items: Mapping[str, Item]
) -> tuple[dict[str, str | None], dict[str, float]]:
    """A spammer-aware Dawid-Skene model (MACE, Hovy et al. 2013): each item's estimated answer
    (None for 'none correct') and each annotator's estimated accuracy. One who always answers the
    first position shown (shuffled per person) weighs little, where one-coin Dawid-Skene took a
    constant answer for skill. One who answers one position by habit (:func:`habitual`) is never
    trusted while someone else labels: the model is fitted without their labels (beside one good
    annotator, a constant answer looked like the expert's), and their accuracy is the share of
    their labels that are the estimated answers. EM starts from the vote shares of everyone and of
    everyone but each person in turn; the fit of highest likelihood is kept.
    """
    usable = labels[(labels["choice"] != CANNOT_TELL) & labels["item_key"].isin(list(items))]
    if usable.empty:
        return {}, {}
    habits = habitual(usable, items)
    trusted = usable[~usable["annotator"].isin(list(habits))]
    if habits and not trusted.empty:
        answers, skills = _mace(trusted, items)
        for person in habits:
            mine = usable[usable["annotator"] == person]
            right = [
                answers.get(key) == choice
                for key, choice in zip(mine["item_key"], mine["choice"], strict=True)
            ]
            skills[person] = float(np.mean(right))
        return answers, skills
    return _mace(usable, items)


def _mace(
    usable: pd.DataFrame, items: Mapping[str, Item]
) -> tuple[dict[str, str | None], dict[str, float]]:
    """:func:`dawid_skene`'s model fitted on ``usable`` labels (none 'cannot tell')."""
    item_of, keys = pd.factorize(usable["item_key"].astype(str))
    workers, worker_of = np.unique(usable["annotator"].to_numpy(dtype=str), return_inverse=True)
    k = max(len(items[key].candidates) for key in keys)
    none = k  # the answer 'none correct' (as is any choice not a candidate)
    chosen = np.array(
        [
            items[key].candidate_ids.index(c) if c in items[key].candidate_ids else none
            for key, c in zip(usable["item_key"], usable["choice"], strict=True)
        ]
    )
    possible = np.zeros((len(keys), k + 1), dtype=bool)
    for i, key in enumerate(keys):
        possible[i, : len(items[key].candidates)] = True
    possible[:, none] = True
    fits = []
    for left_out in (-1, *range(len(workers) if len(workers) > 1 else 0)):
        start = np.full(possible.shape, 1e-3) * possible
        counted = worker_of != left_out
        np.add.at(start, (item_of[counted], chosen[counted]), 1.0)
        fits.append(_fit_mace(item_of, worker_of, chosen, possible, start / start.sum(1)[:, None]))
    posterior, _ = max(fits, key=lambda fit: fit[1])
    best = posterior.argmax(axis=1)
    answers = {
        key: items[key].candidate_ids[best[i]] if best[i] != none else None
        for i, key in enumerate(keys)
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
    """Human gold, in label order, from current ``labels`` and the resolutions (oldest first)
    under the plan (``items``: the labelled items, for ``dawid_skene``)."""
    gold: dict[str, str | None] = {}
    source: dict[str, str | None] = {}
    single: set[str] = set()
    waiting: list[str] = []
    estimated, skills = dawid_skene(labels, items or {}) if rule == "dawid_skene" else ({}, {})
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
    """Items, in label order, whose current labels disagree and that nobody resolved yet."""
    done = set(resolved["item_key"])
    return [
        str(item_key)
        for item_key, choices in labels.groupby("item_key", sort=False)["choice"]
        if str(item_key) not in done and len(set(_votes(choices))) > 1
    ]


def dataset_gold(dataset_id: int, *, session: Session) -> HumanGold:
    """:func:`human_gold` of a stored dataset under its plan."""
    plan = labelling_plan(dataset_id, session=session)
    labels = current_labels(dataset_id, session=session)
    items = None
    if plan.gold_rule == "dawid_skene":
        labelled = items_named(
            dataset_id, labels["item_key"].unique(), session=session, texts=False
        )
        items = {item.item_id: item for item in labelled}
    return human_gold(
        labels,
        resolutions(dataset_id, session=session),
        rule=plan.gold_rule,
        items=items,
        labels_per_item=plan.labels_per_item,
        adaptive=plan.adaptive,
    )


def needs_more_labels(table: pd.DataFrame | None, labels: pd.DataFrame) -> set[str]:
    """Where an adaptive plan asks for more than one label: items flagged in the run's decision
    ``table`` (None: no run), or whose current labels disagree with each other or its winner."""
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
