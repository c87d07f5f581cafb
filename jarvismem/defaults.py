"""Every default value used in more than one place, defined once.

``jarvismem.settings`` takes its field defaults from here, and the constructors
that can be built without a Settings object take their parameter defaults from
here too, so a default tuned in one place cannot drift from its twin. Each
constant says what it bounds. Values a single module owns alone stay in that
module.

This module imports nothing from jarvismem (layer 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

# --- isolation and retention ---------------------------------------------------------------

NAMESPACE: Final = "default"
"""Tenant namespace prefixing every Redis key and blob path."""

CONTEXT_TTL_DAYS: Final = 7
"""How long workflow keys (ledger, checkpoints, summary, dedupe marks) live, in days."""

CONTEXT_TTL_SECONDS: Final = CONTEXT_TTL_DAYS * 86_400
""":data:`CONTEXT_TTL_DAYS` in seconds, for constructors that take a TTL in seconds."""

# --- Redis --------------------------------------------------------------------------------------

REDIS_MAX_CONNECTIONS: Final = 64
"""Size of one Redis connection pool."""

REDIS_CONNECT_RETRIES: Final = 5
"""Extra connect attempts before a Redis client gives up at start-up."""

LEDGER_MAX_LEN: Final = 100_000
"""Approximate entries kept per workflow ledger (0 = unbounded)."""

# --- Redis high availability (durability level) ---------------------------------------------

REDIS_DURABILITY: Final = "primary"
"""When a Redis write counts as done: ``primary`` (the primary applied it) or
``replicated`` (``WAIT`` confirmed :data:`REDIS_WAIT_REPLICAS` replicas have it too)."""

REDIS_WAIT_REPLICAS: Final = 1
"""Replicas a ``replicated`` write must reach before it is acknowledged."""

REDIS_WAIT_TIMEOUT_MS: Final = 1000
"""How long a ``replicated`` write waits for its replicas before it is queued in the
outbox instead (kept below the tier timeouts, so the WAIT decides, not the deadline)."""

# --- local I/O from the event loop ----------------------------------------------------------

INLINE_WRITE_MAX_BYTES: Final = 16_384
"""Largest local write (blob append, outbox put) done from the event loop instead
of a worker thread: a page-cache write of this size is cheaper than a thread hop."""

FSYNC_APPENDS: Final = False
"""Whether local appends (scratchpad lines, outbox records) are fsynced: off, since
a process crash loses nothing either way; on survives a power loss, slower."""

# --- blob storage -----------------------------------------------------------------------------

STORAGE_BASE_PATH: Final = Path(".jarvismem/blobs")
"""Root folder of the local blob backend."""

EMBEDDED_REDIS_PATH: Final = Path(".jarvismem/redis")
"""Data folder of the embedded Redis server (used when ``REDIS_URL`` is unset): its
append-only file, unix socket, pidfile and log, beside the local blob folder."""

AZURE_CONTAINER: Final = "jarvismem"
"""Azure Blob container of the scratchpads and summary copies."""

# --- Athena -----------------------------------------------------------------------------------

ATHENA_HTTP_TIMEOUT: Final = 10.0
"""Deadline of one Athena HTTP request, in seconds."""

ATHENA_TENANT_ID: Final = "default"
"""Athena tenant of the sessions a runtime creates."""

ATHENA_USER_ID: Final = "jarvismem"
"""Athena user of the sessions a runtime creates (the namespace is appended to it)."""

ATHENA_ISOLATE_AGENTS: Final = False
"""Append the agent to the Athena user id too, so agents of one namespace share no
mid-term memory (the server isolates mid-term memory by (tenant, user), not by agent)."""

ATHENA_INCLUDE_GRAPH_HITS: Final = False
"""Keep Athena's long-term graph hits (``ltm_node``) in search, recall and bundles.
Off by default: the server's graph lookup ignores tenant, user and agent."""

