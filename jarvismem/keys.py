"""Every Redis key and blob path jarvismem uses, and the id rules that keep them apart.

Nobody formats a key or a path anywhere else. Ids are validated here so that:

* an id can never add a path component or escape a directory (no ``/``, ``\\``,
  ``..``, NUL, leading dot);
* an id can never change a key's shape (no ``:`` separator, no braces that would
  move the Redis Cluster hash tag, no glob characters that would widen a SCAN);
* distinct id tuples always give distinct keys and paths: ids cannot contain the
  separators used to join them, so the joining is injective.

All keys of one workflow share the hash tag ``{<workflow>}`` and therefore one
Redis Cluster slot, which lets Lua scripts and MULTI touch several of them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from jarvismem.defaults import NAMESPACE
from jarvismem.errors import InvalidIdError

MAX_ID_LENGTH = 128
# No trailing dot: "a." would end a blob segment as "a..jsonl" (refused as a
# traversal) and Windows file systems drop it, aliasing "a." with "a".
_ID_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?\Z")

KEY_PREFIX = "jm"

MAX_REVISION = 2**53 - 1
"""The largest revision any store keeps: the Lua scripts that bump revisions
compute in doubles, which hold every integer up to 2^53 exactly and no more
(above it ``rev + 1 == rev``, and formatting one as an integer gave
-9223372036854775808). Imports refuse anything above it."""

# Marks a staging key (after the workflow's hash tag) and never occurs in an id,
# so a staging key can neither collide with nor match a live workflow's keys.
_STAGING_MARK = "~import-"


def validate_id(value: object, kind: str = "id") -> str:
    """Return ``value`` if it is a usable id, else raise :class:`InvalidIdError`.

    An id is 1-128 characters of ``A-Z a-z 0-9 . _ -``, starting with a letter
    or digit, not ending with ``.``, and never containing ``..``.
    """
    if not isinstance(value, str):
        raise InvalidIdError(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidIdError(f"{kind} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"{kind} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if not _ID_RE.match(value) or ".." in value:
        shown = value[:40].encode("unicode_escape").decode("ascii")
        raise InvalidIdError(
            f"{kind} {shown!r} is not allowed: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, not ending with '.', without '..'"
        )
    return value


def validate_turn_id(value: object) -> str:
    """Turn ids may be given as ints by kernels; they are stored as strings."""
    if isinstance(value, bool):
        raise InvalidIdError("turn_id must be a string or an int, got bool")
    if isinstance(value, int):
        value = str(value)
    return validate_id(value, "turn_id")


def validate_revision(value: object, kind: str = "revision", *, minimum: int = 0) -> int:
    """Return ``value`` if it is an int in ``minimum..MAX_REVISION``, else raise.

    Raises :class:`InvalidIdError` (a ``ValueError``): a revision is what a
    compare-and-set compares, so one a Lua double cannot hold exactly is as
    unusable as a malformed id.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidIdError(f"{kind} must be an integer, got {type(value).__name__}")
    if not minimum <= value <= MAX_REVISION:
        raise InvalidIdError(
            f"{kind} {value} is out of range: it must be {minimum}..{MAX_REVISION} (2^53-1, "
            "the largest integer the stores' Lua scripts hold exactly)"
        )
    return value


