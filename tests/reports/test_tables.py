"""The runs table (pcf/reports/tables.py)."""

from __future__ import annotations

from pcf.reports.tables import RUN_FIELDS, runs_table
from pcf.runs.study import DEMO_RUNS
from pcf.store import run_listing

RUN_COLUMNS = tuple(RUN_FIELDS.values())


def test_runs_table_has_one_row_per_run(db):
    table = runs_table(run_listing(session=db))
    assert tuple(table.columns) == RUN_COLUMNS
    assert table["run"].tolist() == [spec.run_name for spec in DEMO_RUNS]
    pcf = table.set_index("run").loc["demo-pcf"]
    # The canonical calls were answered by the cache: demo-direct had made them.
    assert (pcf["calls"], pcf["cache hits"]) == (52 * 7 * 3 - 52, 52)
    assert (pcf["K"], pcf["judge"]) == (7, "simulated/sim-primacy")
