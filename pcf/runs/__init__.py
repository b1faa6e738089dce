"""Runs, the write side, one step per module: spec, call plan, rows, management and leases, live
execution, provider batches, adaptive stopping, estimate, study and demo, background runs."""
