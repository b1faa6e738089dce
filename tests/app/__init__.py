"""AppTest tests of the Streamlit pages."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def open_page(at: AppTest, page: str, **query_params: str) -> AppTest:
    """Switch to ``pages/<page>.py`` with these query parameters and run it."""
    at.switch_page(f"pages/{page}.py")
    at.query_params.update(query_params)
    return at.run()


def markdown_texts(at: AppTest) -> list[str]:
    """The source of every Markdown element (captions included) on the page."""
    return [m.value for m in at.markdown] + [c.value for c in at.caption]
