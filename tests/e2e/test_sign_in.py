"""Sign-in in Chromium through a real OpenID Connect provider running on this machine.

The provider is ``oidc-provider-mock``: a real OIDC server (discovery, authorization code flow,
signed ID tokens, JWKS) with its own login form, in a thread on a free port; each person's
claims (their email, verified) are put to it by the test. It was picked over ``pytest-iam``
(Canaille, a whole identity server with LDAP/SQL back ends and SCIM) because it needs nothing
but Python, and its form is where a person says who they are, as at Google or Keycloak. The app
is ``streamlit run app.py`` with an ``[auth]`` section naming two such providers, ``work`` and
``other`` (a second server: a second issuer), so ``st.login`` and ``st.user`` run as they do in
production.

People: alice, bob and dora (annotators), rita (reviewer), adam (admin), carol (added by adam in
the app), mallory (signed in at the provider, but no member), eve (an account at ``work`` whose
email claim is adam's address, unverified).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import oidc_provider_mock
import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlmodel import col, select

from pcf.analysis.results import run_decisions
from pcf.items import Item, candidate_labels
from pcf.labelling.adjudications import display_order
from pcf.store import Adjudication, get_dataset, get_member, get_run, items_named
from tests.demo_database import copy_demo, drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LOCAL_NAME,
    open_tab,
    pcf,
    serve_app,
    served_session,
)
from tests.factories import make_item
from tests.served_app import free_port

DOMAIN = "example.com"
MEMBERS = {
    "alice": "annotator",
    "bob": "annotator",
    "dora": "annotator",
    "rita": "reviewer",
    "adam": "admin",
}


def email(name: str) -> str:
    return f"{name}@{DOMAIN}"


def account(issuer: str, sub: str, claims: dict[str, object]) -> None:
    """Create the provider account ``sub`` with these claims."""
    response = httpx.put(f"{issuer}/users/{quote(sub)}", json=claims)
    assert response.status_code == 204


@contextmanager
def provider_server(*names: str) -> Iterator[str]:
    """An OIDC provider (its issuer URL) where each of ``names`` has an account, its subject
    and verified email claim their address."""
    with oidc_provider_mock.run_server_in_thread() as server:
        issuer = f"http://localhost:{server.server_port}"
        for name in names:
            account(issuer, email(name), {"email": email(name), "email_verified": True})
        yield issuer


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """The ``work`` provider: every person, and eve, whose unverified email claim is adam's."""
    with provider_server(*MEMBERS, "carol", "mallory") as issuer:
        account(issuer, "eve", {"email": email("adam"), "email_verified": False})
        yield issuer


@pytest.fixture(scope="module")
def other_provider() -> Iterator[str]:
    """The ``other`` provider (a second issuer), where dora's address is verified too."""
    with provider_server("dora") as issuer:
        yield issuer


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo, with the members the operator added on the command line."""
    url = new_database(tmp_path_factory.mktemp("sign-in"))
    copy_demo(url, command=True)
    for name, role in MEMBERS.items():
        pcf(url, "members", "add", email(name), "--role", role)
    yield url
    drop_database(url)


@pytest.fixture(scope="module")
def app(
    database: str, provider: str, other_provider: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The app with sign-in configured for both providers: its base URL."""
    folder = tmp_path_factory.mktemp("sign-in-app")
    port = free_port()
    secrets = folder / "secrets.toml"
    secrets.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "a long random secret for the test only"\n'
        + "".join(
            f"[auth.{name}]\n"
            'client_id = "pcf-review"\n'
            'client_secret = "any secret: the mock provider takes every client"\n'
            f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
            for name, issuer in (("work", provider), ("other", other_provider))
        ),
        encoding="utf-8",
    )
    options = ("--secrets.files", str(secrets))
    with serve_app(database, folder / "server.log", port=port, options=options) as base:
        yield base


def main(tab: Page) -> Locator:
    return tab.get_by_test_id("stMain")


def sidebar(tab: Page) -> Locator:
    return tab.get_by_test_id("stSidebar")


def authorize(tab: Page, account: str, provider: str = "work") -> None:
    """On the app's sign-in page, sign in at ``provider`` as its ``account`` (the provider's
    own form)."""
    main(tab).get_by_role("button", name=f"Sign in with {provider}").click()
    tab.get_by_placeholder("sub").fill(account)
    tab.get_by_role("button", name="Authorize").click()


