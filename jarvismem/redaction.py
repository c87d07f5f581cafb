"""Secret redaction applied before any tier persists or sends text.

A :class:`Redactor` is any callable ``str -> str``. The default one
(:func:`build_redactor` of ``REDACTION_KEYS``) replaces secret shapes with
``[REDACTED]``: bearer/basic headers, PEM private-key blocks, vendor tokens
(OpenAI, Anthropic, Stripe, Hugging Face, GitHub, GitLab, Slack, npm,
SendGrid, AWS key ids, Google), JWTs, Azure account keys and SAS signatures,
URL passwords, and ``name=value`` / ``"name": value`` pairs (escaped JSON
included) whose name is a secret name. Users can pass their own (for PII
rules, say) or disable redaction with ``REDACTION_ENABLED=false``.

Structure: :func:`secret_key_matcher` says whether a dict key names a secret
(``SECRET_KEY_NAMES``, configurable with ``REDACTION_KEYS``);
:func:`redact_value` redacts a JSON-like value (strings, keys, and any value
under a secret-named key whatever its type); :func:`redact_json_text` does
that for JSON text (checkpoints) and keeps secret-free text byte for byte.

Every pattern is linear in the text length (possessive quantifiers, bounded
lookaheads; tests time 64 KiB adversarial inputs). Known limits: a secret
with no recognisable shape and no secret-named key (a bare 40-character AWS
secret, a password in prose) is not found; an unquoted ``name=value`` stops
at whitespace, ``"``, ``'``, ``,``, ``;`` and ``&`` (URL query separators).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import fields as dataclass_fields
from dataclasses import is_dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jarvismem import defaults
from jarvismem.errors import InvalidPayloadError

Redactor = Callable[[str], str]

REDACTED = "[REDACTED]"

# Dict keys (and key=value names) whose value is a secret whatever its type:
# the documented default of REDACTION_KEYS (see jarvismem.defaults for what
# is in the list and what is deliberately left out).
SECRET_KEY_NAMES: tuple[str, ...] = defaults.REDACTION_KEYS

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


class SecretKeyMatcher:
    """A predicate telling whether a dict key names a secret (see :func:`secret_key_matcher`).

    ``triggers``: lower-case literals of which every matching key contains at
    least one (the last word of each name), so a caller can skip a whole
    document whose text contains none of them.
    """

    def __init__(self, names: Iterable[str]) -> None:
        names = tuple(names)
        self.names = names
        self._flat = tuple(sorted({f for n in names if (f := _normalise_name(n))}))
        self._wanted = frozenset(self._flat)
        # A name spans at most this many words (api_key is 2; a compound name
        # written without separators is 1).
        self._span = max((len(_KEY_SEPARATORS.split(n.strip("-_. "))) for n in names), default=1)
        self.triggers: tuple[str, ...] = _name_triggers(names)
        self._cache: dict[str, bool] = {}

    def _check(self, key: str) -> bool:
        flat = _normalise_name(key)
        if not flat or not self._flat:
            return False
        if flat.endswith(self._flat):
            return True
        words = [w.lower() for w in _KEY_WORDS.findall(key)]
        for i in range(len(words)):
            joined = ""
            for j in range(i, min(len(words), i + self._span)):
                joined += words[j]
                if joined in self._wanted and (
                    j + 1 == len(words) or words[j + 1] not in NON_SECRET_QUALIFIERS
                ):
                    return True
        return False

    def __call__(self, key: str) -> bool:
        if len(key) > _KEY_CACHE_MAX_LEN:
            return self._check(key)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= _KEY_CACHE_SIZE:
                self._cache.clear()
            hit = self._cache[key] = self._check(key)
        return hit


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
    return SecretKeyMatcher(names)


def never_secret(key: str) -> bool:
    """The key matcher of ``REDACTION_ENABLED=false``: no key names a secret."""
    return False


Replacement = str | Callable[[re.Match[str]], str]

# Shapes of secrets seen in agent transcripts. Each keeps a recognisable
# prefix out of the match where that helps a reader ("Bearer [REDACTED]").
# Every pattern must stay linear in the text length: turn fields are up to
# 64 KiB, and a backtracking pattern would stall the event loop. Hence the
# possessive quantifiers (*+, ++) and bounded lookaheads below, and values
# whose closing quote is optional (an unclosed value is hidden to its end
# instead of being rescanned from every later start).

TOKEN_PATTERNS: tuple[tuple[re.Pattern[str], Replacement, tuple[str, ...]], ...] = (
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
        ("bearer", "jwt", "basic"),
    ),
    # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PGP ... PRIVATE KEY BLOCK):
    # the whole block, up to its END line or, when the END line is missing
    # (a truncated field), to the end of the text. The body is consumed
    # possessively up to "-----END", so a text of many BEGIN lines is linear.
    (
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^-]|-(?!----END))*+"
            r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
        ),
        REDACTED,
        ("private key",),
    ),
    # OpenAI / Anthropic style keys.
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"), REDACTED, ("sk-",)),
    # Stripe secret and restricted keys, and webhook signing secrets
    # (publishable pk_ keys are public by design and stay).
    (
        re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|\bwhsec_[A-Za-z0-9+/=]{16,}"),
        REDACTED,
        ("sk_", "rk_", "whsec_"),
    ),
    # Hugging Face user and organisation tokens.
    (re.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}"), REDACTED, ("hf_", "api_org_")),
    # GitHub tokens (classic ghp_/gho_/ghu_/ghs_/ghr_ and fine-grained), GitLab.
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED, ("gh",)),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"), REDACTED, ("github_pat_",)),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), REDACTED, ("glpat-",)),
    # npm and SendGrid tokens.
    (re.compile(r"\bnpm_[A-Za-z0-9]{36,}"), REDACTED, ("npm_",)),
    (re.compile(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"), REDACTED, ("sg.",)),
    # AWS access key ids.
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED, ("akia", "asia")),
    # Slack tokens (bot, user, app, refresh, config) and incoming-webhook URLs.
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), REDACTED, ("xox",)),
    (re.compile(r"\bxapp-[0-9]-[A-Za-z0-9-]{10,}"), REDACTED, ("xapp-",)),
    (
        re.compile(r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_\-]+"),
        r"\1" + REDACTED,
        ("hooks.slack.com/",),
    ),
    # Discord webhook URLs carry their token in the path.
    (
        re.compile(r"(?i)(discord(?:app)?\.com/api/webhooks/[0-9]+/)[A-Za-z0-9_\-]+"),
        r"\1" + REDACTED,
        ("/api/webhooks/",),
    ),
    # Google API keys.
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), REDACTED, ("aiza",)),
    # JSON web tokens (three base64url parts, a JSON header).
    (
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        REDACTED,
        ("eyj",),
    ),
    # Azure storage account keys inside connection strings, and the signature
    # of a SAS URL (which grants access on its own).
    (re.compile(r"(?i)(AccountKey=)[A-Za-z0-9+/=]{20,}"), r"\1" + REDACTED, ("accountkey=",)),
    (re.compile(r"(?i)([?&]sig=)[A-Za-z0-9%+/=]{16,}"), r"\1" + REDACTED, ("sig=",)),
    # Passwords in URLs: scheme://user:pass@host. The scheme is bounded so that
    # long runs like "a-a-a-..." are not rescanned from every word start.
    (
        re.compile(r"(\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)[^@\s/]+@"),
        r"\1" + REDACTED + "@",
        ("://",),
    ),
)


def _name_regex(names: Iterable[str]) -> str:
    """Alternation of secret names for text: each name's words joined by an optional separator."""
    alts = set()
    for name in names:
        words = [w for w in _KEY_SEPARATORS.split(name.lower()) if w]
        if words:
            alts.add(r"[-_. ]?".join(re.escape(w) for w in words))
    # Longest first, so secret_key wins over secret where both could start.
    return "(?:" + "|".join(sorted(alts, key=lambda a: (-len(a), a))) + ")"


