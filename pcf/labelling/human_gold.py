"""Human gold: what the people's labels say each item's right answer is, and where that came
from.

An item's human gold is its **resolution** (a reviewer's decision, the newest one) when it has
one; otherwise what its labels give under the dataset's plan (:data:`GOLD_RULE_TEXT`):

- ``unanimous`` (the default): every person's current label is the same candidate;
- ``majority``: the candidate chosen by strictly more people than any other;
- ``dawid_skene``: the one-coin Dawid-Skene estimate (crowd-kit), which weighs each person by
  the accuracy it estimates for them from all their labels.

Each person's current label (their newest) counts once; ``cannot_tell`` is no label;
``none_correct`` is a label (it can make labels disagree) but never gold. Items whose labels
disagree and have no resolution are the reviewers' queue (:func:`disagreements`).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from sqlmodel import Session

from pcf.flags import FLAGS
from pcf.items import RESERVED_CANDIDATE_IDS, letter_labels
from pcf.store.queries import current_labels, get_plan, items_named, resolutions

CANNOT_TELL = "cannot_tell"
NONE_CORRECT = "none_correct"
SOURCES = ("resolution", "unanimous", "majority", "dawid_skene")
GOLD_RULE_TEXT = {
    "unanimous": "every annotator's newest label is the same candidate",
    "majority": "the candidate chosen by strictly more annotators than any other",
    "dawid_skene": "the one-coin Dawid-Skene estimate, each annotator weighed by the accuracy "
    "it estimates for them",
}


def rule_text(rule: str) -> str:
    """One sentence on how an item gets its human gold under ``rule``, for pages and reports."""
    return (
        "An item's human gold is a reviewer's resolution where there is one, else "
        f"{GOLD_RULE_TEXT[rule]} ('cannot tell' is no label; 'none correct' is never gold). "
        "Items without human gold are left out of accuracy and kappa."
    )


@dataclass(frozen=True)
class HumanGold:
    """Human gold of a dataset's labelled or resolved items.

    Attributes:
        gold: item key -> gold candidate id, or None where the labels give none.
        source: item key -> where the gold came from (:data:`SOURCES`), or None.
        rule: the plan's rule for items without a resolution.
        skills: each annotator's estimated accuracy under ``dawid_skene`` (else empty).
    """

    gold: dict[str, str | None]
    source: dict[str, str | None]
    rule: str
    skills: dict[str, float]

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


def dawid_skene(
    labels: pd.DataFrame, positions: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str | None], dict[str, float]]:
    """One-coin Dawid-Skene over the labels: each item's estimated answer and each annotator's
    estimated accuracy.

    Candidates are compared by their listing letter (``positions``: item -> candidate id ->
    letter), so that the model's label set is the same on every item.
    """
    from crowdkit.aggregation import OneCoinDawidSkene  # noqa: PLC0415 - slow import

    usable = labels[labels["choice"] != CANNOT_TELL]
    if usable.empty:
        return {}, {}
    data = pd.DataFrame(
        {
            "task": usable["item_key"].to_numpy(),
            "worker": usable["annotator"].to_numpy(),
            "label": [
                positions[item].get(choice, choice)
                for item, choice in zip(usable["item_key"], usable["choice"], strict=True)
            ],
        }
    )
    with warnings.catch_warnings():  # crowd-kit's own use of pandas keywords pandas deprecates
        warnings.filterwarnings("ignore", module="crowdkit")
        model = OneCoinDawidSkene(n_iter=100).fit(data)
    by_letter = {item: {v: k for k, v in letters.items()} for item, letters in positions.items()}
    labels, skills = model.labels_, model.skills_
    assert labels is not None  # fit sets both
    assert skills is not None
    answers = {str(item): by_letter[item].get(letter) for item, letter in labels.to_dict().items()}
    return answers, {str(w): float(s) for w, s in skills.to_dict().items()}


def human_gold(
    labels: pd.DataFrame,
    resolved: pd.DataFrame,
    *,
    rule: str = "unanimous",
    positions: Mapping[str, Mapping[str, str]] | None = None,
) -> HumanGold:
    """Human gold of every item with labels or a resolution, in label order.

    Args:
        labels: current labels (:func:`pcf.store.current_labels`).
        resolved: resolutions, oldest first (:func:`pcf.store.queries.resolutions`).
        rule: ``unanimous``, ``majority`` or ``dawid_skene``.
        positions: listing letters of each item's candidates (``dawid_skene`` only).
    """
    gold: dict[str, str | None] = {}
    source: dict[str, str | None] = {}
    skills: dict[str, float] = {}
    estimated: dict[str, str | None] = {}
    if rule == "dawid_skene":
        estimated, skills = dawid_skene(labels, positions or {})
    for item_key, choices in labels.groupby("item_key", sort=False)["choice"]:
        item = str(item_key)
        value = estimated.get(item) if rule == "dawid_skene" else rule_gold(_votes(choices), rule)
        gold[item] = value if value not in RESERVED_CANDIDATE_IDS else None
        source[item] = rule if gold[item] is not None else None
    newest = resolved.drop_duplicates("item_key", keep="last")
    for item_key, choice in zip(newest["item_key"], newest["choice"], strict=True):
        gold[str(item_key)] = None if choice in RESERVED_CANDIDATE_IDS else choice
        source[str(item_key)] = "resolution"
    return HumanGold(gold, source, rule, skills)


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
    positions = None
    if rule == "dawid_skene":
        labelled = items_named(
            dataset_id, labels["item_key"].unique(), session=session, texts=False
        )
        positions = {item.item_id: letter_labels(item.candidate_ids) for item in labelled}
    return human_gold(
        labels,
        resolutions(dataset_id, session=session),
        rule=rule,
        positions=positions,
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
