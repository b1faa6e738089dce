"""The servers a provider backend's calls go to, as messages and run descriptions name them
(without the credentials an address can carry)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "google": "GOOGLE_GEMINI_BASE_URL",
    "azure": "AZURE_OPENAI_ENDPOINT",
}
"""The variables the providers' SDKs read for a server when no base URL is given."""
OWN_SERVERS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "google": "https://generativelanguage.googleapis.com",
}
"""The providers' own endpoints (an Azure endpoint is always the operator's resource)."""
DEFAULT_PORTS = {"http": 80, "https": 443}


def judge_server(backend: str, base_url: str | None) -> str | None:
    """The server a provider backend's calls go to (``base_url``, else the SDK's variable),
    normalised, without user, password, query or fragment (where a credential could hide);
    None for the provider's own endpoint and for backends that call no server."""
    url = base_url or os.environ.get(BASE_URL_ENV.get(backend, ""))
    if backend not in BASE_URL_ENV or not url:
        return None
    return normalised_server(backend, url)


def normalised_server(backend: str, url: str) -> str | None:
    """``url`` as :func:`judge_server` names it (None: the provider's own endpoint)."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # not a port number: the SDK cannot call it either
        port = None
    host = f"[{host}]" if ":" in host else host
    address = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    server = f"{scheme}://{address}{parts.path.rstrip('/')}"
    return None if server == OWN_SERVERS.get(backend) else server
