"""jarvismem.defaults: each shared default defined once, documented, and what Settings uses."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem import defaults
from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.llm.client import HttpPolicy
from jarvismem.backends.outbox import Outbox
from jarvismem.recall import (
    AthenaRecallStore,
    InMemoryRecallStore,
    RedisRecallStore,
    prompt,
)
from jarvismem.recall.athena_store import AthenaSearchMemory
from jarvismem.recall.models import RecallRequest
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.resilience import retrying
from jarvismem.settings import Settings
from jarvismem.tiers.athena.config import AthenaTierConfig
from jarvismem.tiers.athena.memory import AthenaMemory
from jarvismem.tiers.athena.reads import AthenaReads
from jarvismem.tiers.checkpoints import CheckpointStore
from jarvismem.tiers.compaction import CompactionPolicy
from jarvismem.tiers.episodic import EpisodicLedger
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.tiers.working import ScratchpadBounds

# Settings field -> the constant its default must be.
SETTINGS_DEFAULTS = {
    "jarvismem_namespace": defaults.NAMESPACE,
    "max_payload_depth": defaults.MAX_PAYLOAD_DEPTH,
    "redact_checkpoints": defaults.REDACT_CHECKPOINTS,
    "redis_context_ttl_days": defaults.CONTEXT_TTL_DAYS,
    "redis_max_connections": defaults.REDIS_MAX_CONNECTIONS,
    "redis_connect_retries": defaults.REDIS_CONNECT_RETRIES,
    "redis_durability": defaults.REDIS_DURABILITY,
    "redis_wait_replicas": defaults.REDIS_WAIT_REPLICAS,
    "redis_wait_timeout_ms": defaults.REDIS_WAIT_TIMEOUT_MS,
    "ledger_max_len": defaults.LEDGER_MAX_LEN,
    "storage_base_path": defaults.STORAGE_BASE_PATH,
    "embedded_redis_path": defaults.EMBEDDED_REDIS_PATH,
    "storage_fsync_appends": defaults.FSYNC_APPENDS,
    "storage_inline_append_max_bytes": defaults.INLINE_WRITE_MAX_BYTES,
    "azure_storage_container": defaults.AZURE_CONTAINER,
    "athena_tenant_id": defaults.ATHENA_TENANT_ID,
    "athena_user_id": defaults.ATHENA_USER_ID,
    "athena_http_timeout": defaults.ATHENA_HTTP_TIMEOUT,
    "athena_isolate_agents": defaults.ATHENA_ISOLATE_AGENTS,
    "athena_include_graph_hits": defaults.ATHENA_INCLUDE_GRAPH_HITS,
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


# (callable, parameter) -> the constant its default must be: the constructors that
# can be built without a Settings object take the same defaults as the settings.
CONSTRUCTOR_DEFAULTS: list[tuple[Callable[..., Any], str, object]] = [
    (LocalBlobStorage, "inline_append_max_bytes", defaults.INLINE_WRITE_MAX_BYTES),
    (LocalBlobStorage, "fsync_appends", defaults.FSYNC_APPENDS),
    (Outbox, "fsync", defaults.FSYNC_APPENDS),
    (Outbox, "max_entries", defaults.OUTBOX_MAX_ENTRIES),
    (AthenaTierConfig, "outbox_fsync", defaults.FSYNC_APPENDS),
    (AthenaClient, "timeout", defaults.ATHENA_HTTP_TIMEOUT),
    (HttpPolicy, "timeout", defaults.LLM_TIMEOUT),
    (HttpPolicy, "retry_after_cap", defaults.RETRY_AFTER_CAP),
    (retrying, "retry_after_cap", defaults.RETRY_AFTER_CAP),
    (EpisodicLedger, "ttl_seconds", defaults.CONTEXT_TTL_SECONDS),
    (AthenaTierConfig, "tenant_id", defaults.ATHENA_TENANT_ID),
    (AthenaTierConfig, "user_id", defaults.ATHENA_USER_ID),
    (AthenaTierConfig, "dedupe_ttl", defaults.CONTEXT_TTL_SECONDS),
    (AthenaTierConfig, "outbox_dir", defaults.OUTBOX_PATH),
    (AthenaTierConfig, "outbox_max_entries", defaults.OUTBOX_MAX_ENTRIES),
    (AthenaTierConfig, "outbox_max_bytes", defaults.OUTBOX_MAX_BYTES),
    (LongTermMemory.compress, "chunk_chars", defaults.COMPACTION_CHUNK_CHARS),
    (LongTermMemory.compress, "max_chars", defaults.SUMMARY_MAX_CHARS),
    (CompactionPolicy, "every_turns", defaults.COMPACTION_EVERY_TURNS),
    (CompactionPolicy, "token_threshold", defaults.COMPACTION_TOKEN_THRESHOLD),
    (CompactionPolicy, "chunk_chars", defaults.COMPACTION_CHUNK_CHARS),
    (CompactionPolicy, "lock_ttl", defaults.COMPACTION_LOCK_TTL),
    (CompactionPolicy, "summary_chars", defaults.SUMMARY_MAX_CHARS),
    (ScratchpadBounds, "tail_bytes", defaults.SCRATCHPAD_TAIL_BYTES),
    (ScratchpadBounds, "budget_chars", defaults.SCRATCHPAD_BUDGET_CHARS),
    (CheckpointStore, "max_bytes", defaults.MAX_CHECKPOINT_BYTES),
    (EpisodicLedger.tail, "count", defaults.LEDGER_TAIL),
    (AthenaClient.search, "limit", defaults.SEARCH_LIMIT),
    (AthenaMemory.search, "limit", defaults.SEARCH_LIMIT),
    (AthenaReads.search, "limit", defaults.SEARCH_LIMIT),
    (AthenaSearchMemory.search, "limit", defaults.SEARCH_LIMIT),
    (RecallRequest, "limit", defaults.SEARCH_LIMIT),
    (RecallRequest, "namespace", defaults.RECALL_NAMESPACE),
    (InMemoryRecallStore.list_entries, "namespace", defaults.RECALL_NAMESPACE),
    (InMemoryRecallStore.delete, "namespace", defaults.RECALL_NAMESPACE),
    (RedisRecallStore.list_entries, "namespace", defaults.RECALL_NAMESPACE),
    (RedisRecallStore.delete, "namespace", defaults.RECALL_NAMESPACE),
    (AthenaRecallStore.list_entries, "namespace", defaults.RECALL_NAMESPACE),
    (prompt.preflight, "budget_chars", defaults.PROMPT_BUDGET_CHARS),
]


@pytest.mark.parametrize(
    ("target", "parameter", "constant"),
    CONSTRUCTOR_DEFAULTS,
    ids=[f"{target.__qualname__}.{parameter}" for target, parameter, _ in CONSTRUCTOR_DEFAULTS],
)
def test_constructor_defaults_are_the_constants(
    target: Callable[..., Any], parameter: str, constant: object
) -> None:
    assert inspect.signature(target).parameters[parameter].default == constant


def test_a_policy_naming_no_namespace_uses_the_recall_default() -> None:
    assert MemoryPolicy().namespace == defaults.RECALL_NAMESPACE


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


def test_the_redaction_keys_default_is_the_documented_names() -> None:
    assert Settings.model_fields["redaction_keys"].default == ",".join(defaults.REDACTION_KEYS)