# --- LLM ----------------------------------------------------------------------------------------

LLM_MODEL: Final = "gpt-4o-mini"
"""Chat model asked for summaries when none is configured."""

LLM_TIMEOUT: Final = 60.0
"""Deadline of one LLM HTTP attempt, in seconds."""

LLM_MAX_RETRIES: Final = 3
"""Extra LLM attempts after a 429, a 5xx, a timeout or a connection error."""

LLM_BACKOFF_BASE: Final = 0.5
"""First LLM retry waits between half this and this, in seconds (then doubling)."""

LLM_BACKOFF_CAP: Final = 8.0
"""Longest backoff ceiling between two LLM attempts, in seconds."""

RETRY_AFTER_CAP: Final = 30.0
"""Longest server ``Retry-After`` an HTTP client honours, in seconds."""

LLM_MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024
"""Largest LLM response body read; a larger one is refused, never buffered."""

SUMMARY_MAX_CHARS: Final = 4000
"""Longest long-term summary a summarizer returns."""

# --- per-tier read timeouts ---------------------------------------------------------------------

TIER_TIMEOUT_WORKING: Final = 5.0
"""Scratchpad read (and scratchpad write) deadline, in seconds."""

TIER_TIMEOUT_EPISODIC: Final = 2.0
"""Ledger read (and Redis write) deadline, in seconds; also recall reads' (``recall``)."""

TIER_TIMEOUT_LTM: Final = 5.0
"""Long-term summary read deadline, in seconds."""

TIER_TIMEOUT_CHECKPOINT: Final = 2.0
"""Checkpoint read deadline, in seconds."""

TIER_TIMEOUT_ATHENA: Final = 3.0
"""Athena context read deadline, in seconds."""

# --- long-term compaction -------------------------------------------------------------------

COMPACTION_EVERY_TURNS: Final = 50
"""New turns after which the long-term summary is recompacted."""

COMPACTION_TOKEN_THRESHOLD: Final = 8000
"""Estimated new tokens after which the long-term summary is recompacted."""

COMPACTION_CHUNK_CHARS: Final = 12_000
"""Largest input of one summarizer call (map-reduce above it)."""

COMPACTION_LOCK_TTL: Final = 120.0
"""Expiry of a compactor's lock, in seconds (a crashed compactor frees it)."""

COMPACTION_WORKER: Final = "process"
"""Where the extractive summarizer runs: ``process`` (a child process per agent
process, off the kernel's event loop) or ``loop`` (on the event loop, in slices)."""

# --- scratchpad rendering ---------------------------------------------------------------------

SCRATCHPAD_BUDGET_CHARS: Final = 8000
"""Largest scratchpad markdown put in a bundle."""

SCRATCHPAD_TAIL_BYTES: Final = 262_144
"""Bytes read from the end of a scratchpad to render it."""

# --- reads and prompts -------------------------------------------------------------------------

LEDGER_TAIL: Final = 10
"""Recent ledger entries read into a bundle (and shown by a ledger tail)."""

SEARCH_LIMIT: Final = 5
"""Hits asked for by a search or a recall request that names no limit."""

PROMPT_BUDGET_CHARS: Final = 6000
"""Largest memory text (bundle and recalled entries) assembled into one prompt."""

RECALL_NAMESPACE: Final = "default"
"""Recall namespace of an entry, request or policy that names none."""

# --- input limits -----------------------------------------------------------------------------

MAX_TURN_FIELD_CHARS: Final = 65_536
"""Longest thought/action/result kept; longer ones are truncated."""

MAX_CHECKPOINT_BYTES: Final = 4 * 1024 * 1024
"""Largest checkpoint accepted; larger ones are refused."""

MAX_PAYLOAD_DEPTH: Final = 64
"""Deepest nesting of containers accepted in a turn field or a scratchpad note; deeper
values are refused. Tool results nest a dozen levels at most in practice; 64 leaves
room for that and stays far below what a JSON decoder reading them back recurses into."""

