"""Browser tests: the whole app served by ``streamlit run`` and driven by a real Chromium."""

from __future__ import annotations

from playwright.sync_api import Page

IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
EXCEPTION = "[data-testid='stException']"


def settle(page: Page) -> None:
    """Wait until the script run that the last action started has finished.

    Call it after waiting for something the run draws: right after an action the app may not
    have started running yet.
    """
    page.locator(IDLE).wait_for(state="attached")


def keys_ready(page: Page) -> None:
    """Wait until Adjudicate's run has finished and its key listener is installed: from then on a
    key labels the item on screen."""
    settle(page)
    page.wait_for_function("window.pcfLabelKeys === true")
