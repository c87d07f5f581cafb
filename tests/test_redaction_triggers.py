"""The literal pre-check of the default redactor never changes what it redacts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jarvismem.redaction import DEFAULT_PATTERNS, PatternRedactor, default_redactor

ALWAYS = PatternRedactor(DEFAULT_PATTERNS, triggers=[()] * len(DEFAULT_PATTERNS))

FRAGMENTS = [
    "Bearer ",
    "JWT ",
    "basic ",
    "sk-",
    "sk-proj-",
    "ghp_",
    "github_pat_",
    "AKIA",
    "ASIA",
    "xoxb-",
    "AIza",
    "eyJ",
    "AccountKey=",
    "api_key=",
    "API-KEY: ",
    "password=",
    '"secret": "',
    "token=",
    "Passwd=",
    "https://user:",
    "@host/",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "PRIVATE KEY",
    "sk_live_",
    "rk_test_",
    "whsec_",
    "hf_",
    "api_org_",
    "glpat-",
    "npm_",
    "SG.",
    "xapp-1-",
    "xoxe-",
    "hooks.slack.com/services/",
    "discord.com/api/webhooks/1/",
    "?sig=",
    '\\"password\\": \\"',
    "'api_key': ",
    "client_secret=",
    "X-Api-Key: ",
    "Set-Cookie: ",
    "Authorization",
    "connection_string=",
    "passphrase: ",
    "DB_PASSWORD=",
    "12345678",
    "abcdefgh12345678",
    "A1b2C3d4E5f6G7h8",
    "0123456789ABCDEF",
    "x" * 35,
    ".",
    " ",
    "\n",
    "'",
    '"',
    "=",
    ":",
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=16))
def test_triggers_redact_exactly_like_running_every_pattern(parts: list[str]) -> None:
    text = "".join(parts)
    assert default_redactor(text) == ALWAYS(text)


def test_mixed_case_secrets_still_trigger() -> None:
    text = "AUTHORIZATION: BEARER abcdefgh12345678 and AccountKey=" + "Q" * 40
    assert default_redactor(text) == ALWAYS(text)
    assert "abcdefgh12345678" not in default_redactor(text)
