"""jarvismem.defaults: each shared default defined once, documented, and what Settings uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jarvismem import defaults
from jarvismem.settings import Settings

# Settings field -> the constant its default must be.
SETTINGS_DEFAULTS = {
    "jarvismem_namespace": defaults.NAMESPACE,
    "redis_context_ttl_days": defaults.CONTEXT_TTL_DAYS,
    "redis_max_connections": defaults.REDIS_MAX_CONNECTIONS,
    "redis_connect_retries": defaults.REDIS_CONNECT_RETRIES,
    "ledger_max_len": defaults.LEDGER_MAX_LEN,
    "storage_base_path": defaults.STORAGE_BASE_PATH,
    "storage_inline_append_max_bytes": defaults.INLINE_WRITE_MAX_BYTES,
    "azure_storage_container": defaults.AZURE_CONTAINER,
    "athena_http_timeout": defaults.ATHENA_HTTP_TIMEOUT,
    "llm_model": defaults.LLM_MODEL,
    "llm_timeout": defaults.LLM_TIMEOUT,
    "llm_max_retries": defaults.LLM_MAX_RETRIES,
    "tier_timeout_working": defaults.TIER_TIMEOUT_WORKING,
    "tier_timeout_episodic": defaults.TIER_TIMEOUT_EPISODIC,
    "tier_timeout_ltm": defaults.TIER_TIMEOUT_LTM,
    "tier_timeout_checkpoint": defaults.TIER_TIMEOUT_CHECKPOINT,
    "tier_timeout_athena": defaults.TIER_TIMEOUT_ATHENA,
    "compaction_every_turns": defaults.COMPACTION_EVERY_TURNS,
    "compaction_token_threshold": defaults.COMPACTION_TOKEN_THRESHOLD,
    "compaction_chunk_chars": defaults.COMPACTION_CHUNK_CHARS,
    "compaction_lock_ttl": defaults.COMPACTION_LOCK_TTL,
    "scratchpad_budget_chars": defaults.SCRATCHPAD_BUDGET_CHARS,
    "scratchpad_tail_bytes": defaults.SCRATCHPAD_TAIL_BYTES,
    "max_turn_field_chars": defaults.MAX_TURN_FIELD_CHARS,
    "max_checkpoint_bytes": defaults.MAX_CHECKPOINT_BYTES,
    "outbox_path": defaults.OUTBOX_PATH,
    "outbox_max_entries": defaults.OUTBOX_MAX_ENTRIES,
    "outbox_max_bytes": defaults.OUTBOX_MAX_BYTES,
    "outbox_poll_seconds": defaults.OUTBOX_POLL_SECONDS,
}


@pytest.mark.parametrize(("field", "constant"), sorted(SETTINGS_DEFAULTS.items()))
def test_settings_defaults_are_the_constants(field: str, constant: object) -> None:
    assert Settings.model_fields[field].default == constant


def test_a_loaded_settings_object_carries_the_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for field, constant in SETTINGS_DEFAULTS.items():
        assert getattr(settings, field) == constant, field


def test_the_ttl_in_seconds_is_the_ttl_in_days() -> None:
    assert defaults.CONTEXT_TTL_SECONDS == defaults.CONTEXT_TTL_DAYS * 86_400


def _module_tree() -> ast.Module:
    return ast.parse(Path(defaults.__file__).read_text(encoding="utf-8"))


def test_every_constant_is_exported_and_documented() -> None:
    body = _module_tree().body
    documented: set[str] = set()
    assigned: set[str] = set()
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            assigned.add(name)
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
                and following.value.value.strip()
            ):
                documented.add(name)
    assert assigned == set(defaults.__all__)
    assert assigned - documented == set(), "each default says what it bounds"


def test_it_imports_nothing_from_jarvismem() -> None:
    for node in ast.walk(_module_tree()):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("jarvismem")
        elif isinstance(node, ast.Import):
            assert not any(alias.name.startswith("jarvismem") for alias in node.names)