def _name_triggers(names: Iterable[str]) -> tuple[str, ...]:
    """Literals one of which every pair match contains: the last word of each name."""
    words = {w for n in names if (w := _last_word(n))}
    # A word containing a shorter trigger adds nothing (authorization / auth).
    return tuple(sorted(w for w in words if not any(o != w and o in w for o in words)))


def _last_word(name: str) -> str:
    words = [w for w in _KEY_SEPARATORS.split(name.lower()) if w]
    return words[-1] if words else ""


_HAS_ALNUM = re.compile(r"[^\W_]")


def _hide_value(m: re.Match[str]) -> str:
    """The match with its value group (the last group of each alternative) hidden.

    A value without a letter or digit (``"password": ""``) holds no secret
    and is left as it is.
    """
    group = m.lastgroup
    whole = m.group(0)
    # No letter or digit: an empty value, or punctuation taken for an opening
    # quote (getpass('Password: ') closes a string, it opens no value).
    if group is None or not _HAS_ALNUM.search(m.group(group)):
        return whole
    cut = m.start(group) - m.start()
    # A bare scalar ("token": 12345) becomes a quoted string, so JSON (or a
    # Python literal) stays parseable after redaction.
    hidden = f'"{REDACTED}"' if group == "vb" else REDACTED
    return whole[:cut] + hidden + whole[cut + len(m.group(group)) :]


