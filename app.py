"""PCF Review: the Streamlit app. Run with `make run` (or `streamlit run app.py`).

app.py is the frame of every page: the navigation over the files in ``pages/`` and the shared
sidebar. Shared page code lives in ``pages/shared/``, a subfolder that Streamlit never lists as a
page.
"""

from __future__ import annotations

import streamlit as st

from pages.shared import app_frame, pages_for, sidebar, sign_in, storage_errors


def main() -> None:
    """Sign the visitor in, then run the page they opened inside the app's frame."""
    st.set_page_config(page_title="PCF Review", page_icon="🔎", layout="wide")
    with storage_errors():
        actor = sign_in()
        navigation = st.navigation(pages_for(actor))
        sidebar(actor)
        with app_frame(actor):
            navigation.run()


# Streamlit runs this file as __main__; a process that merely imports it (multiprocessing's
# spawn re-imports the main module of the process that started it) runs nothing.
if __name__ == "__main__":
    main()
