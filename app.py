"""PCF Review, the Streamlit app (`make run`): the frame of every page, the navigation over the
files in ``pages/`` and the shared sidebar. Shared page code is in ``pages/shared/``."""

from __future__ import annotations

import streamlit as st

from pages.shared import app_frame, pages_for, sidebar, sign_in
from pcf.analysis.markdown import escape_markdown
from pcf.store import database_url, storage_problem


def main() -> None:
    """Sign the visitor in, then run their page in the app's frame; an unusable database (a full
    disk, a read-only file, a file moved away) shows in one line instead of a traceback."""
    st.set_page_config(page_title="PCF Review", page_icon="🔎", layout="wide")
    try:
        actor = sign_in()
        navigation = st.navigation(pages_for(actor))
        sidebar(actor)
        with app_frame(actor):
            navigation.run()
    except Exception as exc:  # any other error goes on
        if (problem := storage_problem(exc, database_url())) is None:
            raise
        st.error(f"The database cannot be used: {escape_markdown(problem)}.")


# Streamlit runs this file as __main__ for each page view. `streamlit run app.py` first finds
# `app` below and serves it: the pages and, beside them on the same port, the HTTP API at
# /api/v1 (pcf.api), once its lifespan has loaded the pages' slow imports. Another process that
# imports the module (multiprocessing's spawn) builds the server object only, and serves nothing.
if __name__ == "__main__":
    main()
else:
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager
    from typing import Any

    from pcf.api import resuming, routes

    @asynccontextmanager
    async def serving(server: Any) -> AsyncIterator[None]:
        """The server's lifespan: before the first request, load what the first page view
        would otherwise load (Altair and its Vega-Lite schema for the charts, pyarrow's
        datasets for the stored results, SciPy's tests for the summaries,
        Streamlit's emoji and icon tables for the page icons, the ORM's mappers, the files of
        the loaded modules: about a second on a quiet machine);
        then resume submitted runs."""
        import inspect  # noqa: PLC0415 - loaded here, in the server alone

        import altair as alt  # noqa: PLC0415
        import pandas as pd  # noqa: PLC0415
        import pyarrow.dataset  # noqa: F401, PLC0415
        import scipy.stats  # noqa: F401, PLC0415
        import streamlit.emojis  # noqa: PLC0415
        import streamlit.material_icon_names  # noqa: F401, PLC0415
        from sqlalchemy.orm import configure_mappers  # noqa: PLC0415

        import pcf.reports.charts  # noqa: F401, PLC0415

        alt.Chart(pd.DataFrame({"x": [0]})).mark_bar().encode(x="x:Q").to_dict()  # the schema
        configure_mappers()  # the models' mappers, which the first query would configure
        # Streamlit's first element in a process calls inspect.stack() (to tell a REPL), whose
        # first call resolves the file of each of the ~2,500 loaded modules (0.1 s): done here.
        inspect.stack()

        async with resuming(server):
            yield

    app = st.App(__file__, routes=routes(), lifespan=serving)
