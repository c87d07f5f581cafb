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

# Names of key=value pairs whose value is a secret.
_SECRET_NAMES = (
    r"(?:api[_-]?key|x-api-key|secret|secret[_-]access[_-]key|password|passwd|token"
    r"|access[_-]?token|auth[_-]?token)"
)

Replacement = str | Callable[[re.Match[str]], str]

# Shapes of secrets seen in agent transcripts. Each keeps a recognisable
# prefix out of the match where that helps a reader ("Bearer [REDACTED]").
# Every pattern must stay linear in the text length: turn fields are up to
# 64 KiB, and a backtracking pattern would stall the event loop.

DEFAULT_PATTERNS: tuple[tuple[re.Pattern[str], Replacement], ...] = (
    # Authorization headers: Bearer/JWT/Basic tokens. The token must look like
    # one (a digit, inner punctuation, base64 padding, or 20+ letters) so prose
    # such as "a basic understanding" is left alone.
    (
        re.compile(
            r"(?i)\b(bearer|jwt|basic)\s+"
            r"(?:(?=[A-Za-z0-9\-._~+/]*(?:[0-9]|[\-._~+/][A-Za-z0-9]))[A-Za-z0-9\-._~+/]{8,}=*"
            r"|[A-Za-z0-9\-._~+/]{8,}=+|[A-Za-z]{20,})"
        ),
        r"\1 " + REDACTED,
    ),
    # OpenAI / Anthropic style keys.
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"), REDACTED),
    # GitHub tokens (classic and fine-grained).
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"), REDACTED),
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
    # key=value / "key": "value" pairs whose name says secret, also after a
    # prefix (client_secret, aws_secret_access_key, db-password). A quoted value
    # is hidden up to its closing quote: a passphrase may contain spaces.
    (
        re.compile(
            r"(?i)((?<![a-z0-9])" + _SECRET_NAMES + r"\b[\"']?\s*[:=]\s*)"
            r"(\"(?:\\.|[^\"\\\n])+\"|'(?:\\.|[^'\\\n])+')"
        ),
        lambda m: m.group(1) + m.group(2)[0] + REDACTED + m.group(2)[0],
    ),
    (
        re.compile(
            r"(?i)((?<![a-z0-9])" + _SECRET_NAMES + r"\b[\"']?\s*[:=]\s*)"
            r"([^\s\"',;&]{6,})"
        ),
        r"\1" + REDACTED,
    ),
    # Passwords in URLs: scheme://user:pass@host. The scheme is bounded so that
    # long runs like "a-a-a-..." are not rescanned from every word start.
    (
        re.compile(r"(\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)[^@\s/]+@"),
        r"\1" + REDACTED + "@",
    ),
)


# Lower-case literals without which each default pattern cannot match, in the
# order of DEFAULT_PATTERNS. Redaction runs on every turn: checking a literal in
# the lowered text is ~50x cheaper than running the regex, so ordinary prose
# pays for almost no regex at all.
DEFAULT_TRIGGERS: tuple[tuple[str, ...], ...] = (
    ("bearer", "jwt", "basic"),
    ("sk-",),
    ("gh",),
    ("github_pat_",),
    ("akia", "asia"),
    ("xox",),
    ("aiza",),
    ("eyj",),
    ("accountkey=",),
    ("key", "secret", "passw", "token"),
    ("key", "secret", "passw", "token"),
    ("://",),
)


class PatternRedactor:
    """Replace every match of a list of ``(pattern, replacement)`` pairs.

    ``triggers`` (optional, one tuple per pattern) name lower-case literals of
    which at least one must occur in the text for that pattern to run; an
    empty tuple means "always run".
    """

    def __init__(
        self,
        patterns: Iterable[tuple[re.Pattern[str], Replacement]] = DEFAULT_PATTERNS,
        triggers: Iterable[tuple[str, ...]] | None = None,
    ) -> None:
        self._patterns = tuple(patterns)
        if triggers is None:
            triggers = DEFAULT_TRIGGERS if self._patterns == DEFAULT_PATTERNS else ()
        trig = tuple(triggers)
        if trig and len(trig) != len(self._patterns):
            raise ValueError("triggers must give one tuple per pattern")
        self._rules = tuple(
            (pattern, replacement, trig[i] if trig else ())
            for i, (pattern, replacement) in enumerate(self._patterns)
        )

    def __call__(self, text: str) -> str:
        lowered = text.lower()
        for pattern, replacement, needles in self._rules:
            if needles and not any(n in lowered for n in needles):
                continue
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
    if not netloc and url.startswith(f"{parts.scheme}://"):
        # unix:///tmp/r.sock: urlunsplit would drop the empty authority ("unix:/tmp").
        return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
