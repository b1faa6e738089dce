"""Runs, the write side: what a run is (:mod:`~pcf.runs.spec`), the engine that plans and
answers its calls (:mod:`~pcf.runs.engine`), creating and resuming runs
(:mod:`~pcf.runs.manage`), their cost estimate (:mod:`~pcf.runs.estimate`), the paper's study
and the demo (:mod:`~pcf.runs.study`), and runs in background threads
(:mod:`~pcf.runs.background`)."""
