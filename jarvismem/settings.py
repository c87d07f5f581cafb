"""One settings object, read from the environment and an optional ``.env`` file.

Every field here is documented in ``.env.example`` (a test enforces it). Invalid
values fail at start-up through :func:`load_settings`, with a message naming the
environment variable; secrets are ``SecretStr`` so they never show in a repr,
a log line or an exception.

The fields stay flat (their names are the variables'); :data:`SETTING_GROUPS`
sorts them into groups read through views: ``settings.redis.url`` is
``settings.redis_url`` (docs/configuration.md lists them by group).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from jarvismem import defaults
from jarvismem.errors import ConfigError
from jarvismem.keys import validate_id
from jarvismem.payload import max_field_chars_for, turn_record_max_bytes
from jarvismem.redaction import REDACTED, mask_url

log = logging.getLogger(__name__)


class OncePerMessage(logging.Filter):
    """Lets a record marked ``extra={"once": True}`` through only the first time its text is seen.

    A typo warning is given once per process, however often settings are
    loaded; the memory of what was said lives on the filter, on the logger.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "once", False):
            return True
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


log.addFilter(OncePerMessage())

# One REDACTION_KEYS name: it becomes part of a regex and a key matcher.
_SECRET_NAME = re.compile(r"[a-z0-9][a-z0-9_. -]*")

StorageBackend = Literal["local", "azure", "none"]
SslCertReqs = Literal["required", "optional", "none"]
RedisDurability = Literal["primary", "replicated"]

SENTINEL_SCHEME = "redis+sentinel://"
"""REDIS_URL scheme of a Sentinel-managed primary (see ``backends/redis_sentinel.py``)."""

MEMORY_URL = "memory://"
"""``REDIS_URL`` value selecting the in-process fakeredis stand-in (ephemeral: tests, opt-in)."""


def _group(**names: str) -> Mapping[str, str]:
    return MappingProxyType(names)


SETTING_GROUPS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "general": _group(namespace="jarvismem_namespace", log_level="log_level"),
        "redis": _group(
            url="redis_url",
            embedded_path="embedded_redis_path",
            cluster="redis_cluster",
            context_ttl_days="redis_context_ttl_days",
            ttl_seconds="ttl_seconds",
            max_connections="redis_max_connections",
            connect_retries="redis_connect_retries",
            ssl_ca_certs="redis_ssl_ca_certs",
            ssl_certfile="redis_ssl_certfile",
            ssl_keyfile="redis_ssl_keyfile",
            ssl_cert_reqs="redis_ssl_cert_reqs",
            ledger_max_len="ledger_max_len",
            durability="redis_durability",
            wait_replicas="redis_wait_replicas",
            wait_timeout_ms="redis_wait_timeout_ms",
        ),
        "storage": _group(
            backend="storage_backend",
            base_path="storage_base_path",
            fsync_appends="storage_fsync_appends",
            inline_append_max_bytes="storage_inline_append_max_bytes",
            azure_connection_string="azure_storage_connection_string",
            azure_container="azure_storage_container",
        ),
        "athena": _group(
            url="athena_url",
            tenant_id="athena_tenant_id",
            user_id="athena_user_id",
            isolate_agents="athena_isolate_agents",
            include_graph_hits="athena_include_graph_hits",
            api_key="athena_api_key",
            jwt_token="athena_jwt_token",
            http_timeout="athena_http_timeout",
        ),
        "llm": _group(
            base_url="llm_base_url",
            api_key="llm_api_key",
            model="llm_model",
            timeout="llm_timeout",
            max_retries="llm_max_retries",
        ),
        "recall": _group(
            embedder="recall_embedder",
            indexed_metadata="recall_indexed_metadata",
            indexed_metadata_keys="recall_indexed_metadata_keys",
        ),
        "embeddings": _group(
            base_url="embeddings_base_url",
            api_key="embeddings_api_key",
            model="embeddings_model",
            dimensions="embeddings_dimensions",
            timeout="embeddings_timeout",
            max_retries="embeddings_max_retries",
            batch="embeddings_batch",
        ),
        "timeouts": _group(
            working="tier_timeout_working",
            episodic="tier_timeout_episodic",
            ltm="tier_timeout_ltm",
            checkpoint="tier_timeout_checkpoint",
            athena="tier_timeout_athena",
        ),
        "compaction": _group(
            enabled="compaction_enabled",
            every_turns="compaction_every_turns",
            token_threshold="compaction_token_threshold",
            chunk_chars="compaction_chunk_chars",
            lock_ttl="compaction_lock_ttl",
            worker="compaction_worker",
        ),
        "scratchpad": _group(
            budget_chars="scratchpad_budget_chars", tail_bytes="scratchpad_tail_bytes"
        ),
        "limits": _group(
            max_turn_field_chars="max_turn_field_chars",
            max_payload_depth="max_payload_depth",
            max_checkpoint_bytes="max_checkpoint_bytes",
        ),
        "outbox": _group(
            path="outbox_path",
            max_entries="outbox_max_entries",
            max_bytes="outbox_max_bytes",
            fsync="outbox_fsync",
            fsync_effective="outbox_fsync_effective",
            poll_seconds="outbox_poll_seconds",
        ),
        "redaction": _group(
            enabled="redaction_enabled",
            keys="redaction_keys",
            key_names="redaction_key_names",
            checkpoints="redact_checkpoints",
        ),
        "ui": _group(token="jarvismem_ui_token"),
    }
)
"""Group -> (name in the group -> attribute of :class:`Settings`). Every field is in
exactly one group (a test enforces it); a few derived values (``redis.ttl_seconds``,
``outbox.fsync_effective``...) sit beside the fields they come from."""