def pair_patterns(
    names: Iterable[str],
) -> tuple[tuple[re.Pattern[str], Replacement, tuple[str, ...]], ...]:
    """key=value, "key": "value" and escaped-JSON pairs whose key names a secret.

    ``names`` are secret words (``REDACTION_KEYS``); like
    :func:`secret_key_matcher` a name may end a longer name (client_secret,
    x-api-key) but not continue into one (token_count is left alone). The
    value's readable frame (name, separator, quotes) is kept.
    """
    names = tuple(names)
    if not names:
        return ()
    triggers = _name_triggers(names)
    # One pattern, the name first: the regex engine tries each position once
    # for both forms (this pattern is the costliest of the defaults).
    pair = re.compile(
        r"(?i)(?<![A-Za-z0-9])(?P<n>" + _name_regex(names) + r")(?![A-Za-z0-9_])"
        # 1. The key is quoted ("password": / 'password': / \"password\": from
        #    JSON inside a JSON string): any value is a secret - a quoted
        #    string (to its closing quote, escaped quotes included; to the line
        #    end if unclosed) or a bare scalar such as a number.
        #    null/true/false and objects stay.
        r"(?:\\*[\"'][ \t]*+[:=][ \t]*+"
        r"(?:\\++\"(?P<ve>(?:[^\"\\\n]|\\++(?!\"))*+)"
        r"|\"(?P<vd>(?:\\.|[^\"\\\n])*+)"
        r"|'(?P<vs>(?:\\.|[^'\\\n])*+)"
        r"|(?!(?:null|true|false)\b)(?P<vb>[^\s,}\]\[{\"'\\]++))"
        # 2. A bare key (password=..., token: ..., PASSWORD = '...'). A quoted
        #    value is hidden whole (a passphrase may hold spaces). An unquoted
        #    one: after "=" any 6+ characters; after ":" (prose such as
        #    "Password: incorrect", "The secret: patience.") only one with a
        #    digit, or with punctuation inside it, in its first 256
        #    characters, or a run of 20+ letters. Left alone: a scheme word
        #    (Authorization: Bearer ... is the header pattern's, which keeps it
        #    readable), and what is code or a placeholder rather than a secret
        #    - password=password (a keyword argument), get_password(),
        #    os.environ["X"], self.token, ${VAR}, <password>, {{ secrets.x }},
        #    None/null/true/false.
        #    A quote followed by a closing bracket, a comma or a space closes a
        #    string instead (getpass('Password: '), print("Token: ", t)).
        r"|[ \t]*+(?:(?P<eq>=)|:)[ \t]*+"
        r"(?:\"(?![\s)\]},;])(?P<vqd>(?:\\.|[^\"\\\n])*+)"
        r"|'(?![\s)\]},;])(?P<vqs>(?:\\.|[^'\\\n])*+)"
        r"|(?!(?:bearer|basic|jwt|digest|negotiate)\s"
        r"|(?P=n)\b|[$<{%]|(?:none|null|nil|true|false|undefined)\b"
        r"|[A-Za-z_]\w*+(?:\.\w++)*+[(\[]"
        r"|(?:self|cls|this|os|config|settings|env|args|kwargs|options|opts|params"
        r"|request|req|ctx)\.)"
        r"(?(eq)(?P<vq>[^\s\"',;&]{6,}+)"
        r"|(?:(?=[^\s\"',;&]{0,255}(?:[0-9]|[^A-Za-z0-9\s\"',;&][^\s\"',;&]))"
        r"(?P<vc>[^\s\"',;&]{6,}+)"
        r"|(?P<vl>[A-Za-z]{20,}+)))))"
    )
    return ((pair, _hide_value, triggers),)


def build_patterns(
    names: Iterable[str] = (),
) -> tuple[tuple[re.Pattern[str], Replacement, tuple[str, ...]], ...]:
    """Every default pattern with its trigger literals, pairs built from ``names``."""
    return TOKEN_PATTERNS[:-1] + pair_patterns(names) + TOKEN_PATTERNS[-1:]