SPACE_VALUE_MAX_CHARS: Final = 1024 * 1024
"""Longest JSON encoding of one value written to a cognitive space (a key's value,
a list item, a task, or a whole space's data); larger ones are refused, not cut:
a belief or a task truncated mid-way would be a wrong one."""

RECALL_CONTENT_MAX_CHARS: Final = 64 * 1024
"""Longest fact accepted by ``remember`` (and by a recall store's write); longer
ones are refused. A fact is a sentence or a paragraph, and each one is indexed
token by token, so a huge one costs its size several times over."""

AZURE_APPEND_BLOCK_BYTES: Final = 4 * 1024 * 1024
"""Largest append to an Azure append blob (one append block, a service limit): the
Azure backend refuses more, and the settings refuse turn-field limits whose records
could exceed it."""

# --- durable outbox ---------------------------------------------------------------------------

OUTBOX_PATH: Final = Path(".jarvismem/outbox")
"""Folder of the local outboxes."""

OUTBOX_MAX_ENTRIES: Final = 100_000
"""Pending records per outbox; records past it are dropped and counted."""

OUTBOX_MAX_BYTES: Final = 256 * 1024 * 1024
"""Pending bytes per outbox; records past it are dropped and counted."""

OUTBOX_POLL_SECONDS: Final = 1.0
"""How often a runtime looks for records another process left in its outboxes."""

OUTBOX_CLAIM_POLL_SECONDS: Final = 0.2
"""How long a would-be deliverer waits when another one holds an outbox's claim."""

# --- redaction -----------------------------------------------------------------------------------

