"""Runs, the write side, one step per module: the spec, the call plan, rows, management and
leases, live execution, provider batches, adaptive stopping, the estimate, the study and demo,
and background runs."""
