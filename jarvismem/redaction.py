"""Secret redaction applied before any tier persists or sends text.

A :class:`Redactor` is any callable ``str -> str``. The default one replaces
common API-key and bearer-token shapes with ``[REDACTED]``. Users can pass
their own (for PII rules, say) or disable redaction with
``REDACTION_ENABLED=false``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

Redactor = Callable[[str], str]

REDACTED = "[REDACTED]"

# Shapes of secrets seen in agent transcripts. Each keeps a recognisable
# prefix out of the match where that helps a reader ("Bearer [REDACTED]").
DEFAULT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization headers: Bearer/JWT/Basic tokens.
    (re.compile(r"(?i)\b(bearer|jwt|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*"), r"\1 " + REDACTED),
    # OpenAI / Anthropic style keys.
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"), REDACTED),
    # GitHub tokens.
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED),
    # AWS access key ids.
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    # Slack tokens.
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    # Google API keys.
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), REDACTED),
    # JSON web tokens (three base64url parts).
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    # Azure storage account keys inside connection strings.
    (re.compile(r"(?i)(AccountKey=)[A-Za-z0-9+/=]{20,}"), r"\1" + REDACTED),
    # key=value / "key": "value" pairs whose name says secret.
    (
        re.compile(
            r"(?i)(\b(?:api[_-]?key|x-api-key|secret|password|passwd|token|access[_-]?token)"
            r"\b[\"']?\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
        ),
        r"\1" + REDACTED,
    ),
    # Passwords in URLs: scheme://user:pass@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1" + REDACTED + "@"),
)


class PatternRedactor:
    """Replace every match of a list of ``(pattern, replacement)`` pairs."""

    def __init__(
        self, patterns: Iterable[tuple[re.Pattern[str], str]] = DEFAULT_PATTERNS
    ) -> None:
        self._patterns = tuple(patterns)

    def __call__(self, text: str) -> str:
        for pattern, replacement in self._patterns:
            text = pattern.sub(replacement, text)
        return text


def no_redaction(text: str) -> str:
    """The identity redactor (``REDACTION_ENABLED=false``)."""
    return text


default_redactor: Redactor = PatternRedactor()


def mask_url(url: str) -> str:
    """A URL with its password (and query string) hidden, for status and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
