"""What every page shares, one module per job: the app's :mod:`~pages.shared.frame`, the
:mod:`~pages.shared.data` a page reads (engine, sidebar, cached analysis), how it shows
:mod:`~pages.shared.text`, and :mod:`~pages.shared.sign_in`; this module is their one door.

This package sits in a subfolder of ``pages/``, which Streamlit's legacy folder-page mode does
not list as a page. Pages read and write only through `pcf`; this module only connects them to
Streamlit.
"""

from pages.shared.data import (
    comment_thread,
    current_run,
    engine,
    item_link_problem,
    require_dataset,
    require_run,
    revision_of,
    run_analysis,
    search_items,
    session,
    sidebar,
    stored_item,
)
from pages.shared.frame import (
    PAGES,
    RUN_KEY,
    app_frame,
    current_actor,
    ensure_app_frame,
    page_link,
    pages_for,
    require_permission,
    storage_errors,
)
from pages.shared.sign_in import sign_in
from pages.shared.text import (
    answer_height,
    change_in_points,
    plain_text_toggle,
    show_code,
    show_difference,
    show_text,
    simulated_badge,
)

__all__ = [
    "PAGES",
    "RUN_KEY",
    "answer_height",
    "app_frame",
    "change_in_points",
    "comment_thread",
    "current_actor",
    "current_run",
    "engine",
    "ensure_app_frame",
    "item_link_problem",
    "page_link",
    "pages_for",
    "plain_text_toggle",
    "require_dataset",
    "require_permission",
    "require_run",
    "revision_of",
    "run_analysis",
    "search_items",
    "session",
    "show_code",
    "show_difference",
    "show_text",
    "sidebar",
    "sign_in",
    "simulated_badge",
    "storage_errors",
    "stored_item",
]