def _check_scope(scope_key: object) -> str:
    """A recall scope key as made by :meth:`KeySpace.recall_scope`, else raise.

    Checked again where it becomes a key: a hand-made scope holding ``}`` or a
    glob character would move the hash tag or widen a SCAN.
    """
    parts = scope_key.split(":") if isinstance(scope_key, str) else []
    if len(parts) != 3:
        raise InvalidIdError("recall scope must be made by KeySpace.recall_scope")
    validate_id(parts[0], "recall namespace")
    validate_id(parts[1], "agent_id")
    if parts[2] != "_":
        validate_id(parts[2], "session_id")
    return str(scope_key)


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Key and path maker for one tenant namespace.

    ``staging``: when set (see :meth:`staged`), every *workflow* key and blob
    path this key space makes is the staging twin of the live one: an import
    writes there first and moves everything into place at the end. Keys and
    paths outside a workflow are the live ones.
    """

    namespace: str = NAMESPACE
    staging: str | None = None

    def __post_init__(self) -> None:
        validate_id(self.namespace, "namespace")
        if self.staging is not None:
            validate_id(self.staging, "staging token")

    # --- Redis keys: one workflow, one hash slot ------------------------------------

    def _wf(self, workflow_id: str) -> str:
        base = f"{KEY_PREFIX}:{self.namespace}:{{{validate_id(workflow_id, 'workflow_id')}}}"
        if self.staging is None:
            return base
        # Same hash tag, so a Redis Cluster slot holds a workflow and its staging
        # keys and one script can RENAME them into place; the mark after the tag
        # keeps them out of workflow_pattern's SCAN.
        return f"{base}{_STAGING_MARK}{self.staging}"

    # --- staging (import): build a workflow's keys and blobs aside, then switch --------

    def staged(self, token: str) -> KeySpace:
        """This namespace's key space whose workflow keys and paths are staging ones.

        ``token`` (an id) names one import attempt.
        """
        return KeySpace(self.namespace, staging=validate_id(token, "staging token"))

    def live(self) -> KeySpace:
        """The key space of the live keys (this one without ``staging``)."""
        return KeySpace(self.namespace)

    def staging_pattern(self, workflow_id: str) -> str:
        """SCAN pattern for the staging keys of ``workflow_id``.

        Of this key space's token when staged, of every import attempt otherwise
        (what a crashed import left behind).
        """
        live = self.live()._wf(workflow_id)
        token = "*" if self.staging is None else self.staging
        return f"{live}{_STAGING_MARK}{token}:*"

    def unstaged_key(self, workflow_id: str, key: str) -> str:
        """The live key whose staging twin is ``key`` (a key this staged space made)."""
        prefix = self._wf(workflow_id) + ":"
        if self.staging is None or not key.startswith(prefix):
            raise InvalidIdError(f"{key[:80]!r} is not a staging key of this import")
        return f"{self.live()._wf(workflow_id)}:{key[len(prefix) :]}"

    def import_pending(self, workflow_id: str) -> str:
        """Marker of an import whose keys are switched but whose blobs are still moving.

        Holds ``{"token", "paths"}`` (JSON): enough for the next import (or
        :func:`jarvismem.transfer.recover_import`) to finish the move.
        """
        return f"{self.live()._wf(workflow_id)}:import"

    def staging_blob_prefix(self, workflow_id: str) -> str:
        """Prefix of the staging blobs of ``workflow_id`` (this token's, or every one)."""
        # The namespace always appears (unlike live paths), so the join is injective.
        base = f"staging/imports/{self.namespace}/{validate_id(workflow_id, 'workflow_id')}/"
        return base if self.staging is None else f"{base}{self.staging}/"

    def staged_path(self, workflow_id: str, path: str) -> str:
        """The staging twin, in this staged space, of the live blob ``path``."""
        prefix = self.live()._wf_dir(workflow_id) + "/"
        if self.staging is None or not path.startswith(prefix):
            raise InvalidIdError(f"{path[:80]!r} is not a blob of workflow {workflow_id}")
        return f"{self._wf_dir(workflow_id)}/{path[len(prefix) :]}"

    def unstaged_path(self, workflow_id: str, path: str) -> str:
        """The live blob path whose staging twin is ``path`` (a path this staged space made)."""
        prefix = self._wf_dir(workflow_id) + "/"
        if self.staging is None or not path.startswith(prefix):
            raise InvalidIdError(f"{path[:80]!r} is not a staging blob of this import")
        return f"{self.live()._wf_dir(workflow_id)}/{path[len(prefix) :]}"

    def ledger(self, workflow_id: str) -> str:
        """Stream of turns of a workflow (tier 2)."""
        return f"{self._wf(workflow_id)}:ledger"

    def turn_index(self, workflow_id: str) -> str:
        """Hash ``step:agent:turn`` -> stream id; makes turns exactly-once."""
        return f"{self._wf(workflow_id)}:turns"

    @staticmethod
    def turn_field(step_id: str, agent_id: str, turn_id: str | int) -> str:
        """Field of :meth:`turn_index`. Ids hold no ``:``, so the join is injective."""
        return (
            f"{validate_id(step_id, 'step_id')}:{validate_id(agent_id, 'agent_id')}:"
            f"{validate_turn_id(turn_id)}"
        )

    def checkpoint(self, workflow_id: str, step_id: str) -> str:
        """Hash {state, rev, ts} of a step's checkpoint."""
        return f"{self._wf(workflow_id)}:ckpt:{validate_id(step_id, 'step_id')}"

    def checkpoint_ops(self, workflow_id: str, step_id: str) -> str:
        """Sorted set of the operation ids of a step's recent checkpoint saves.

        A save whose reply was lost and that is sent again (by the client's
        retry or an outbox replay) finds its id here and is not applied twice.
        """
        return f"{self._wf(workflow_id)}:ckops:{validate_id(step_id, 'step_id')}"

    def ltm_summary(self, workflow_id: str) -> str:
        """Hash {text, from_id, to_id, turns, updated_at} of the long-term summary."""
        return f"{self._wf(workflow_id)}:ltm"

    def ltm_state(self, workflow_id: str) -> str:
        """Hash of compaction counters since the last summary (turns, tokens)."""
        return f"{self._wf(workflow_id)}:ltm:state"

    def ltm_lock(self, workflow_id: str) -> str:
        """Compactor lock: at most one compactor per workflow across processes."""
        return f"{self._wf(workflow_id)}:ltm:lock"

    def spaces(self, workflow_id: str, agent_id: str) -> str:
        """Hash of an agent's cognitive spaces: one field per space plus ``__container__``."""
        return f"{self._wf(workflow_id)}:spaces:{validate_id(agent_id, 'agent_id')}"

    def spaces_ops(self, workflow_id: str, agent_id: str) -> str:
        """Sorted set of an agent's recently applied spaces writes (op id -> deadline ms).

        Lets a write that Redis applied but whose reply was lost be retried
        without applying it twice. Not ``spaces:...``: exports read those as agents.
        """
        return f"{self._wf(workflow_id)}:spaceops:{validate_id(agent_id, 'agent_id')}"

    def workflow_pattern(self, workflow_id: str) -> str:
        """SCAN pattern for every key of a workflow (ids hold no glob characters)."""
        return f"{self._wf(workflow_id)}:*"

    def workflow_index(self) -> str:
        """Sorted set of the namespace's workflow ids (score = last ledger write, ms).

        One key per namespace, outside every workflow's hash tag: on a Redis
        Cluster it lives in its own slot, so it is updated by its own command
        (see :mod:`jarvismem.tiers.episodic`), never inside a workflow's script.
        """
        return f"{KEY_PREFIX}:{self.namespace}:workflows"

    def ledger_pattern(self) -> str:
        """SCAN pattern for the ledger of every live workflow of this namespace.

        Rebuilds :meth:`workflow_index` from the data (workflows written before
        the index existed, or by an import). Redis globs treat braces literally,
        and ids hold no ``:``, so a staging ledger never matches.
        """
        return f"{KEY_PREFIX}:{self.namespace}:{{*}}:ledger"

    def workflow_from_ledger(self, key: str) -> str | None:
        """The workflow id of a live ledger key of this namespace, else None."""
        head = f"{KEY_PREFIX}:{self.namespace}:{{"
        if not (key.startswith(head) and key.endswith("}:ledger")):
            return None
        workflow = key[len(head) : -len("}:ledger")]
        try:
            return validate_id(workflow, "workflow_id")
        except InvalidIdError:
            return None

    # --- Redis keys outside a workflow --------------------------------------------

    def health_probe(self, token: str) -> str:
        """A short-lived key ``status --write-check`` sets and deletes (proves writes)."""
        return f"{KEY_PREFIX}:{self.namespace}:health-probe:{validate_id(token, 'probe token')}"

    def athena_session(self, destination: str) -> str:
        """Cached Athena session id of one destination (tenant, user, agent, server).

        ``destination`` is :meth:`athena_destination`'s value: a session exists
        on one server only, so its id is never found under another server's key.
        """
        return f"{KEY_PREFIX}:{self.namespace}:athena:session:{_destination_key(destination)}"

    def athena_session_lock(self, destination: str) -> str:
        """Short-lived lock held while one process creates the session of ``destination``."""
        return f"{KEY_PREFIX}:{self.namespace}:athena:session-lock:{_destination_key(destination)}"

    def athena_sent(self, destination: str, idempotency_key: str) -> str:
        """Marker of one event delivered (or being delivered) to an Athena destination.

        ``destination`` is :meth:`athena_destination`'s value; the marker makes
        delivery effectively-once although the server itself never deduplicates.
        """
        return (
            f"{KEY_PREFIX}:{self.namespace}:athena:sent:{_destination_key(destination)}:"
            f"{validate_id(idempotency_key, 'idempotency_key')}"
        )

    def _recall(self, scope_key: str, suffix: str) -> str:
        # One hash tag per scope: a scope's keys share a Redis Cluster slot.
        return f"{KEY_PREFIX}:{self.namespace}:{{recall:{_check_scope(scope_key)}}}:{suffix}"

    def recall_entries(self, scope_key: str) -> str:
        """Hash id -> entry JSON of one recall scope (namespace/agent/session)."""
        return self._recall(scope_key, "entries")

    def recall_postings(self, scope_key: str) -> str:
        """Hash of the scope's BM25 inverted index: packed, chunked postings per token
        and the ``__v__`` index signature (docs/architecture.md, "Recall index format")."""
        return self._recall(scope_key, "postings")

    # --- recall vectors (hybrid retrieval) ------------------------------------

    def recall_vectors(self, scope_key: str) -> str:
        """Hash entry id -> embedder name, entry JSON and float32 vector of one scope.

        Shares the scope's hash tag with :meth:`recall_entries`, so one script can
        touch the vectors, the version and the pending texts of a scope.
        """
        return self._recall(scope_key, "vectors")

    def recall_vectors_version(self, scope_key: str) -> str:
        """Counter bumped by every change of :meth:`recall_vectors` (cache validation)."""
        return self._recall(scope_key, "vecver")

    def recall_embed_pending(self, scope_key: str) -> str:
        """Hash entry id -> text still to embed (written right after the lexical write)."""
        return self._recall(scope_key, "embed-pending")

    def recall_embed_pending_scopes(self) -> str:
        """Set of the scope keys that have texts still to embed (drained on start).

        One key per namespace, outside every scope's hash tag: updated by its own command.
        """
        return f"{KEY_PREFIX}:{self.namespace}:recall-embed-pending"

    @staticmethod
    def scope_of_recall_key(scope_key: str) -> str:
        """``scope_key`` checked (a scope key as :meth:`recall_scope` makes it)."""
        return _check_scope(scope_key)

    @staticmethod
    def recall_scope(namespace: str, agent_id: str, session_id: str | None) -> str:
        """Scope key of recall entries; ``_`` stands for agent-wide scope."""
        ns = validate_id(namespace, "recall namespace")
        agent = validate_id(agent_id, "agent_id")
        session = validate_id(session_id, "session_id") if session_id is not None else "_"
        # Ids start with a letter or digit, so '_' never collides with a session id.
        return f"{ns}:{agent}:{session}"

    # --- LangGraph (jarvismem.integrations.langgraph) ----------------------------------
    # A thread's keys share the hash tag {lg:<thread>}: one Redis Cluster slot, so one
    # Lua script writes a checkpoint, its blobs and its index atomically. Keys that
    # span threads (the thread and run indexes) live in slots of their own and are
    # updated by their own commands, never inside a thread's script.

    def _lg_thread(self, thread_id: str) -> str:
        return f"{KEY_PREFIX}:{self.namespace}:{{lg:{lg_token(thread_id, 'thread_id')}}}"

    def lg_checkpoints(self, thread_id: str) -> str:
        """Sorted set (lexical) of ``<checkpoint_ns>\\0<checkpoint_id>`` of a thread."""
        return f"{self._lg_thread(thread_id)}:cps"

    def lg_records(self, thread_id: str) -> str:
        """Hash ``<ns>\\0<checkpoint_id>`` -> checkpoint record (header, checkpoint, metadata)."""
        return f"{self._lg_thread(thread_id)}:rec"

    def lg_blobs(self, thread_id: str) -> str:
        """Hash ``<ns>\\0<channel>\\0<version>`` -> a channel's serialised value."""
        return f"{self._lg_thread(thread_id)}:blobs"

    def lg_writes(self, thread_id: str) -> str:
        """Hash ``<ns>\\0<checkpoint_id>\\0<task_id>\\0<idx>`` -> one pending write."""
        return f"{self._lg_thread(thread_id)}:writes"

    def lg_write_index(self, thread_id: str) -> str:
        """Sorted set (lexical) of the field names of :meth:`lg_writes` (a range per checkpoint)."""
        return f"{self._lg_thread(thread_id)}:widx"

    def lg_runs(self, thread_id: str) -> str:
        """Sorted set (lexical) of ``<run_id>\\0<ns>\\0<checkpoint_id>`` of a thread."""
        return f"{self._lg_thread(thread_id)}:runs"

    def lg_thread_keys(self, thread_id: str) -> list[str]:
        """Every key of one thread (one slot): what a delete or a TTL refresh touches."""
        return [
            self.lg_checkpoints(thread_id),
            self.lg_records(thread_id),
            self.lg_blobs(thread_id),
            self.lg_writes(thread_id),
            self.lg_write_index(thread_id),
            self.lg_runs(thread_id),
        ]

    def lg_threads(self) -> str:
        """Sorted set of the namespace's thread ids (score = last checkpoint write, ms)."""
        return f"{KEY_PREFIX}:{self.namespace}:lg:threads"

    def lg_run_threads(self, run_id: str) -> str:
        """Set of the thread ids that hold checkpoints of one run (``adelete_for_runs``)."""
        return f"{KEY_PREFIX}:{self.namespace}:{{lgrun:{lg_token(run_id, 'run_id')}}}:threads"

    def _lg_store(self, name: str) -> str:
        # One store, one slot: every batch is one atomic script (see JarvisMemStore).
        return f"{KEY_PREFIX}:{self.namespace}:{{lgstore:{validate_id(name, 'store name')}}}"

    def lg_store_items(self, name: str) -> str:
        """Hash ``<a.b.c>\\0<key>`` -> item record of a LangGraph store."""
        return f"{self._lg_store(name)}:items"

    def lg_store_index(self, name: str) -> str:
        """Sorted set (lexical) of the item names: a namespace prefix is a range."""
        return f"{self._lg_store(name)}:idx"

    def lg_store_expiry(self, name: str) -> str:
        """Sorted set item name -> expiry deadline (epoch ms), items with a TTL only."""
        return f"{self._lg_store(name)}:exp"

    def lg_store_namespaces(self, name: str) -> str:
        """Hash ``<a.b.c>`` -> number of items in that namespace."""
        return f"{self._lg_store(name)}:nss"

    def lg_store_reindex(self, name: str) -> str:
        """Hash item name -> the text its recall entry must hold (``""``: none).

        Written with the item, by the same script (one slot), and cleared once the
        recall index holds that text: an index write that failed is not lost.
        """
        return f"{self._lg_store(name)}:reindex"

    # --- blob paths -------------------------------------------------------------------

    def _wf_dir(self, workflow_id: str) -> str:
        wf = validate_id(workflow_id, "workflow_id")
        if self.staging is not None:
            return f"{self.live().staging_blob_prefix(wf)}{self.staging}"
        if self.namespace == NAMESPACE:
            return f"workflows/{wf}"
        return f"tenants/{self.namespace}/workflows/{wf}"

    def _step_agent_blob(self, kind: str, workflow_id: str, step_id: str, agent_id: str) -> str:
        return (
            f"{self._wf_dir(workflow_id)}/{kind}/{validate_id(step_id, 'step_id')}/"
            f"{validate_id(agent_id, 'agent_id')}.jsonl"
        )

    def health_probe_blob(self, token: str) -> str:
        """A blob ``status --write-check`` writes and deletes (proves writes)."""
        return f"health/{self.namespace}-probe-{validate_id(token, 'probe token')}"

    def scratchpad(self, workflow_id: str, step_id: str, agent_id: str) -> str:
        """JSONL scratchpad of one (workflow, step, agent)."""
        return self._step_agent_blob("scratchpads", workflow_id, step_id, agent_id)

    def scratchpad_prefix(self, workflow_id: str) -> str:
        """Prefix of every scratchpad of a workflow (for carrying goal findings)."""
        return f"{self._wf_dir(workflow_id)}/scratchpads/"

    def goals(self, workflow_id: str, step_id: str, agent_id: str) -> str:
        """JSONL of goal-scoped findings of one (step, agent): small, read whole."""
        return self._step_agent_blob("goals", workflow_id, step_id, agent_id)

    def goals_prefix(self, workflow_id: str) -> str:
        """Prefix of every goal-findings blob of a workflow (carrying forward)."""
        return f"{self._wf_dir(workflow_id)}/goals/"

    def workflow_blob_prefix(self, workflow_id: str) -> str:
        """Prefix of every live blob of a workflow (scratchpads, goals, summary)."""
        return f"{self._wf_dir(workflow_id)}/"

    def workflows_blob_prefix(self) -> str:
        """Prefix under which every live workflow of this namespace keeps its blobs.

        The first path segment after it is the workflow id (listing without Redis).
        """
        if self.namespace == NAMESPACE:
            return "workflows/"
        return f"tenants/{self.namespace}/workflows/"

    def ltm_blob(self, workflow_id: str) -> str:
        """Durable copy of the long-term summary text."""
        return f"{self._wf_dir(workflow_id)}/ltm/summary.txt"

    def ltm_meta_blob(self, workflow_id: str) -> str:
        """Durable copy of the summary's provenance (JSON)."""
        return f"{self._wf_dir(workflow_id)}/ltm/summary.meta.json"

    # --- local outbox files ---------------------------------------------------------------

    def outbox_file(self, kind: str, workflow_id: str, destination: str | None = None) -> str:
        """File (relative to OUTBOX_PATH) of a workflow's outbox of one kind.

        Outboxes live on the local disk, not in blob storage: they must stay
        writable when every remote backend is down. ``destination`` is a
        digest of the backend the records are for (see :func:`destination_digest`):
        two runtimes pointed at different servers never share a file, so a
        replay can only ever reach the server the write was made for.
        """
        kind = validate_id(kind, "outbox kind")
        if destination is not None:
            kind = f"{kind}-{validate_id(destination, 'outbox destination')}"
        return f"{self.namespace}/{kind}/{validate_id(workflow_id, 'workflow_id')}.jsonl"

    def outbox_destination_file(self, kind: str, destination: str) -> str:
        """File (relative to OUTBOX_PATH) naming the backend of one kind-and-destination folder.

        Written once by the first record queued there: the folder name holds
        only a digest, and an operator replaying a leftover must see which
        server it was for (``jarvismem outbox replay``).
        """
        kind = validate_id(kind, "outbox kind")
        destination = validate_id(destination, "outbox destination")
        return f"{self.namespace}/{kind}-{destination}/destination.json"

    def outbox_files_pattern(self, workflow_id: str) -> str:
        """Glob (relative to OUTBOX_PATH) of every outbox file of a workflow, all kinds.

        Matches :meth:`outbox_file` of any kind and destination; the sidecar
        files (``.cursor``, ``.dead``, locks) are named after these.
        """
        return f"{self.namespace}/*/{validate_id(workflow_id, 'workflow_id')}.jsonl"

    def athena_outbox_file(self, destination: str) -> str:
        """File (relative to OUTBOX_PATH) of the outbox of one Athena destination.

        One file per destination (tenant, user, agent, server): a record queued
        for one tenant or server can never be replayed into another's session.
        """
        tenant, user, agent, server = (
            validate_id(p, "athena destination") for p in _destination_parts(destination)
        )
        return f"{self.namespace}/athena/{tenant}/{user}/{agent}.{server}.jsonl"

    @staticmethod
    def athena_destination(tenant_id: str, user_id: str, agent_id: str, base_url: str) -> str:
        """``tenant/user/agent/server``: where an Athena record is bound to go.

        ``server`` is a short hash of the base URL without credentials, so a
        rotated password keeps the destination and another host does not.
        """
        parts = urlsplit(base_url)
        where = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}"
        where += parts.path.rstrip("/")
        server = hashlib.sha256(where.encode()).hexdigest()[:12]
        return (
            f"{validate_id(tenant_id, 'tenant_id')}/{validate_id(user_id, 'user_id')}/"
            f"{validate_id(agent_id, 'agent_id')}/{server}"
        )

    def athena_event_key(
        self,
        workflow_id: str | None,
        step_id: str | None,
        agent_id: str,
        turn_id: str | int,
        kind: str,
    ) -> str:
        """Idempotency key of one event of one turn: the same turn gives the same key.

        Derived from (namespace, workflow, step, agent, turn, kind); ``_`` stands
        for an absent workflow or step (ids never start with ``_``, and never hold
        the ``:`` joining them, so distinct tuples give distinct inputs).
        """
        wf = "_" if workflow_id is None else validate_id(workflow_id, "workflow_id")
        step = "_" if step_id is None else validate_id(step_id, "step_id")
        raw = (
            f"{self.namespace}:{wf}:{step}:{validate_id(agent_id, 'agent_id')}:"
            f"{validate_turn_id(turn_id)}:{validate_id(kind, 'event kind')}"
        )
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


