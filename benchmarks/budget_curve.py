"""The Weights page's adaptive budget curve (`pcf.analysis.whatif.budget_curve`) on each PCF
run of the demo database (`pcf demo`, built afresh in a temporary SQLite file): the full run,
`certain` and `confident` at five risks replayed on the run's stored calls. Median wall time
of 3 after one warm-up, and the CPU time of the process (what the wall time is on an idle
machine: the replay uses one core); target 3 s. Last line: JSON figures."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from pcf.access import operator
from pcf.analysis.whatif import budget_curve
from pcf.runs.study import build_demo
from pcf.store import get_engine, get_run, session_scope

RUNS = 3


def seconds(url: str, name: str) -> tuple[float, float]:
    """Median wall and CPU time of the budget curve of run ``name``, each in a fresh session."""
    engine = get_engine(url)
    wall, cpu = [], []
    for attempt in range(RUNS + 1):
        with session_scope(engine) as session:
            run = get_run(name, session=session)
            assert run is not None
            start, start_cpu = time.perf_counter(), time.process_time()
            budget_curve(run, session=session)
            if attempt:  # the first one warms the caches
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
    engine.dispose()
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pcf-budget-") as folder:
        url = f"sqlite:///{Path(folder) / 'demo.db'}"
        engine = get_engine(url)
        with session_scope(engine) as session:
            made = build_demo(session=session, actor=operator())
            names = [run.name for run, _ in made if run.protocol == "pcf"]
        engine.dispose()
        times = {name: seconds(url, name) for name in names}
    for name, (wall, cpu) in times.items():
        print(f"budget curve of {name}: {wall:.3f} s wall, {cpu:.3f} s CPU (target 3 s)")
    wall_s = {name: round(wall, 3) for name, (wall, _) in times.items()}
    cpu_s = {name: round(cpu, 3) for name, (_, cpu) in times.items()}
    print(json.dumps({"wall_s": wall_s, "cpu_s": cpu_s, "worst_cpu_s": max(cpu_s.values())}))


if __name__ == "__main__":
    main()
