"""Reports of studies and runs: collecting the data (:mod:`~pcf.reports.collect`), the tables
(:mod:`~pcf.reports.tables`), the charts (:mod:`~pcf.reports.charts`), the document
(:mod:`~pcf.reports.document`) and its rendering as Markdown, HTML and PNG
(:mod:`~pcf.reports.render`)."""