class SettingsView:
    """One group of settings, read-only: ``settings.redis.url`` is ``settings.redis_url``.

    Reads go through to the settings object, so a view never disagrees with it.
    """

    __slots__ = ("_names", "_settings", "group")

    def __init__(self, settings: Settings, group: str) -> None:
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_names", SETTING_GROUPS[group])
        object.__setattr__(self, "group", group)

    def __getattr__(self, name: str) -> Any:
        attribute = self._names.get(name)
        if attribute is None:
            raise AttributeError(
                f"settings group {self.group!r} has no {name!r}; it has {', '.join(self._names)}"
            )
        return getattr(self._settings, attribute)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"settings.{self.group} is read-only")

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def env_names(self) -> list[str]:
        """The variables of this group (``REDIS_URL``, ...), in the group's order."""
        fields = Settings.model_fields
        return [a.upper() for a in self._names.values() if a in fields]

    def __repr__(self) -> str:
        # Through public_dict: secrets masked, credentials stripped from URLs.
        public = self._settings.public_dict()
        shown = ", ".join(f"{name}={public[a]!r}" for name, a in self._names.items() if a in public)
        return f"<settings.{self.group} {shown}>"


class Settings(BaseSettings):
    """Configuration of a jarvismem runtime. Field names are the env variable names."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        case_sensitive=False,
        extra="ignore",
        validate_default=True,
    )

    # --- isolation ---------------------------------------------------------------
    jarvismem_namespace: str = Field(
        defaults.NAMESPACE,
        description="Tenant namespace: prefixes every Redis key and blob path.",
    )

    # --- Redis (ledger, checkpoints, long-term summary, spaces, recall) -----------
    redis_url: str | None = Field(
        None,
        description="redis://, rediss:// (TLS), unix:// or "
        "redis+sentinel://[user:pass@]host:port,host:port/service[/db] URL. Unset: the "
        "embedded Redis server jarvismem starts in EMBEDDED_REDIS_PATH (persistent). "
        "memory://: an in-process stand-in (ephemeral, for tests; pip install jarvismem[memory]).",
    )
    embedded_redis_path: Path = Field(
        defaults.EMBEDDED_REDIS_PATH,
        description="Data folder (append-only file, unix socket) of the embedded Redis "
        "server used when REDIS_URL is unset.",
    )
    redis_cluster: bool = Field(False, description="Connect with RedisCluster.")
    redis_context_ttl_days: float = Field(
        defaults.CONTEXT_TTL_DAYS, gt=0, description="TTL of workflow keys, in days."
    )
    redis_max_connections: int = Field(
        defaults.REDIS_MAX_CONNECTIONS, ge=1, description="Connection pool size."
    )
    redis_connect_retries: int = Field(
        defaults.REDIS_CONNECT_RETRIES,
        ge=0,
        description="Connect retries after the first attempt (5: up to 6 attempts).",
    )
    redis_ssl_ca_certs: Path | None = Field(None, description="CA bundle for rediss://.")
    redis_ssl_certfile: Path | None = Field(None, description="Client certificate (mutual TLS).")
    redis_ssl_keyfile: Path | None = Field(None, description="Client key (mutual TLS).")
    redis_ssl_cert_reqs: SslCertReqs = Field("required", description="Server cert check.")
    ledger_max_len: int = Field(
        defaults.LEDGER_MAX_LEN,
        ge=0,
        description="Retention: approximate max entries per workflow ledger (0 = unbounded).",
    )

    # --- Redis high availability (durability level; Sentinel is a REDIS_URL scheme) ---
    redis_durability: RedisDurability = Field(
        defaults.REDIS_DURABILITY,
        description="primary: a write is done when the primary applied it (a failover may "
        "lose its last writes); replicated: also when WAIT confirmed REDIS_WAIT_REPLICAS "
        "replicas have it, else it is queued in the outbox and replayed.",
    )
    redis_wait_replicas: int = Field(
        defaults.REDIS_WAIT_REPLICAS,
        ge=1,
        description="Replicas a write must reach with REDIS_DURABILITY=replicated.",
    )
    redis_wait_timeout_ms: int = Field(
        defaults.REDIS_WAIT_TIMEOUT_MS,
        gt=0,
        description="How long a replicated write waits for its replicas (ms) before it "
        "is queued in the outbox; below TIER_TIMEOUT_EPISODIC and TIER_TIMEOUT_CHECKPOINT.",
    )

    # --- blob storage (scratchpad, durable summary copy) --------------------------
    storage_backend: StorageBackend = Field("local", description="local | azure | none")
    storage_base_path: Path = Field(
        defaults.STORAGE_BASE_PATH, description="Root folder of the local blob backend."
    )
    storage_fsync_appends: bool = Field(
        defaults.FSYNC_APPENDS,
        description="fsync every scratchpad append (survives power loss; slower).",
    )
    storage_inline_append_max_bytes: int = Field(
        defaults.INLINE_WRITE_MAX_BYTES,
        ge=0,
        description="Local appends up to this size are written from the event loop "
        "(a ~10 us page-cache write) instead of a worker-thread hop, and reads already in "
        "the page cache are served there too; 0 = always a thread.",
    )
    azure_storage_connection_string: SecretStr | None = Field(
        None, description="Azure Blob connection string (STORAGE_BACKEND=azure)."
    )
    azure_storage_container: str = Field(
        defaults.AZURE_CONTAINER, description="Azure Blob container."
    )

    # --- Athena ---------------------------------------------------------------------
    athena_url: str | None = Field(None, description="Athena base URL; unset disables tier 4.")
    athena_tenant_id: str = Field(
        defaults.ATHENA_TENANT_ID, description="Athena tenant for new sessions."
    )
    athena_user_id: str = Field(
        defaults.ATHENA_USER_ID,
        description="Athena user for new sessions; sent as '<this>.<namespace>'.",
    )
    athena_isolate_agents: bool = Field(
        defaults.ATHENA_ISOLATE_AGENTS,
        description="Also append the agent to the Athena user (no mid-term memory shared "
        "between agents).",
    )
    athena_include_graph_hits: bool = Field(
        defaults.ATHENA_INCLUDE_GRAPH_HITS,
        description="Keep long-term graph hits (ltm_node) in search, recall and bundles "
        "(the server does not scope them by tenant, user or agent).",
    )
    athena_api_key: SecretStr | None = Field(None, description="Sent as X-API-Key.")
    athena_jwt_token: SecretStr | None = Field(None, description="Sent as X-JWT-Token.")
    athena_http_timeout: float = Field(
        defaults.ATHENA_HTTP_TIMEOUT, gt=0, description="Per HTTP request, seconds."
    )

    # --- LLM (long-term compression) ---------------------------------------------
    llm_base_url: str | None = Field(
        None, description="OpenAI-compatible base URL (…/v1). Unset: extractive summarizer."
    )
    llm_api_key: SecretStr | None = Field(None, description="Bearer key for the LLM endpoint.")
    llm_model: str = Field(defaults.LLM_MODEL, description="Chat model name.")
    llm_timeout: float = Field(defaults.LLM_TIMEOUT, gt=0, description="Per LLM request, seconds.")
    llm_max_retries: int = Field(
        defaults.LLM_MAX_RETRIES, ge=0, description="Retries on 429/5xx/timeouts."
    )

    # --- recall embeddings and hybrid retrieval -------------------------
    recall_embedder: Literal["none", "openai", "minilm"] = Field(
        defaults.RECALL_EMBEDDER,
        description="Hybrid recall's embedder: none (BM25 only), openai (EMBEDDINGS_* "
        "endpoint) or minilm (offline, the [embeddings] extra).",
    )
    embeddings_base_url: str | None = Field(
        None,
        description="OpenAI-compatible embeddings base URL (…/v1), for RECALL_EMBEDDER=openai.",
    )
    embeddings_api_key: SecretStr | None = Field(
        None, description="Bearer key for the embeddings endpoint."
    )
    embeddings_model: str = Field(defaults.EMBEDDINGS_MODEL, description="Embedding model name.")
    embeddings_dimensions: int | None = Field(
        None, ge=1, description="Vector size asked of the model; unset: the model's own."
    )
    embeddings_timeout: float = Field(
        defaults.EMBEDDINGS_TIMEOUT, gt=0, description="Per embeddings request, seconds."
    )
    embeddings_max_retries: int = Field(
        defaults.EMBEDDINGS_MAX_RETRIES, ge=0, description="Retries on 429/5xx/timeouts."
    )
    embeddings_batch: int = Field(
        defaults.EMBEDDINGS_BATCH, ge=1, description="Most texts per embeddings request."
    )

    # --- per-tier timeouts in rehydrate_bundle / health ----------------------------
    tier_timeout_working: float = Field(
        defaults.TIER_TIMEOUT_WORKING, gt=0, description="Scratchpad read timeout, s."
    )
    tier_timeout_episodic: float = Field(
        defaults.TIER_TIMEOUT_EPISODIC, gt=0, description="Ledger and recall read timeout, s."
    )
    tier_timeout_ltm: float = Field(
        defaults.TIER_TIMEOUT_LTM, gt=0, description="Summary read timeout, s."
    )
    tier_timeout_checkpoint: float = Field(
        defaults.TIER_TIMEOUT_CHECKPOINT, gt=0, description="Checkpoint read timeout, s."
    )
    tier_timeout_athena: float = Field(
        defaults.TIER_TIMEOUT_ATHENA, gt=0, description="Athena context timeout, s."
    )

    # --- long-term compaction policy -------------------------------------------------
    compaction_enabled: bool = Field(True, description="Run background compaction.")
    compaction_every_turns: int = Field(
        defaults.COMPACTION_EVERY_TURNS, ge=1, description="Compact after N new turns."
    )
    compaction_token_threshold: int = Field(
        defaults.COMPACTION_TOKEN_THRESHOLD,
        ge=1,
        description="…or after this many estimated tokens since the last summary.",
    )
    compaction_chunk_chars: int = Field(
        defaults.COMPACTION_CHUNK_CHARS,
        ge=500,
        description=(
            "Max new-text chars per LLM call (map-reduced above; "
            "the extractive summarizer takes a page whole)."
        ),
    )
    compaction_lock_ttl: float = Field(
        defaults.COMPACTION_LOCK_TTL, gt=0, description="Compactor lock expiry, s."
    )
    compaction_worker: Literal["process", "loop"] = Field(
        defaults.COMPACTION_WORKER,
        description=(
            "Where the extractive summarizer runs: process (one child process per agent "
            "process, off the event loop; falls back to loop if it fails) or loop (on the "
            "event loop, in 0.5 ms slices)."
        ),
    )

    # --- scratchpad rendering ------------------------------------------------------------
    scratchpad_budget_chars: int = Field(
        defaults.SCRATCHPAD_BUDGET_CHARS,
        ge=200,
        description="Max size of the bundle's scratchpad markdown.",
    )
    scratchpad_tail_bytes: int = Field(
        defaults.SCRATCHPAD_TAIL_BYTES,
        ge=4096,
        description="Bytes read from the end of a scratchpad to render it.",
    )

    # --- input limits ----------------------------------------------------------------------
    max_turn_field_chars: int = Field(
        defaults.MAX_TURN_FIELD_CHARS,
        ge=256,
        description="thought/action/result longer than this are truncated (a string's "
        "characters, a list's or dict's compact JSON; see the size policy).",
    )
    max_payload_depth: int = Field(
        defaults.MAX_PAYLOAD_DEPTH,
        ge=1,
        le=512,
        description="Deepest nesting of lists/dicts accepted in a turn field or a "
        "scratchpad note; deeper values are refused (InvalidPayloadError). At most 512: "
        "readers decode stored JSON recursively.",
    )
    max_checkpoint_bytes: int = Field(
        defaults.MAX_CHECKPOINT_BYTES, ge=1024, description="Larger checkpoints are refused."
    )

    # --- durable outbox (writes made while a backend is down) ---------------------------
    outbox_path: Path = Field(defaults.OUTBOX_PATH, description="Local outbox folder.")
    outbox_max_entries: int = Field(
        defaults.OUTBOX_MAX_ENTRIES,
        ge=1,
        description="Bound per outbox; entries past it are dropped and counted.",
    )
    outbox_max_bytes: int = Field(
        defaults.OUTBOX_MAX_BYTES,
        ge=1024,
        description="Byte budget per outbox (pending records); past it, new records are "
        "dropped and counted.",
    )
    outbox_fsync: bool | None = Field(
        None,
        description="fsync every outbox append and cursor update (survives power loss); "
        "unset = follow STORAGE_FSYNC_APPENDS.",
    )
    outbox_poll_seconds: float = Field(
        defaults.OUTBOX_POLL_SECONDS,
        gt=0,
        description="How often a runtime checks its open outboxes for records another "
        "process left (and starts their replay).",
    )

    @property
    def outbox_fsync_effective(self) -> bool:
        """OUTBOX_FSYNC, or STORAGE_FSYNC_APPENDS when it is unset."""
        return self.storage_fsync_appends if self.outbox_fsync is None else self.outbox_fsync

    # --- recall: lexical index ---------------------------------------------------
    recall_indexed_metadata: str = Field(
        ",".join(defaults.RECALL_INDEXED_METADATA),
        description="Comma-separated metadata keys whose values recall searches like "
        "content (empty: metadata is filtered on, not searched). Changing it rebuilds "
        "each scope's index when next used.",
    )

    @field_validator("recall_indexed_metadata")
    @classmethod
    def _metadata_keys(cls, value: str) -> str:
        return ",".join(sorted({k.strip() for k in value.split(",") if k.strip()}))

    @property
    def recall_indexed_metadata_keys(self) -> tuple[str, ...]:
        """RECALL_INDEXED_METADATA as a tuple of keys (empty: none indexed)."""
        return tuple(k for k in self.recall_indexed_metadata.split(",") if k)

    # --- security & logs ------------------------------------------------------------------
    redaction_enabled: bool = Field(True, description="Redact API keys/tokens before storing.")
    redaction_keys: str = Field(
        ",".join(defaults.REDACTION_KEYS),
        description="Comma-separated secret names: a dict key naming one (any case, "
        "-_. ignored, as suffix such as db_password) has its value redacted whatever its "
        "type, and name=value pairs in text are hidden.",
    )
    redact_checkpoints: bool = Field(
        defaults.REDACT_CHECKPOINTS,
        description="Redact checkpoint state before saving (save_checkpoint and the "
        "LangGraph saver's values, pending writes and metadata); false keeps it byte for "
        "byte (for callers who need exact state).",
    )
    log_level: str = Field("INFO", description="Logging level of the CLI.")
    jarvismem_ui_token: SecretStr | None = Field(
        None,
        description="Token `jarvismem ui` requires of every request (Authorization: Bearer, "
        "or ?token= once, then a cookie). Required to bind anywhere but loopback.",
    )

    @field_validator("jarvismem_namespace", "athena_tenant_id", "athena_user_id")
    @classmethod
    def _plain_id(cls, value: str, info: ValidationInfo) -> str:
        return validate_id(value, (info.field_name or "id").upper())

    @field_validator("redaction_keys")
    @classmethod
    def _secret_names(cls, value: str) -> str:
        names = [n.strip().lower() for n in value.split(",") if n.strip()]
        bad = [n for n in names if not _SECRET_NAME.fullmatch(n)]
        if bad:
            raise ValueError("names may hold only letters, digits, - _ . and spaces")
        return ",".join(names)

    @property
    def redaction_key_names(self) -> tuple[str, ...]:
        """REDACTION_KEYS as a tuple of names (empty: no key is secret)."""
        return tuple(n for n in self.redaction_keys.split(",") if n)

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if value == MEMORY_URL:
            return value
        if not value.startswith(("redis://", "rediss://", "unix://", SENTINEL_SCHEME)):
            raise ValueError(
                "must start with redis://, rediss://, unix:// or redis+sentinel://, "
                f"or be {MEMORY_URL}"
            )
        return value

    @field_validator("athena_url", "llm_base_url", "embeddings_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @model_validator(mode="after")
    def _cluster_needs_tcp(self) -> Settings:
        if self.redis_cluster and (self.redis_url or "").startswith("unix://"):
            raise ValueError("REDIS_CLUSTER=true needs a redis:// or rediss:// REDIS_URL")
        return self

    @model_validator(mode="after")
    def _high_availability(self) -> Settings:
        url = self.redis_url or ""
        if self.redis_cluster and url.startswith(SENTINEL_SCHEME):
            raise ValueError(
                "REDIS_CLUSTER=true cannot be combined with a redis+sentinel:// REDIS_URL "
                "(Sentinel manages one primary; a cluster fails over by itself)"
            )
        if self.redis_durability == "replicated":
            if not url or url == MEMORY_URL:
                raise ValueError(
                    "REDIS_DURABILITY=replicated needs a Redis server with replicas "
                    "(set REDIS_URL): the embedded server and the in-process stand-in have none"
                )
            # The WAIT must answer before the tier's deadline, or the deadline (not
            # the replica count) would decide, and no shortfall would be reported.
            limit_ms = 1000 * min(self.tier_timeout_episodic, self.tier_timeout_checkpoint)
            if self.redis_wait_timeout_ms >= limit_ms:
                raise ValueError(
                    f"REDIS_WAIT_TIMEOUT_MS={self.redis_wait_timeout_ms} must be below "
                    f"TIER_TIMEOUT_EPISODIC and TIER_TIMEOUT_CHECKPOINT ({limit_ms:g} ms)"
                )
        return self

    @model_validator(mode="after")
    def _turn_records_fit_azure_appends(self) -> Settings:
        # A turn record is one append block on Azure: a field limit whose
        # worst-case record is larger would fail after the ledger write.
        limit = defaults.AZURE_APPEND_BLOCK_BYTES
        if (
            self.storage_backend == "azure"
            and turn_record_max_bytes(self.max_turn_field_chars) > limit
        ):
            raise ValueError(
                f"MAX_TURN_FIELD_CHARS={self.max_turn_field_chars} allows turn records larger "
                f"than one Azure append block ({limit} bytes); with STORAGE_BACKEND=azure it "
                f"must be at most {max_field_chars_for(limit)}"
            )
        return self

    @model_validator(mode="after")
    def _azure_needs_credentials(self) -> Settings:
        if self.storage_backend == "azure" and self.azure_storage_connection_string is None:
            raise ValueError(
                "AZURE_STORAGE_CONNECTION_STRING is required when STORAGE_BACKEND=azure"
            )
        return self

    def __repr_args__(self) -> Any:
        # A password inside REDIS_URL (or any *_url) must not show in a repr or a log.
        for name, value in super().__repr_args__():
            if name is not None and name.endswith("_url") and isinstance(value, str):
                value = mask_url(value)
            yield name, value

    # --- the groups, read-only (SETTING_GROUPS) ---------------------------------------------

    @property
    def general(self) -> SettingsView:
        """``namespace``, ``log_level``."""
        return SettingsView(self, "general")

    @property
    def redis(self) -> SettingsView:
        """``REDIS_*``, ``EMBEDDED_REDIS_PATH``, ``LEDGER_MAX_LEN``: ``settings.redis.url``..."""
        return SettingsView(self, "redis")

    @property
    def storage(self) -> SettingsView:
        """``STORAGE_*`` and ``AZURE_STORAGE_*``: ``settings.storage.backend``..."""
        return SettingsView(self, "storage")

    @property
    def athena(self) -> SettingsView:
        """``ATHENA_*``: ``settings.athena.url``..."""
        return SettingsView(self, "athena")

    @property
    def llm(self) -> SettingsView:
        """``LLM_*``: ``settings.llm.base_url``..."""
        return SettingsView(self, "llm")

    @property
    def recall(self) -> SettingsView:
        """``RECALL_*``: ``settings.recall.embedder``..."""
        return SettingsView(self, "recall")

    @property
    def embeddings(self) -> SettingsView:
        """``EMBEDDINGS_*``: ``settings.embeddings.model``..."""
        return SettingsView(self, "embeddings")

    @property
    def timeouts(self) -> SettingsView:
        """``TIER_TIMEOUT_*``: ``settings.timeouts.episodic``..."""
        return SettingsView(self, "timeouts")

    @property
    def compaction(self) -> SettingsView:
        """``COMPACTION_*``: ``settings.compaction.every_turns``..."""
        return SettingsView(self, "compaction")

    @property
    def scratchpad(self) -> SettingsView:
        """``SCRATCHPAD_*``: ``settings.scratchpad.budget_chars``..."""
        return SettingsView(self, "scratchpad")

    @property
    def limits(self) -> SettingsView:
        """``MAX_*``: ``settings.limits.max_checkpoint_bytes``..."""
        return SettingsView(self, "limits")

    @property
    def outbox(self) -> SettingsView:
        """``OUTBOX_*``: ``settings.outbox.path``..."""
        return SettingsView(self, "outbox")

    @property
    def redaction(self) -> SettingsView:
        """``REDACTION_*``, ``REDACT_CHECKPOINTS``: ``settings.redaction.enabled``..."""
        return SettingsView(self, "redaction")

    @property
    def ui(self) -> SettingsView:
        """``JARVISMEM_UI_TOKEN``: ``settings.ui.token``."""
        return SettingsView(self, "ui")

    @property
    def ttl_seconds(self) -> int:
        """TTL of workflow keys in whole seconds."""
        return max(1, int(self.redis_context_ttl_days * 86_400))

    def public_dict(self) -> dict[str, Any]:
        """Settings safe to print: secrets masked, credentials stripped from URLs."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if isinstance(value, SecretStr):
                out[name] = REDACTED if value.get_secret_value() else None
            elif name.endswith("_url") and isinstance(value, str):
                out[name] = mask_url(value)
            elif isinstance(value, Path):
                out[name] = str(value)
            else:
                out[name] = value
        return out


