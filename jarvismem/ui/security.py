"""Who may talk to the inspector: loopback by default, a token for anything else.

No third-party import here, so ``jarvismem ui`` can refuse a bad binding before
it loads the web stack, and the rules are testable on their own.
"""

from __future__ import annotations

import ipaddress

from jarvismem.errors import ConfigError

COOKIE = "jarvismem_ui_token"
"""The cookie a ``?token=`` visit sets (HttpOnly, SameSite=Strict)."""

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for a loopback address or name (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_host(header: str) -> bool:
    """Whether a request's ``Host`` header names loopback (port allowed).

    A server on loopback answers only to loopback names: a page on another site
    that rebinds its own name to 127.0.0.1 sends that name, and is refused.
    """
    host = header.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return bool(host) and is_loopback(host)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token (``JARVISMEM_UI_TOKEN``)."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to serve the inspector on {host!r} without a token: every value "
            "of every workflow would be readable by anyone who reaches it. Set "
            "JARVISMEM_UI_TOKEN, or bind to 127.0.0.1"
        )
    if token is not None and len(token) < 16:
        raise ConfigError("JARVISMEM_UI_TOKEN must be at least 16 characters")