def sign_in(tab: Page, name: str, path: str = "/") -> None:
    """Open the link ``path``, sign in as ``name`` at ``work``: the app opens that link's page
    again (the provider returns to the home page) with its dataset and run (the address then
    leaves out a choice equal to its default)."""
    tab.goto(path)
    authorize(tab, email(name))
    page, _, query = path.partition("?")
    expect(tab).to_have_url(re.compile(re.escape(page) + r"(\?|$)"))
    expect(sidebar(tab)).to_contain_text(email(name))
    for box, [value] in parse_qs(query).items():
        if box in ("dataset", "run"):
            expect(sidebar(tab).get_by_role("combobox", name=box.title())).to_have_value(value)
    settle(tab)


def signed_in_as(tab: Page, name: str, role: str) -> None:
    expect(sidebar(tab).get_by_text(f"· {role}")).to_be_visible()
    expect(sidebar(tab)).to_contain_text(email(name))


def page_links(tab: Page) -> list[str]:
    links = sidebar(tab).get_by_test_id("stSidebarNav").get_by_role("link")
    return [link.inner_text().strip().split("\n")[-1] for link in links.all()]


def annotators(url: str) -> list[str]:
    """The annotator of every label in the database, oldest first."""
    with served_session(url) as s:
        found = list(s.exec(select(Adjudication.annotator).order_by(col(Adjudication.id))).all())
    return found


def label_one(tab: Page) -> str:
    """Label the item on screen with candidate 1, one key (it saves and opens the next): the
    item's key."""
    heading = main(tab).get_by_role("heading", name=re.compile(r"^Item "))
    expect(heading).to_be_visible()
    settle(tab)
    item = heading.inner_text().removeprefix("Item ")
    main(tab).get_by_role("heading", name="Adjudicate").click()
    tab.keyboard.press("1")
    expect(main(tab).get_by_text(f"Saved your label for item {item}")).to_be_visible()
    settle(tab)
    return item


def test_a_stranger_signed_in_at_the_provider_sees_no_data(browser: Browser, app: str):
    with open_tab(browser, app) as tab:
        tab.goto("/review?item=demo-013")
        expect(main(tab).get_by_text("demo-013")).to_have_count(0)
        authorize(tab, email("mallory"))
        expect(main(tab).get_by_role("heading", name="No access yet")).to_be_visible()
        tab.goto("/review?item=demo-013")
        expect(main(tab).get_by_role("heading", name="No access yet")).to_be_visible()
        expect(main(tab)).to_contain_text("Ask an admin of this server to add you.")
        for hidden in ("Dataset", "demo-pcf", "demo-013", "Item ", email("adam")):
            expect(tab.get_by_text(hidden)).to_have_count(0)
        expect(tab.locator(EXCEPTION)).to_have_count(0)


def test_an_annotator_labels_as_herself_only_and_sees_nothing_else(
    browser: Browser, app: str, database: str
):
    before = len(annotators(database))
    with open_tab(browser, app) as tab:
        sign_in(tab, "alice", f"/adjudicate?annotator={email('bob')}")
        signed_in_as(tab, "alice", "annotator")
        assert page_links(tab) in ([], ["Adjudicate"])
        label_one(tab)
        tab.reload()
        signed_in_as(tab, "alice", "annotator")
        expect(tab.get_by_test_id("stMetric")).to_have_count(0)  # winners and gold are metrics
        for revealing in ("PCF winner", "Direct winner", "Start run", "Unblind"):
            expect(tab.get_by_text(revealing)).to_have_count(0)
        tab.goto("/runs")
        settle(tab)
        expect(tab.get_by_role("button", name="Start run")).to_have_count(0)
        expect(main(tab).get_by_role("heading", name="Runs")).to_have_count(0)
        tab.goto(f"/adjudicate?annotator={email('bob')}&dataset=demo")
        label_one(tab)
        expect(tab.locator(EXCEPTION)).to_have_count(0)
    assert annotators(database)[before:] == [email("alice")] * 2