def validation_problems(exc: ValidationError, *, subject: str, env_names: bool = False) -> str:
    """``"FIELD: message; ..."`` for each error of ``exc``, never echoing an input
    (it may be a secret).

    ``subject`` names an error about the whole object; ``env_names`` writes each
    field path as its environment variable (upper case).
    """
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or subject
        # pydantic words a validator's message "Value error, ..."; a reader needs the message.
        message = _PYDANTIC_PREFIX.sub("", err["msg"])
        problems.append(f"{loc.upper() if env_names else loc}: {message}")
    return "; ".join(problems)


_PYDANTIC_PREFIX = re.compile(r"^(?:Value|Assertion) error, ")


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment and ``.env``; raise :class:`ConfigError` if invalid.

    ``overrides`` take precedence (handy in tests and the CLI). Pass
    ``_env_file=None`` to ignore a ``.env`` in the working directory.
    """
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = validation_problems(exc, subject="settings", env_names=True)
        raise ConfigError(f"invalid configuration: {problems}") from None
    warn_unknown_names(overrides.get("_env_file", Settings.model_config.get("env_file")))
    return settings


# --- names that look like ours but are not (typos) -------------------------------------------

OUR_PREFIXES = ("JARVISMEM_", "REDIS_", "ATHENA_", "LLM_", "AZURE_")
"""A ``.env`` name with one of these prefixes is meant for jarvismem."""

ENV_PREFIXES = ("JARVISMEM_",)
"""Environment names checked even without a close match: only jarvismem uses this prefix."""

OTHER_KNOWN_NAMES = frozenset(
    {
        # docker-compose.yml and scripts/ read these from .env or the environment.
        "ATHENA_IMAGE",
        "REDIS_HOST_PORT",
        "REDIS_PASSWORD",
        "JARVISMEM_SKIP_SERVICES",
        "JARVISMEM_SOAK_SEED",
        # The test suite's switches.
        "JARVISMEM_REQUIRE_INTEGRATION",
        "JARVISMEM_TEST_REDIS_URL",
        "JARVISMEM_TEST_AZURITE",
        "JARVISMEM_CHECKER_SECONDS",
        "JARVISMEM_CRASH_KILLS",
        "JARVISMEM_OUTAGE_SECONDS",
        # scripts/test's workers, and its phases (tests/phases.py).
        "JARVISMEM_TEST_WORKERS",
        "JARVISMEM_TEST_PHASE",
        "JARVISMEM_SERIAL_LIST",
    }
)
"""Names with our prefixes that are not settings but are not typos either."""


def setting_names() -> list[str]:
    """Every settings variable name, upper case (``REDIS_URL``, ...)."""
    return sorted(name.upper() for name in Settings.model_fields)


def env_file_names(path: Path | str) -> list[str]:
    """The variable names a ``.env`` file assigns (comments, blanks and ``export`` skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name = line.split("=", 1)[0].strip().removeprefix("export ").strip()
        if name:
            names.append(name)
    return names


def unknown_name_warnings(names: list[str], *, prefixes: tuple[str, ...], source: str) -> list[str]:
    """One message per name that is not a setting but looks meant as one.

    A name looks meant as one when it has one of ``prefixes`` or is close to a
    real name (difflib). A silent typo is the worst kind: ``REDIS_ULR=``
    would otherwise run on the ephemeral embedded store without a word.
    """
    known = setting_names()
    known_set = set(known)
    messages = []
    for raw in names:
        name = raw.upper()
        if name in known_set or name in OTHER_KNOWN_NAMES:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if not close and not name.startswith(prefixes):
            continue
        unknown = "no such setting (see docs/configuration.md)."
        hint = f"did you mean {close[0]}?" if close else unknown
        messages.append(f"{source}: unknown setting {raw} is ignored: {hint}")
    return messages


def warn_unknown_names(env_file: Any) -> None:
    """Log a WARNING, once per process and name, for each likely typo.

    Checks every name of the ``.env`` file and the environment's names with
    jarvismem's own prefixes (other programs' variables are left alone).
    """
    messages: list[str] = []
    files = env_file if isinstance(env_file, list | tuple) else [env_file]
    for file in files:
        if file and Path(file).is_file():
            names = env_file_names(file)
            messages += unknown_name_warnings(names, prefixes=OUR_PREFIXES, source=str(file))
    env_names = [n for n in os.environ if n.upper().startswith(OUR_PREFIXES)]
    messages += unknown_name_warnings(env_names, prefixes=ENV_PREFIXES, source="environment")
    for message in messages:
        log.warning("%s", message, extra={"once": True})  # OncePerMessage drops repeats


# Entry points (``MemoryRuntime.from_env``, the drop-in ``UnifiedMemory(wf,
# step, agent, redis, blob)``) read settings from the environment when none are
# given. Read once per process and kept: views made per step then share one
# Settings object instead of parsing the environment per step.
_default_settings: Settings | None = None


def default_settings() -> Settings:
    """Settings from the environment, read once per process (entry points only)."""
    global _default_settings
    if _default_settings is None:
        _default_settings = load_settings()
    return _default_settings
