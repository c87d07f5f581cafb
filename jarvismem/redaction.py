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

# Dict keys (and key=value names) whose value is a secret whatever its type.
# Matching ignores case and the separators - _ . and space, and accepts the
# name as a prefix, suffix or inner part of a longer key (client_secret,
# db_password, x-api-key, github_token, secret_key), see secret_key_matcher.
# Configurable with REDACTION_KEYS. Deliberately absent: "key" (ids and cache
# keys), "tokens" (usage counts), "pwd" (the working directory in env dumps),
# "session" (session objects and ids that are not bearer credentials).
SECRET_KEY_NAMES: tuple[str, ...] = (
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "api_key",
    "access_key",
    "secret_key",
    "private_key",
    "signing_key",
    "encryption_key",
    "authorization",
    "auth",
    "credential",
    "credentials",
    "cookie",
    "set_cookie",
    "connection_string",
    "account_key",
)

# Words that, right after a secret name, make the key describe the secret
# rather than hold it: token_count, token_type, password_policy,
# secret_name, api_key_id. Without this the value 512 of {"token_count": 512}
# would be hidden, which loses data and teaches users to turn redaction off.
NON_SECRET_QUALIFIERS: frozenset[str] = frozenset(
    {
        "at", "budget", "count", "counts", "created", "enabled", "endpoint",
        "env", "expiration", "expires", "expiry", "field", "file", "format",
        "hint", "id", "ids", "index", "kind", "label", "len", "length", "limit",
        "max", "method", "min", "name", "names", "path", "policy", "present",
        "provided", "required", "reset", "rotation", "scheme", "set", "size",
        "strength", "ttl", "type", "updated", "uri", "url", "usage", "used",
        "version",
    }
)  # fmt: skip

_KEY_SEPARATORS = re.compile(r"[-_. ]+")
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Keys longer than this are checked but not cached (the cache holds keys).
_KEY_CACHE_MAX_LEN = 128
_KEY_CACHE_SIZE = 4096


def _normalise_name(name: str) -> str:
    return _KEY_SEPARATORS.sub("", name).lower()


def secret_key_matcher(names: Iterable[str] = SECRET_KEY_NAMES) -> Callable[[str], bool]:
    """A predicate telling whether a dict key names a secret.

    ``names`` are secret words (``SECRET_KEY_NAMES`` by default). A key
    matches when, ignoring case and the separators ``- _ .`` and space:

    * it ends with a name (``db_password``, ``x-api-key``, ``githubToken``,
      ``dbpassword``); or
    * a run of its words spells a name and the next word, if any, is not a
      describing qualifier from :data:`NON_SECRET_QUALIFIERS`
      (``secret_key`` and ``password_hash`` match; ``token_count``,
      ``password_policy`` and ``secretary`` do not).

    Words are split at separators and at camelCase boundaries. Cost is
    linear in the key length; results for short keys are cached because an
    agent's payloads repeat the same few keys on every turn.
    """
    normalised = tuple(sorted({_normalise_name(n) for n in names if _normalise_name(n)}))
    wanted = frozenset(normalised)
    # A name spans at most this many words (api_key is 2; a compound name
    # written without separators is 1).
    span = max((len(_KEY_SEPARATORS.split(n.strip("-_. "))) for n in names), default=1)
    cache: dict[str, bool] = {}

    def check(key: str) -> bool:
        flat = _normalise_name(key)
        if not flat:
            return False
        if flat.endswith(normalised):
            return True
        words = [w.lower() for w in _KEY_WORDS.findall(key)]
        for i in range(len(words)):
            joined = ""
            for j in range(i, min(len(words), i + span)):
                joined += words[j]
                if joined in wanted and (
                    j + 1 == len(words) or words[j + 1] not in NON_SECRET_QUALIFIERS
                ):
                    return True
        return False

    def is_secret_key(key: str) -> bool:
        if len(key) > _KEY_CACHE_MAX_LEN:
            return check(key)
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= _KEY_CACHE_SIZE:
                cache.clear()
            hit = cache[key] = check(key)
        return hit

    return is_secret_key


is_secret_key: Callable[[str], bool] = secret_key_matcher()

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
