"""Which backends this process can use (pcf/runs/manage.py)."""

from __future__ import annotations

from pcf.runs.manage import backend_availability


def test_providers_need_their_key_or_a_base_url():
    assert backend_availability(environ={}) == {
        "simulated": None,
        "openai": "set OPENAI_API_KEY in the server's environment or give an OpenAI-compatible "
        "base URL",
        "anthropic": "set ANTHROPIC_API_KEY in the server's environment",
    }
    with_keys = backend_availability(environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert set(with_keys.values()) == {None}
    assert backend_availability("http://localhost:1/v1", environ={})["openai"] is None
