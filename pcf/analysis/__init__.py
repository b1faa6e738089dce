"""Analysis, the read side of runs: decisions and data frames, weights, triage curves and
escalation, humans against judges. Labelling's own figures live in :mod:`pcf.labelling`."""
