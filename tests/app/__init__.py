"""AppTest tests of the Streamlit pages, and who uses them: the local person of local mode, or
a member signed in through OpenID Connect (AppTest's ``secrets`` and ``user``)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.labelling.membership import set_local_name
from pcf.store import save_member

APP = Path(__file__).resolve().parents[2] / "app.py"
LOCAL_NAME = "Ada"
AUTH = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "a test secret",
    "client_id": "pcf-review",
    "client_secret": "not a secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}
"""An ``[auth]`` section: sign-in is configured (AppTest never contacts the provider)."""


def open_page(at: AppTest, page: str, **query_params: str) -> AppTest:
    """Switch to ``pages/<page>.py`` with these query parameters and run it."""
    at.switch_page(f"pages/{page}.py")
    at.query_params.update(query_params)
    return at.run()


def markdown_texts(at: AppTest) -> list[str]:
    """The source of every Markdown element (captions included) on the page."""
    return [m.value for m in at.markdown] + [c.value for c in at.caption]


_DIFF_CELL = re.compile(r'<div class="(?:same|changed|unpaired)">(.*?)</div>', re.S)


def difference_sides(at: AppTest) -> tuple[str, str, str]:
    """The page's one difference of two answers (``show_difference``): its left and right
    texts as written in its cells (marks and tints taken off), and its HTML."""
    (body,) = [e.proto.body for e in at.get("html") if "pcf-diff" in e.proto.body]
    cells = [unescape(re.sub(r"</?(mark|span)[^>]*>", "", c)) for c in _DIFF_CELL.findall(body)]
    return "".join(cells[0::2]), "".join(cells[1::2]), body


def local_app(session: Session) -> AppTest:
    """The app in local mode after its first run, the local person (:data:`LOCAL_NAME`, an
    admin) named in the database as the name dialog would."""
    set_local_name(LOCAL_NAME, session=session)
    session.commit()
    return on_demo_pcf(AppTest.from_file(str(APP), default_timeout=30)).run()


def on_demo_pcf(at: AppTest) -> AppTest:
    """The app with the run ``demo-pcf`` picked in the sidebar, the run these tests read (the
    sidebar opens the demo on its strong-bias run)."""
    at.session_state["run"] = "demo-pcf"
    return at


def id_token(email: str, **claims: object) -> dict[str, object]:
    """``st.user`` of a person signed in at the provider as ``email``, verified; ``claims``
    change or add claims."""
    token = {"iss": "https://id.example", "sub": f"sub-{email}", "email": email}
    return {"is_logged_in": True, **token, "email_verified": True, **claims}


def signed_in_app(session: Session, email: str, role: str | None = None) -> AppTest:
    """The app with sign-in configured, after its first run for ``email`` (signed in at the
    provider, verified), who is made a member with ``role`` first unless ``role`` is None."""
    if role is not None:
        save_member(email, role, session=session, added_by="test")
        session.commit()
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = id_token(email)
    return on_demo_pcf(at).run()
