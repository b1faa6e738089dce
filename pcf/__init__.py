"""PCF Review: permutation-consensus factuality judging.

The public API: load items, schedule orderings, render prompts, parse answers, and turn
judgments into consensus decisions with order-instability flags.
"""

from pcf.consensus import PRESETS, RULES, JudgmentArrays, Weights, consensus, pack, winners
from pcf.decisions import Decisions, aggregate, decide
from pcf.errors import DataError, Problem
from pcf.evaluation import compare_paired
from pcf.instability import FLAG_HELP, FLAGS, slot_bias
from pcf.items import FORMATS, Candidate, Item, load_dataset
from pcf.judgments import Judgment, read_judgments, write_judgments
from pcf.orderings import SCHEDULES, canonical_order, schedule, slot_coverage
from pcf.pairwise import apoc_decide, is_ballpark_question
from pcf.parsing import parse_listwise, parse_pairwise
from pcf.prompts import neutral_keys, render_listwise, render_pairwise

__all__ = [
    "FLAGS",
    "FLAG_HELP",
    "FORMATS",
    "PRESETS",
    "RULES",
    "SCHEDULES",
    "Candidate",
    "DataError",
    "Decisions",
    "Item",
    "Judgment",
    "JudgmentArrays",
    "Problem",
    "Weights",
    "aggregate",
    "apoc_decide",
    "canonical_order",
    "compare_paired",
    "consensus",
    "decide",
    "is_ballpark_question",
    "load_dataset",
    "neutral_keys",
    "pack",
    "parse_listwise",
    "parse_pairwise",
    "read_judgments",
    "render_listwise",
    "render_pairwise",
    "schedule",
    "slot_bias",
    "slot_coverage",
    "winners",
    "write_judgments",
]
