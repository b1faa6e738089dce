"""Analysis, the read side: stored runs turned into decisions and data frames, recomputed on
demand and never stored. A run's results (:mod:`~pcf.analysis.results`), the review list
(:mod:`~pcf.analysis.item_list`), one item in detail (:mod:`~pcf.analysis.item_detail`), texts
from the data made inert for a page (:mod:`~pcf.analysis.markdown`), humans against judges
(:mod:`~pcf.analysis.agreement`) and the weight playground
(:mod:`~pcf.analysis.weight_playground`). Labelling's own figures live in :mod:`pcf.labelling`."""
