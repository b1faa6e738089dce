"""The names a run's settings and a dataset's format choose among (meanings in their modules),
free of numpy and pydantic so that ``pcf --help`` lists them and a spec is checked without them.
"""

from __future__ import annotations

RULES = ("eq5", "borda", "mean_score", "majority", "kemeny")
"""How the judgments of an item become one winner."""
SCHEDULES = ("balanced", "random", "exhaustive", "repeated")
"""How an item's calls order its candidates."""
POLICIES = ("off", "certain", "confident")
"""When an adaptive run stops calling for an item (``off``: never early)."""
ITEM_FORMATS = ("rewardbench2", "judgebench", "jsonl", "csv")
"""The dataset files :func:`pcf.items.load_dataset` reads."""
SIMULATED_MODEL = "sim-primacy"
"""The simulated judge's default model (see :mod:`pcf.judges.simulated`)."""
STRONG_BIAS_MODEL = "sim-strong-primacy"
"""The simulated judge with a strong position bias, for the demo's doubtful items."""