class PatternRedactor:
    """Replace every match of a list of ``(pattern, replacement)`` pairs.

    ``triggers`` (optional, one tuple per pattern) name lower-case literals of
    which at least one must occur in the text for that pattern to run; an
    empty tuple means "always run". Redaction runs on every turn: checking a
    literal in the lowered text is ~50x cheaper than running the regex, so
    ordinary prose pays for almost no regex at all.
    """

    def __init__(
        self,
        patterns: Iterable[tuple[re.Pattern[str], Replacement]] | None = None,
        triggers: Iterable[tuple[str, ...]] | None = None,
        *,
        names: tuple[str, ...] | None = None,
    ) -> None:
        self.names = names
        """The ``REDACTION_KEYS`` list this redactor is :func:`build_redactor` of, so
        ``redactor_for(names)`` makes the same one in another process (the summary
        worker redacts with it); None for a redactor of other patterns."""
        if patterns is None:
            self.names = SECRET_KEY_NAMES
        self._patterns = DEFAULT_PATTERNS if patterns is None else tuple(patterns)
        if triggers is None:
            triggers = DEFAULT_TRIGGERS if self._patterns == DEFAULT_PATTERNS else ()
        trig = tuple(triggers)
        if trig and len(trig) != len(self._patterns):
            raise ValueError("triggers must give one tuple per pattern")
        self._rules = tuple(
            (pattern, replacement, frozenset(trig[i]) if trig else frozenset())
            for i, (pattern, replacement) in enumerate(self._patterns)
        )
        # Needles holding punctuation are grouped by one such character: a
        # one-character scan (memchr) rules out the whole group when the text
        # lacks it, which on a 64 KiB field saves ~20 us per needle.
        groups: dict[str, list[str]] = {}
        for needle in sorted({n for _, _, needles in self._rules for n in needles}):
            gate = next((c for c in needle if not c.isalnum()), "")
            groups.setdefault(gate, []).append(needle)
        self._needle_groups = tuple((gate, tuple(group)) for gate, group in groups.items())

    def __call__(self, text: str) -> str:
        lowered = text.lower()
        # Each distinct literal is looked for once (rules share many).
        present = {
            n
            for gate, group in self._needle_groups
            if not gate or gate in lowered
            for n in group
            if n in lowered
        }
        for pattern, replacement, needles in self._rules:
            if needles and present.isdisjoint(needles):
                continue
            text = pattern.sub(replacement, text)
        return text


def build_redactor(names: Iterable[str] = SECRET_KEY_NAMES) -> PatternRedactor:
    """The default redactor with key=value names from ``names`` (``REDACTION_KEYS``)."""
    key_names = tuple(names)
    rules = build_patterns(key_names)
    return PatternRedactor([(p, r) for p, r, _ in rules], [t for _, _, t in rules], names=key_names)


_DEFAULT_RULES = build_patterns(SECRET_KEY_NAMES)
DEFAULT_PATTERNS: tuple[tuple[re.Pattern[str], Replacement], ...] = tuple(
    (p, r) for p, r, _ in _DEFAULT_RULES
)
# Lower-case literals without which each default pattern cannot match, in the
# order of DEFAULT_PATTERNS.
DEFAULT_TRIGGERS: tuple[tuple[str, ...], ...] = tuple(t for _, _, t in _DEFAULT_RULES)


def no_redaction(text: str) -> str:
    """The identity redactor (``REDACTION_ENABLED=false``)."""
    return text


default_redactor: Redactor = PatternRedactor(DEFAULT_PATTERNS, names=SECRET_KEY_NAMES)

is_secret_key: Callable[[str], bool] = secret_key_matcher()
"""The matcher of the default names."""


