"""Everything the app's pages read of a run, computed and stored at once after the run's calls
change (``pcf judge``, a background run that ends), so that no page visit computes it."""

from __future__ import annotations

from sqlmodel import Session

from pcf.analysis.against_labels import LABELLED_COLUMNS, calibration_archive, run_overview
from pcf.analysis.results import is_adaptive, stored_analysis
from pcf.analysis.weight_playground import archived_packed_run, run_diagnostics
from pcf.processes import give_back_freed_memory
from pcf.store import Run


def keep_results(run: Run, *, session: Session) -> None:
    """Store the run's decisions, its figures against labels and, for a full listwise run, its
    packed judgments and weight diagnostics, for the current revision (flushed; the caller
    commits). Results already stored for that revision are left as they are."""
    table = stored_analysis(run, session=session).table[list(LABELLED_COLUMNS)]
    give_back_freed_memory()
    run_overview(run, session=session, table=table)
    give_back_freed_memory()
    calibration_archive(run, session=session, table=table)  # stored, not read back
    has_gold = bool(table["gold"].notna().any())
    del table  # a large run's table is not held while its judgments are packed
    give_back_freed_memory()
    if run.protocol != "apoc" and not is_adaptive(run):
        packed = archived_packed_run(run, session=session)  # stored a group at a time
        give_back_freed_memory()
        if has_gold:
            run_diagnostics(run, session=session, packed=packed)