MAX_LG_TOKEN_LENGTH = 1024
"""Longest LangGraph thread or run id accepted (before escaping)."""

_LG_SAFE_RE = re.compile(r"[A-Za-z0-9._-]")
_LG_ALL_SAFE_RE = re.compile(r"[A-Za-z0-9._-]+\Z")


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_PATH_SEGMENT_RE = re.compile(r"[/\\]")


def lg_text(value: object, kind: str, *, empty: bool = False) -> str:
    """Return ``value`` if it is usable as a LangGraph id, else raise :class:`InvalidIdError`.

    The one rule for every id a LangGraph caller hands in (thread, checkpoint
    namespace and id, task, run, channel, store namespace label and key), checked
    before anything is written. LangGraph ids are free text, so the rule refuses
    only what would break a key, a field name or a reply, or read as a path:

    * a non-string, or an empty one (unless ``empty``: the root checkpoint namespace);
    * more than :data:`MAX_LG_TOKEN_LENGTH` characters;
    * a control character (NUL joins the parts of every member name);
    * text that is not valid Unicode (a lone surrogate cannot be encoded as UTF-8,
      so Redis could never be sent it);
    * a ``.`` or ``..`` path segment (between ``/`` or ``\\``): an id never walks a path.
    """
    if not isinstance(value, str):
        raise InvalidIdError(f"LangGraph {kind} must be a string, got {type(value).__name__}")
    if not value:
        if empty:
            return value
        raise InvalidIdError(f"LangGraph {kind} must not be empty")
    if len(value) > MAX_LG_TOKEN_LENGTH:
        raise InvalidIdError(
            f"LangGraph {kind} is {len(value)} characters long; the limit is {MAX_LG_TOKEN_LENGTH}"
        )
    if _CONTROL_RE.search(value):
        raise InvalidIdError(f"LangGraph {kind} must not hold a control character (NUL, newline)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidIdError(
            f"LangGraph {kind} is not valid Unicode text (it holds a lone surrogate)"
        ) from None
    if any(part in (".", "..") for part in _PATH_SEGMENT_RE.split(value)):
        raise InvalidIdError(f"LangGraph {kind} must not hold a '.' or '..' path segment")
    return value


