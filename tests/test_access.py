"""Roles and permissions, and where the server's provider keys may be sent."""

from __future__ import annotations

import pytest

from pcf.access import (
    ALLOWED_BASE_URLS_ENV,
    GRANTS,
    AccessDeniedError,
    Actor,
    Permission,
    Role,
    foreign_host,
    forwarded_by,
    key_may_go_to,
    operator,
)


def test_each_role_may_do_what_the_table_says():
    assert GRANTS[Role.ADMIN] == set(Permission)
    assert GRANTS[Role.REVIEWER] == {
        Permission.LABEL,
        Permission.RESOLVE,
        Permission.SEE_RESULTS,
        Permission.ASSIGN,
    }
    assert GRANTS[Role.ANNOTATOR] == {Permission.LABEL}
    assert GRANTS[Role.VIEWER] == {Permission.SEE_RESULTS}


def test_a_refusal_names_who_the_role_and_the_action():
    alice = Actor("alice@example.com", Role.ANNOTATOR)
    alice.require(Permission.LABEL)
    with pytest.raises(
        AccessDeniedError, match=r"alice@example.com is annotator and may not start"
    ):
        alice.require(Permission.RUN)


def test_the_operator_is_an_admin_named_by_their_login():
    actor = operator()
    assert actor.role is Role.ADMIN
    assert actor.operator
    assert actor.identity.startswith("operator:")


@pytest.mark.parametrize(
    ("headers", "proxy"),
    [
        ({"Host": "127.0.0.1:8501", "User-Agent": "x", "Origin": "http://127.0.0.1:8501"}, None),
        ({"Host": "127.0.0.1:8501", "X-Forwarded-For": "203.0.113.9"}, "x-forwarded-for"),
        ({"forwarded": "for=203.0.113.9;proto=https"}, "forwarded"),
        ({"X-Real-IP": "203.0.113.9"}, "x-real-ip"),
        ({"X-FORWARDED-HOST": "pcf.example.com"}, "x-forwarded-host"),
        ({"Via": "1.1 proxy"}, "via"),
    ],
)
def test_a_request_a_proxy_forwarded_is_recognised(headers, proxy):
    assert forwarded_by(headers) == proxy


@pytest.mark.parametrize(
    ("host", "foreign"),
    [
        ("127.0.0.1", False),
        ("127.0.0.1:8501", False),
        ("LocalHost:1", False),
        ("localhost", False),
        ("[::1]:8501", False),
        ("[::1]", False),
        (None, False),  # no Host: AppTest, or a client on this machine that named none
        ("evil.test:8501", True),
        ("127.0.0.1.evil.test:8501", True),
        ("localhost.evil.test", True),
        ("localhost.:8501", True),
        ("127.0.0.2:8501", True),
        ("[::ffff:127.0.0.1]:8501", True),
        ("[::1]x", True),
        ("localhost:8501:1", True),
        ("localhost:80@evil.test", True),
        ("", True),
    ],
)
def test_local_mode_knows_only_the_loopback_names_of_this_machine(host, foreign):
    headers = {"User-Agent": "x"} | ({} if host is None else {"HOST": host})
    assert foreign_host(headers) == (host if foreign else None)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://gpu-box:8000/v1", True),
        ("http://GPU-box:8000/v1/", True),
        ("http://gpu-box:8000/v1/chat", False),
        ("http://gpu-box:8001/v1", False),
        ("https://gpu-box:8000/v1", False),
        ("http://gpu-box:8000/v10", False),
        ("http://gpu-box:8000", False),
        ("http://gpu-box.evil.example:8000/v1", False),
        ("http://evil.example/?http://gpu-box:8000/v1", False),
        ("http://gpu-box:8000@evil.example/v1", False),
        ("http://user:pass@gpu-box:8000/v1", True),
    ],
)
def test_a_visitor_may_send_the_key_only_to_a_listed_server(monkeypatch, url, allowed):
    monkeypatch.setenv(ALLOWED_BASE_URLS_ENV, "http://gpu-box:8000/v1, http://other:9/x")
    admin = Actor("adam@example.com", Role.ADMIN)
    assert key_may_go_to(admin, "openai", url) is allowed
    assert key_may_go_to(admin, "openai", None)
    assert key_may_go_to(admin, "openai", "https://api.openai.com/v1")  # the provider's own
    assert key_may_go_to(operator(), "openai", url)


def test_no_list_means_only_the_providers_own_endpoint(monkeypatch):
    monkeypatch.delenv(ALLOWED_BASE_URLS_ENV, raising=False)
    admin = Actor("adam@example.com", Role.ADMIN)
    assert not key_may_go_to(admin, "anthropic", "http://localhost:8000/v1")
    assert key_may_go_to(admin, "anthropic", None)


def test_gemini_and_azure_keys_go_only_to_their_own_or_named_servers(monkeypatch):
    """Gemini's key goes to Google's endpoint; an Azure key to the endpoint the operator set
    (``AZURE_OPENAI_ENDPOINT``) or listed, never to another Azure resource a visitor types."""
    monkeypatch.delenv(ALLOWED_BASE_URLS_ENV, raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://team.openai.azure.com/")
    admin = Actor("adam@example.com", Role.ADMIN)
    assert key_may_go_to(admin, "google", "https://generativelanguage.googleapis.com/")
    assert not key_may_go_to(admin, "google", "http://proxy.example")
    assert key_may_go_to(admin, "azure", None)
    assert key_may_go_to(admin, "azure", "https://TEAM.openai.azure.com")
    assert not key_may_go_to(admin, "azure", "https://other.openai.azure.com")
    monkeypatch.setenv(ALLOWED_BASE_URLS_ENV, "https://other.openai.azure.com")
    assert key_may_go_to(admin, "azure", "https://other.openai.azure.com/")
