"""Other tools' formats, read and written at the edge: Hugging Face datasets
(:mod:`~pcf.connectors.hf_datasets`), inspect_ai's task and eval logs
(:mod:`~pcf.connectors.inspect_task`, :mod:`~pcf.connectors.inspect_log`), judges' recorded
judgments (:mod:`~pcf.connectors.recordings`) and labels made elsewhere
(:mod:`~pcf.connectors.label_imports`). The method and the store never import them
(``tests/test_layout.py``)."""
