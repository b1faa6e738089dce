"""PCF Review: the Streamlit app. Run with `make run` (or `streamlit run app.py`).

app.py is the frame of every page: the navigation over the files in ``pages/`` and the shared
sidebar. Shared page code lives in ``pages/shared/``, a subfolder that Streamlit never lists as a
page.
"""

from __future__ import annotations

import streamlit as st

from pages.shared import app_frame, sidebar

st.set_page_config(page_title="PCF Review", page_icon="🔎", layout="wide")

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("pages/review.py", title="Review", icon=":material/search:"),
    st.Page("pages/adjudicate.py", title="Adjudicate", icon=":material/how_to_vote:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/play_circle:"),
    st.Page("pages/weights.py", title="Weights", icon=":material/tune:"),
    st.Page("pages/report.py", title="Report", icon=":material/summarize:"),
]

navigation = st.navigation(PAGES)
sidebar()
with app_frame():
    navigation.run()
