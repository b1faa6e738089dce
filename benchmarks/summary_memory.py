"""Summary memory: the resident memory of each step that stores a run's results
(:func:`pcf.analysis.precompute.keep_results`), on a copy of a database kept by
``benchmarks.scale --keep``, with every stored result of the copy removed first.

The steps run in one process in ``keep_results``' order, freed memory given back between them
as there, as a ``pcf judge`` runs them once the calls are stored: the decision table (decoded
from what it stored), the overview against gold, the calibration, the packed run and the weight
diagnostics. After each: the process's peak (``ru_maxrss``) and its memory now (``VmRSS``).
The statistics libraries the steps load lazily are loaded first, so that a step's figure is its
own work, not an import. The process sets up as a ``pcf`` command does (``pcf.cli`` is imported
first: Arrow's system allocator).

    .venv/bin/python -m benchmarks.scale --items 60000 --skip-pages --keep /tmp/scale60k
    .venv/bin/python -m benchmarks.summary_memory /tmp/scale60k/scale.db

Last line: one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import tempfile
from pathlib import Path

MB = 1 << 20


def memory_now_mb() -> float:
    """This process's resident memory now."""
    status = Path("/proc/self/status").read_text().splitlines()
    (line,) = [s for s in status if s.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024 / MB


def peak_mb() -> float:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database", type=Path, help="a SQLite file kept by benchmarks.scale")
    parser.add_argument("--run", default="scale-pcf", help="the run whose results are stored")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcf-summary-") as folder:
        copy = Path(folder) / "copy.db"
        shutil.copy(args.database, copy)
        connection = sqlite3.connect(copy)
        with connection:
            connection.execute("DELETE FROM run_result")
        connection.close()
        figures = {"started": {"peak_mb": peak_mb(), "now_mb": memory_now_mb()}}
        import pcf.cli  # noqa: F401, PLC0415 - set up as a pcf command is, before any pyarrow
        from pcf.store import DATABASE_URL_ENV  # noqa: PLC0415

        os.environ[DATABASE_URL_ENV] = f"sqlite:///{copy}"
        figures |= measure_steps(args.run)
    for step, values in figures.items():
        print(f"{step:>12}: peak {values['peak_mb']:6.1f} MB, now {values['now_mb']:6.1f} MB")
    print(json.dumps({"run": args.run, "steps": figures}))


def measure_steps(run_name: str) -> dict[str, dict[str, float]]:
    """Each step of ``keep_results`` in its order, with the memory after it."""
    from scipy import special  # noqa: F401, PLC0415 - loaded lazily by the steps
    from sqlmodel import select  # noqa: PLC0415

    from pcf.analysis.against_labels import LABELLED_COLUMNS, calibration_archive, run_overview  # noqa: PLC0415
    from pcf.analysis.results import stored_analysis  # noqa: PLC0415
    from pcf.analysis.weight_playground import archived_packed_run, run_diagnostics  # noqa: PLC0415
    from pcf.processes import give_back_freed_memory  # noqa: PLC0415
    from pcf.store import Run, get_engine, session_scope  # noqa: PLC0415

    figures = {}

    def after(step: str) -> None:
        figures[step] = {"peak_mb": peak_mb(), "now_mb": memory_now_mb()}

    after("imports")
    with session_scope(get_engine()) as session:
        run = session.exec(select(Run).where(Run.name == run_name)).one()
        table = stored_analysis(run, session=session).table[list(LABELLED_COLUMNS)]
        after("analysis")
        give_back_freed_memory()
        run_overview(run, session=session, table=table)
        after("overview")
        give_back_freed_memory()
        calibration_archive(run, session=session, table=table)
        after("calibration")
        del table
        give_back_freed_memory()
        packed = archived_packed_run(run, session=session)
        after("packed")
        give_back_freed_memory()
        run_diagnostics(run, session=session, packed=packed)
        after("diagnostics")
    return figures


if __name__ == "__main__":
    main()