def mask_url(url: str) -> str:
    """A URL with its password (and query string) hidden, for status and logs.

    Hidden parts read :data:`REDACTED`, as in every other redacted text, so a
    password looks the same in a warning, an error line and ``status``.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{REDACTED}@{host}" if ":" in userinfo else f"{user}@{host}"
    query = REDACTED if parts.query else ""
    if not netloc and url.startswith(f"{parts.scheme}://"):
        # unix:///tmp/r.sock: urlunsplit would drop the empty authority ("unix:/tmp").
        return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_value(value: Any, redact: Redactor, is_secret: Callable[[str], bool]) -> Any:
    """A redacted copy of a JSON-like value (dicts, lists, tuples, scalars).

    Strings are passed through ``redact``; dict keys are too (a key can hold a
    token); the value under a key for which ``is_secret`` is true becomes
    :data:`REDACTED` whatever its type (``None`` and ``""`` stay: they hold
    nothing). Two keys that redact to the same text are both kept, the later
    one suffixed ``#2``, ``#3``... Tuples come back as lists.

    Iterative (an explicit stack), so a deeply nested value cannot raise
    RecursionError; its cost is linear in the size of the value. Containers
    are copied: the caller's value is never changed.
    """
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, str):
            parent[slot] = redact(item)
        elif isinstance(item, dict):
            out: dict[Any, Any] = {}
            parent[slot] = out
            for key, child in item.items():
                name = key
                if isinstance(key, str):
                    name = redact(key)
                    if name != key and name in out:
                        n = 2
                        while f"{name}#{n}" in out:
                            n += 1
                        name = f"{name}#{n}"
                    if is_secret(key) and child is not None and child != "":
                        out[name] = REDACTED
                        continue
                out[name] = None
                stack.append((child, out, name))
        elif isinstance(item, list | tuple):
            seq: list[Any] = [None] * len(item)
            parent[slot] = seq
            stack.extend((child, seq, i) for i, child in enumerate(item))
        else:
            parent[slot] = item
    return root[0]


def redact_json_text(text: str, redact: Redactor, is_secret: Callable[[str], bool]) -> str:
    """``text`` redacted; when it is JSON, redacted by structure so it stays valid JSON.

    Text that no pattern changes and that holds no trigger literal of
    ``is_secret`` (a :class:`SecretKeyMatcher`) is returned as it is, without
    parsing. Otherwise JSON text is parsed and passed through
    :func:`redact_value` (strings, keys, and any value under a secret-named
    key, such as ``{"password": 12345}``), then re-encoded - only when that
    changed something, so state without secrets is kept byte for byte. A
    pattern is thus confined to one string (an unterminated PEM block cannot
    swallow the rest of the document). Text that is not JSON gets the
    patterns alone.
    """
    out = redact(text)
    if out == text:
        triggers = getattr(is_secret, "triggers", None)
        if triggers is not None:
            lowered = text.lower()
            if not any(t in lowered for t in triggers):
                return text
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return out
    if not isinstance(data, dict | list):
        return out
    try:
        hidden = redact_value(data, redact, is_secret)
        if hidden == data:
            return text
        return json.dumps(hidden, ensure_ascii=False)
    except (ValueError, RecursionError):
        # Too deep for the C encoder or the comparison: the text-level redaction.
        return out


@functools.lru_cache(maxsize=8)
def redactor_for(names: tuple[str, ...]) -> Redactor:
    """The default redactor for a ``REDACTION_KEYS`` list (one instance per list)."""
    if tuple(names) == SECRET_KEY_NAMES:
        return default_redactor
    return build_redactor(names)


def configured_redactor(enabled: bool, names: Iterable[str]) -> Redactor:
    """The redactor of ``REDACTION_ENABLED`` and ``REDACTION_KEYS`` (given as their values).

    For clients that build themselves from settings (the Athena client, the
    embedder), so what they send is redacted as the runtime redacts what it stores.
    """
    return redactor_for(tuple(names)) if enabled else no_redaction


@functools.lru_cache(maxsize=8)
def key_matcher_for(names: tuple[str, ...]) -> Callable[[str], bool]:
    """The key matcher for a ``REDACTION_KEYS`` list (one instance per list)."""
    if tuple(names) == SECRET_KEY_NAMES:
        return is_secret_key
    return secret_key_matcher(names)


MAX_OBJECT_DEPTH = 256
"""Deepest nesting :func:`redact_object` walks (LangGraph's msgpack refuses deeper values too)."""


def redact_object(value: Any, redact: Redactor, is_secret: Callable[[str], bool]) -> Any:
    """``value`` redacted like :func:`redact_value`, for Python objects kept as they are.

    For the LangGraph saver and store, whose values are Python objects that a
    serializer stores: strings, dict keys and values, lists, tuples (named
    tuples too), sets, dataclasses and pydantic models (LangChain messages and
    their tool calls) are walked; the value under a secret-named key or field
    becomes :data:`REDACTED` whatever its type. Anything else (bytes, numbers,
    other objects) is kept as it is.

    What holds no secret comes back as the very same object, and a changed
    container keeps its type, so a graph reads back the state it wrote. The
    caller's value is never changed. A value nested deeper than
    :data:`MAX_OBJECT_DEPTH` (or one that contains itself) is an
    ``InvalidPayloadError``: the serializer could not store it either.
    """
    return _redact_object(value, redact, is_secret, 0)


def redact_named(name: str, value: Any, redact: Redactor, is_secret: Callable[[str], bool]) -> Any:
    """``value`` as stored under ``name`` (a state channel, a field): :data:`REDACTED` when
    the name is secret and the value holds something, else :func:`redact_object` of it."""
    if _hidden(name, value, is_secret):
        return REDACTED
    return redact_object(value, redact, is_secret)


def _hidden(name: object, child: Any, is_secret: Callable[[str], bool]) -> bool:
    """Whether ``child`` is replaced whole: under a secret name and holding something."""
    if not isinstance(name, str) or not is_secret(name) or child is None:
        return False
    return not (isinstance(child, str) and child == "")


def _redact_object(
    item: Any, redact: Redactor, is_secret: Callable[[str], bool], depth: int
) -> Any:
    if isinstance(item, str):
        out = redact(item)
        return item if out == item else out
    if item is None or isinstance(item, bool | int | float | bytes | bytearray):
        return item
    if depth >= MAX_OBJECT_DEPTH:
        raise InvalidPayloadError(
            f"value nested deeper than {MAX_OBJECT_DEPTH} levels (or containing itself)"
        )
    deeper = depth + 1
    if isinstance(item, dict):
        mapped: dict[Any, Any] = {}
        changed = False
        for key, child in item.items():
            name = redact(key) if isinstance(key, str) else key
            if name != key:
                changed = True
                n = 2
                base = name
                while name in mapped:
                    name = f"{base}#{n}"
                    n += 1
            if _hidden(key, child, is_secret):
                mapped[name] = REDACTED
                changed = True
                continue
            new = _redact_object(child, redact, is_secret, deeper)
            changed = changed or new is not child
            mapped[name] = new
        return _rebuilt(item, mapped) if changed else item
    if isinstance(item, list | tuple | set | frozenset):
        items = [_redact_object(child, redact, is_secret, deeper) for child in item]
        if all(new is old for new, old in zip(items, item, strict=True)):
            return item
        if isinstance(item, tuple) and hasattr(item, "_fields"):  # a named tuple
            return type(item)(*items)
        return _rebuilt(item, items)
    fields = _object_fields(item)
    if fields is None:
        return item
    changes: dict[str, Any] = {}
    for name, child in fields.items():
        if _hidden(name, child, is_secret):
            changes[name] = REDACTED
            continue
        new = _redact_object(child, redact, is_secret, deeper)
        if new is not child:
            changes[name] = new
    if not changes:
        return item
    model_copy = getattr(item, "model_copy", None)
    if callable(model_copy):
        return model_copy(update=changes)
    clone = copy.copy(item)
    for name, new in changes.items():
        # object.__setattr__: frozen dataclasses too (the clone is ours alone).
        object.__setattr__(clone, name, new)
    return clone


_PLAIN_CONTAINERS: tuple[type, ...] = (dict, list, tuple, frozenset, set)


def _rebuilt(original: Any, content: Any) -> Any:
    """``content`` in ``original``'s container type: a subclass is copied and refilled (a
    ``defaultdict`` keeps its factory), or made from ``content`` (a tuple subclass); the plain
    type it derives from when neither works."""
    kind = type(original)
    plain = next(t for t in _PLAIN_CONTAINERS if isinstance(original, t))
    if kind is plain:
        return plain(content)
    try:
        if isinstance(original, dict | list | set):
            clone = copy.copy(original)
            clone.clear()
            if isinstance(clone, list):
                clone.extend(content)
            else:
                clone.update(content)
            return clone
        return kind(content)
    except (TypeError, ValueError, AttributeError):
        return plain(content)


def _object_fields(item: Any) -> dict[str, Any] | None:
    """The fields of a pydantic model or a dataclass instance; None for other objects."""
    model_fields = getattr(type(item), "model_fields", None)
    if isinstance(model_fields, dict) and hasattr(item, "model_copy"):
        return {name: getattr(item, name, None) for name in model_fields}
    if is_dataclass(item) and not isinstance(item, type):
        return {
            f.name: getattr(item, f.name) for f in dataclass_fields(item) if hasattr(item, f.name)
        }
    return None