def test_a_reviewer_sees_everything_but_members_and_starts_no_run(browser: Browser, app: str):
    with open_tab(browser, app) as tab:
        sign_in(tab, "rita", "/review?item=demo-013")
        signed_in_as(tab, "rita", "reviewer")
        expect(main(tab).get_by_role("heading", name="Item demo-013")).to_be_visible()
        expect(main(tab).get_by_text("PCF winner:")).to_be_visible()
        links = page_links(tab)
        assert {"Overview", "Review", "Adjudicate", "Compare", "Runs", "Report"} <= set(links)
        assert "Members" not in links
        tab.goto("/runs")
        expect(main(tab).get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        settle(tab)
        expect(tab.get_by_role("button", name="Start run")).to_have_count(0)
        expect(tab.locator(EXCEPTION)).to_have_count(0)


def test_an_admin_adds_carol_who_can_then_label(browser: Browser, app: str, database: str):
    with open_tab(browser, app) as tab:
        tab.goto("/")
        authorize(tab, email("carol"))
        expect(main(tab).get_by_role("heading", name="No access yet")).to_be_visible()
    with open_tab(browser, app) as tab:
        sign_in(tab, "adam", "/members")
        signed_in_as(tab, "adam", "admin")
        form = main(tab).get_by_test_id("stForm").filter(has_text="Add a member")
        form.get_by_role("textbox", name="Email").fill(email("carol"))
        form.get_by_role("button", name="Save").click()
        expect(main(tab).get_by_text(f"{email('carol')} is now annotator.")).to_be_visible()
    with open_tab(browser, app) as tab:
        sign_in(tab, "carol", "/adjudicate")
        signed_in_as(tab, "carol", "annotator")
        label_one(tab)
    assert email("carol") in annotators(database)


def test_only_the_verified_account_bound_first_signs_in_and_a_removed_member_saves_nothing(
    browser: Browser, app: str, database: str
):
    with open_tab(browser, app) as tab:  # eve's email claim is adam's, unverified
        tab.goto("/")
        authorize(tab, "eve")
        expect(main(tab).get_by_role("heading", name="Sign-in refused")).to_be_visible()
        expect(main(tab)).to_contain_text(f"has not verified {email('adam')}")
        expect(tab.get_by_text("Dataset")).to_have_count(0)
    before = len(annotators(database))
    with open_tab(browser, app) as dora:  # her first sign-in binds her work account
        sign_in(dora, "dora", "/adjudicate")
        heading = main(dora).get_by_role("heading", name=re.compile(r"^Item "))
        expect(heading).to_be_visible()
        with open_tab(browser, app) as tab:  # the same verified address at another issuer
            tab.goto("/")
            authorize(tab, email("dora"), provider="other")
            expect(main(tab).get_by_role("heading", name="Sign-in refused")).to_be_visible()
            expect(main(tab)).to_contain_text("signs in with another account than this one")
            expect(tab.get_by_text("Dataset")).to_have_count(0)
        pcf(database, "members", "remove", email("dora"))
        settle(dora)
        main(dora).get_by_role("heading", name="Adjudicate").click()
        dora.keyboard.press("1")
        expect(main(dora).get_by_role("heading", name="No access yet")).to_be_visible()
        expect(dora.locator(EXCEPTION)).to_have_count(0)
    assert annotators(database)[before:] == []


def test_a_lookalike_address_is_refused_and_the_member_it_reads_as_stays_unbound(
    browser: Browser, app: str, database: str, provider: str
):
    """A verified account whose address is kate's with the KELVIN SIGN (U+212A) for its K once
    signed in as the unbound admin kate@example.com (``str.lower()`` folds U+212A to ``k``), and
    kate's own account was then refused."""
    pcf(database, "members", "add", email("kate"), "--role", "admin")
    account(provider, "kelvin", {"email": f"\u212aate@{DOMAIN}", "email_verified": True})
    account(provider, email("kate"), {"email": email("kate"), "email_verified": True})
    with open_tab(browser, app) as tab:
        tab.goto("/")
        authorize(tab, "kelvin")
        expect(main(tab).get_by_role("heading", name="Sign-in refused")).to_be_visible()
        expect(main(tab)).to_contain_text("holds U+212A KELVIN SIGN, which reads as 'k'")
        expect(tab.get_by_text("Dataset")).to_have_count(0)
    with served_session(database) as s:
        kate = get_member(email("kate"), session=s)
        assert kate is not None
        assert (kate.role, kate.issuer, kate.subject) == ("admin", None, None)
    with open_tab(browser, app) as tab:
        sign_in(tab, "kate", "/members")
        signed_in_as(tab, "kate", "admin")
        expect(main(tab).get_by_role("heading", name="Members")).to_be_visible()
        expect(tab.locator(EXCEPTION)).to_have_count(0)
    with served_session(database) as s:
        kate = get_member(email("kate"), session=s)
        assert kate is not None
        assert (kate.issuer, kate.subject) == (provider, email("kate"))


def test_local_mode_refuses_a_request_a_proxy_forwarded(browser: Browser, app_url: str):
    """The package's demo server in local mode: behind a proxy every visitor would be its admin."""
    with open_tab(browser, app_url, headers={"X-Forwarded-For": "203.0.113.9"}) as tab:
        tab.goto("/")
        expect(main(tab)).to_contain_text("came through a proxy (its x-forwarded-for header)")
        expect(tab.get_by_text("Dataset")).to_have_count(0)
    with open_tab(browser, app_url) as tab:  # the same server, asked directly
        tab.goto("/")
        expect(sidebar(tab).get_by_text("· admin")).to_be_visible()


def test_local_mode_answers_only_a_host_of_this_machine(browser: Browser, app_url: str):
    """DNS rebinding: a site whose name resolves to 127.0.0.1 would load the local app into its
    own origin, and its scripts could read and press everything as the local admin. Chromium
    here resolves ``evil.test`` to 127.0.0.1 as such a site's DNS would."""
    port = urlsplit(app_url).port
    rebound = browser.browser_type.launch(
        executable_path=str(CHROMIUM),
        args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.test 127.0.0.1"],
    )
    try:
        with open_tab(rebound, f"http://evil.test:{port}") as tab:
            tab.goto("/members")
            expect(main(tab)).to_contain_text(f"is addressed to 'evil.test:{port}'")
            expect(main(tab)).to_contain_text("configure sign-in ([auth] in")
            settle(tab)
            expect(tab.get_by_role("heading", name="Members")).to_have_count(0)
            expect(tab.get_by_role("heading", name="Audit log")).to_have_count(0)
            expect(tab.get_by_role("button")).to_have_count(0)  # nothing to press
            expect(sidebar(tab).get_by_text("· admin")).to_have_count(0)
            expect(tab.get_by_text(LOCAL_NAME)).to_have_count(0)
        with open_tab(rebound, app_url) as tab:  # the same browser and server, at 127.0.0.1
            tab.goto("/members")
            expect(main(tab).get_by_role("heading", name="Audit log")).to_be_visible()
            expect(main(tab).get_by_role("button", name="Save")).to_be_visible()
            expect(sidebar(tab).get_by_text("· admin")).to_be_visible()
    finally:
        rebound.close()


@pytest.mark.parametrize("viewers", [False, True])
def test_another_address_without_sign_in_is_refused_or_read_only(
    browser: Browser, database: str, tmp_path: Path, viewers: bool
):
    env = {"PCF_ANONYMOUS_VIEWERS": "1"} if viewers else {}
    options = ("--server.address", "0.0.0.0")
    with (
        serve_app(database, tmp_path / "server.log", options=options, env=env) as base,
        open_tab(browser, base) as tab,
    ):
        tab.goto("/")
        settle(tab)
        if not viewers:
            expect(main(tab)).to_contain_text("without sign-in")
            expect(tab.get_by_text("Dataset")).to_have_count(0)
            return
        expect(main(tab).get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        expect(sidebar(tab).get_by_text("visitor · viewer")).to_be_visible()
        assert "Adjudicate" not in page_links(tab)
        assert "Members" not in page_links(tab)
        tab.goto("/runs")
        expect(main(tab).get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        settle(tab)
        expect(tab.get_by_role("button", name="Start run")).to_have_count(0)


@pytest.fixture(scope="module")
def team(database: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Dataset ``team``: three items, a simulated PCF run, two labels per item."""
    items = tmp_path_factory.mktemp("team") / "items.jsonl"
    items.write_text(
        "".join(json.dumps(make_item(f"t{i}").to_dict()) + "\n" for i in range(3)), "utf-8"
    )
    pcf(database, "import", "jsonl", str(items), "--name", "team")
    pcf(database, "judge", "team", "--k", "3", "--name", "team-pcf")
    pcf(database, "labelling", "set", "team", "--labels-per-item", "2")
    return "team"


def metric(tab: Page, label: str) -> Locator:
    return (
        main(tab).get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")
    )


def team_item(database: str, key: str) -> Item:
    with served_session(database) as s:
        return items_named(get_dataset("team", session=s).id, [key], session=s)[0]


def label_and_comment(tab: Page, database: str, name: str, picks: dict[str, str]) -> str:
    """Label the team's three items as ``name``, each with one key: the first candidate shown
    that alice did not pick (candidate 1 for alice), kept in ``picks`` as ``name:item``. A
    comment on the first item, once its label is saved. The first item's key."""
    first = ""
    for _ in range(3):
        heading = main(tab).get_by_role("heading", name=re.compile(r"^Item t\d"))
        expect(heading).to_be_visible()
        settle(tab)
        key = heading.inner_text().removeprefix("Item ")
        shown = display_order(team_item(database, key), email(name))
        alices = picks.get(f"alice:{key}")
        index = next(i for i, c in enumerate(shown) if c != alices)
        picks[f"{name}:{key}"] = shown[index]
        main(tab).get_by_role("heading", name="Adjudicate").click()
        tab.keyboard.press(str(index + 1))  # one key: saved, and the next item opens
        expect(main(tab).get_by_text(f"Saved your label for item {key}")).to_be_visible()
        if not first:
            first = key
            settle(tab)
            main(tab).get_by_role("button", name="Your labels of it, comments").click()
            thread = tab.get_by_test_id("stPopoverBody")
            thread.get_by_role("textbox", name="Your comment").fill(f"{name} on {key}")
            thread.get_by_role("button", name="Add comment").click()
            expect(thread.get_by_text(f"{name} on {key}")).to_be_visible()
            tab.keyboard.press("Escape")
    expect(main(tab).get_by_text("Your queue of team is empty")).to_be_visible()
    return first


def sides_of_the_difference(tab: Page) -> tuple[str, str]:
    """The left and right texts of the difference the page shows, as written in its cells."""
    cells = (
        main(tab)
        .locator(".pcf-diff > div:not(.kept)")
        .evaluate_all("cells => cells.map(cell => cell.textContent)")
    )
    return "".join(cells[0::2]), "".join(cells[1::2])


def test_two_annotators_disagree_and_comment_a_reviewer_resolves_and_revises(
    browser: Browser, app: str, database: str, team: str, screenshot: Callable[..., Path]
):
    picks: dict[str, str] = {}
    for name in ("alice", "bob"):
        with open_tab(browser, app) as tab:
            sign_in(tab, name, f"/adjudicate?dataset={team}")
            label_and_comment(tab, database, name, picks)
    with served_session(database) as s:
        decisions = run_decisions(get_run("team-pcf", session=s), session=s)
    first = max(decisions, key=lambda d: d["metrics"]["priority"])["item_id"]
    item = team_item(database, first)
    with open_tab(browser, app) as tab:
        sign_in(tab, "rita", f"/compare?dataset={team}&run=team-pcf")
        expect(metric(tab, "With a human label")).to_have_text("0")
        tab.goto(f"/resolve?dataset={team}")
        expect(main(tab).get_by_text("3 disagreement(s) to resolve")).to_be_visible()
        expect(main(tab).get_by_role("heading", name=f"Item {first}")).to_be_visible()
        settle(tab)
        for name in ("alice", "bob"):
            expect(main(tab).get_by_text(f"{name} on {first}")).to_be_visible()
            expect(main(tab).get_by_text(f"{email(name)} · confidence —")).to_be_visible()
        texts = {c.id: c.text for c in item.candidates}
        main(tab).get_by_text("Show whole answers").click()
        settle(tab)
        contested = {texts[picks[f"{name}:{first}"]] for name in ("alice", "bob")}
        assert set(sides_of_the_difference(tab)) == contested  # each in full
        print(screenshot(tab, "resolve-team"))
        letters = candidate_labels(item)
        main(tab).get_by_role("radiogroup").get_by_text(re.compile(r"^A · ")).click()
        main(tab).get_by_role("textbox", name="Reason").fill("A says it right")
        main(tab).get_by_role("button", name="Set gold").click()
        expect(main(tab).get_by_text("2 disagreement(s) to resolve")).to_be_visible()
        main(tab).get_by_text("Resolved items").click()
        expect(main(tab).get_by_text("1 resolved item(s)")).to_be_visible()
        settle(tab)
        other = next(c for c in item.candidate_ids if letters[c] != "A")
        radio = main(tab).get_by_role("radiogroup")
        radio.get_by_text(re.compile(rf"^{letters[other]} · ")).click()
        main(tab).get_by_role("textbox", name="Reason").fill("on second reading")
        main(tab).get_by_role("button", name="Revise gold").click()
        expect(main(tab).get_by_text(f"Gold set for item {first}")).to_be_visible()
        for reason in ("A says it right", "on second reading"):
            expect(main(tab).locator("[role=gridcell]", has_text=reason).first).to_be_attached()
        tab.goto(f"/compare?dataset={team}&run=team-pcf")
        expect(metric(tab, "With a human label")).to_have_text("1")
        expect(main(tab)).to_contain_text("Human gold from: resolution 1")
        tab.goto(f"/team?dataset={team}&run=team-pcf")
        expect(main(tab).get_by_role("heading", name="People")).to_be_visible()
        settle(tab)
        for person in ("alice", "bob"):
            cells = main(tab).locator("[role=gridcell]", has_text=email(person))
            expect(cells.first).to_be_attached()
        expect(main(tab).get_by_test_id("stVegaLiteChart")).to_have_count(1)
        expect(metric(tab, "Items complete")).to_have_text("3")
        expect(tab.locator(EXCEPTION)).to_have_count(0)
        print(screenshot(tab, "team-team"))