REDACTION_KEYS: Final[tuple[str, ...]] = (
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
"""Secret names (REDACTION_KEYS): a dict key naming one has its value replaced by
``[REDACTED]`` whatever its type, and ``name=value`` / ``"name": value`` pairs in text
are hidden. A key matches ignoring case and the separators ``- _ .`` and space, with
the name as its suffix or as a leading/inner word not followed by a describing word
(``client_secret``, ``db_password``, ``x-api-key``, ``secret_key`` match;
``token_count``, ``password_policy`` do not). Deliberately absent: ``key`` (ids and
cache keys), ``tokens`` (usage counts), ``pwd`` (the working directory in an
environment dump), ``session`` (session objects and ids that grant nothing)."""

REDACT_CHECKPOINTS: Final = True
"""Redact checkpoint state before it is saved (opt out when exact state is needed)."""

# --- recall: lexical index ---------------------------------------------------------

RECALL_INDEXED_METADATA: Final[tuple[str, ...]] = ()
"""Metadata keys whose values the lexical recall stores index like content (none:
metadata is filtered on, not searched)."""

# --- recall embeddings and hybrid retrieval ---------------------------------------

RECALL_EMBEDDER: Final = "none"
"""Embedder of hybrid recall: ``none`` (lexical only), ``openai`` or ``minilm`` (offline)."""

EMBEDDINGS_MODEL: Final = "text-embedding-3-small"
"""Model asked of an OpenAI-compatible ``/embeddings`` endpoint."""

EMBEDDINGS_TIMEOUT: Final = 30.0
"""Deadline of one embeddings HTTP attempt, in seconds."""

EMBEDDINGS_MAX_RETRIES: Final = 3
"""Extra embeddings attempts after a 429, a 5xx, a timeout or a connection error."""

EMBEDDINGS_BATCH: Final = 64
"""Most texts sent in one embeddings request (and embedded in one background batch)."""

EMBEDDINGS_MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
"""Largest embeddings response body read: 64 vectors of 3,072 floats as JSON text
take ~4 MiB, so this leaves room for large batches and still bounds memory."""

RECALL_HYBRID_CANDIDATES: Final = 50
"""Lexical and vector candidates each that hybrid recall fuses (at least ``limit``)."""

RECALL_QUERY_EMBED_TIMEOUT: Final = 5.0
"""Longest wait for a recall's query embedding, in seconds; past it the recall is
lexical (an embeddings endpoint's own retries could otherwise hold a turn for minutes)."""

RECALL_EMBED_RETRY_BASE: Final = 1.0
"""First wait before background embedding retries after a failure, in seconds (doubling)."""

RECALL_EMBED_RETRY_CAP: Final = 60.0
"""Longest wait between two background embedding attempts, in seconds."""

__all__ = [
    "ATHENA_HTTP_TIMEOUT",
    "ATHENA_INCLUDE_GRAPH_HITS",
    "ATHENA_ISOLATE_AGENTS",
    "ATHENA_TENANT_ID",
    "ATHENA_USER_ID",
    "AZURE_APPEND_BLOCK_BYTES",
    "AZURE_CONTAINER",
    "COMPACTION_CHUNK_CHARS",
    "COMPACTION_EVERY_TURNS",
    "COMPACTION_LOCK_TTL",
    "COMPACTION_TOKEN_THRESHOLD",
    "COMPACTION_WORKER",
    "CONTEXT_TTL_DAYS",
    "CONTEXT_TTL_SECONDS",
    "EMBEDDED_REDIS_PATH",
    "EMBEDDINGS_BATCH",
    "EMBEDDINGS_MAX_RESPONSE_BYTES",
    "EMBEDDINGS_MAX_RETRIES",
    "EMBEDDINGS_MODEL",
    "EMBEDDINGS_TIMEOUT",
    "FSYNC_APPENDS",
    "INLINE_WRITE_MAX_BYTES",
    "LEDGER_MAX_LEN",
    "LEDGER_TAIL",
    "LLM_BACKOFF_BASE",
    "LLM_BACKOFF_CAP",
    "LLM_MAX_RESPONSE_BYTES",
    "LLM_MAX_RETRIES",
    "LLM_MODEL",
    "LLM_TIMEOUT",
    "MAX_CHECKPOINT_BYTES",
    "MAX_PAYLOAD_DEPTH",
    "MAX_TURN_FIELD_CHARS",
    "NAMESPACE",
    "OUTBOX_CLAIM_POLL_SECONDS",
    "OUTBOX_MAX_BYTES",
    "OUTBOX_MAX_ENTRIES",
    "OUTBOX_PATH",
    "OUTBOX_POLL_SECONDS",
    "PROMPT_BUDGET_CHARS",
    "RECALL_CONTENT_MAX_CHARS",
    "RECALL_EMBEDDER",
    "RECALL_EMBED_RETRY_BASE",
    "RECALL_EMBED_RETRY_CAP",
    "RECALL_HYBRID_CANDIDATES",
    "RECALL_INDEXED_METADATA",
    "RECALL_NAMESPACE",
    "RECALL_QUERY_EMBED_TIMEOUT",
    "REDACTION_KEYS",
    "REDACT_CHECKPOINTS",
    "REDIS_CONNECT_RETRIES",
    "REDIS_DURABILITY",
    "REDIS_MAX_CONNECTIONS",
    "REDIS_WAIT_REPLICAS",
    "REDIS_WAIT_TIMEOUT_MS",
    "RETRY_AFTER_CAP",
    "SCRATCHPAD_BUDGET_CHARS",
    "SCRATCHPAD_TAIL_BYTES",
    "SEARCH_LIMIT",
    "SPACE_VALUE_MAX_CHARS",
    "STORAGE_BASE_PATH",
    "SUMMARY_MAX_CHARS",
    "TIER_TIMEOUT_ATHENA",
    "TIER_TIMEOUT_CHECKPOINT",
    "TIER_TIMEOUT_EPISODIC",
    "TIER_TIMEOUT_LTM",
    "TIER_TIMEOUT_WORKING",
]
