"""Reports of studies and runs: collect the data, build tables, charts and the document, render."""
