"""Runs, the write side, one step per module: what a run is (:mod:`~pcf.runs.spec`), the
calls it makes (:mod:`~pcf.runs.call_plan`), their rows and how they are stored
(:mod:`~pcf.runs.rows`), creating and resuming runs under their lease
(:mod:`~pcf.runs.manage`), live execution (:mod:`~pcf.runs.live`), provider batches
(:mod:`~pcf.runs.batch`), adaptive stopping (:mod:`~pcf.runs.adaptive`), the cost estimate
(:mod:`~pcf.runs.estimate`), the paper's study and the demo (:mod:`~pcf.runs.study`), and runs
in background threads (:mod:`~pcf.runs.background`)."""