def lg_token(value: object, kind: str) -> str:
    """A LangGraph thread or run id escaped for a key: ``%XX`` for every other byte.

    LangGraph ids are free text (often UUIDs, which pass unchanged). Escaping
    ``%`` too keeps the mapping injective, and no escaped id holds a brace, a
    ``:`` or a glob character, so it can neither move the hash tag nor widen a
    SCAN. Raises :class:`InvalidIdError` for an id :func:`lg_text` refuses.
    """
    value = lg_text(value, kind)
    if _LG_ALL_SAFE_RE.match(value):
        return value
    return "".join(
        c if _LG_SAFE_RE.match(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
        for c in value
    )


def _destination_parts(destination: str) -> tuple[str, str, str, str]:
    parts = destination.split("/") if isinstance(destination, str) else []
    if len(parts) != 4:
        raise InvalidIdError("an Athena destination must be made by KeySpace.athena_destination")
    return parts[0], parts[1], parts[2], parts[3]


def _destination_key(destination: str) -> str:
    """``tenant:user:agent:server``: a destination as a Redis key's tail, each part validated."""
    return ":".join(validate_id(p, "athena destination") for p in _destination_parts(destination))


def destination_digest(*parts: str) -> str:
    """A short, stable, secret-free digest naming a backend (URL, database, root).

    Callers pass the parts that identify where records go, with any password
    already removed; 16 hex characters keep paths short and collisions
    negligible for the handful of backends one machine talks to.
    """
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


# --- the embedded Redis server's folder ------------------------------------------------------

EMBEDDED_REDIS_FILES: dict[str, str] = {
    "socket": "redis.sock",
    "pid": "redis.pid",
    "log": "redis.log",
    "lock": "start.lock",
    # Redis 7+ and Valkey keep the AOF as several files in this folder; Redis 6 as one file.
    "aof_dir": "appendonlydir",
    "aof_file": "appendonly.aof",
}
"""Files (relative to EMBEDDED_REDIS_PATH) of the embedded Redis server: its unix
socket, pidfile, log, start lock and append-only file(s)."""


def embedded_redis_file(kind: str) -> str:
    """Name (relative to EMBEDDED_REDIS_PATH) of one file of the embedded server."""
    try:
        return EMBEDDED_REDIS_FILES[kind]
    except KeyError:
        raise ValueError(f"no embedded Redis file of kind {kind!r}") from None
