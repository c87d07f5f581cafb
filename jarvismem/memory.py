"""``UnifiedMemory``: the one object an agent kernel awaits every turn.

It composes the four tiers for one (workflow, step, agent). A tier is active
only when its backend is given (the degradation matrix in the README); an
absent backend makes it a no-op. A *failing* backend never raises into the
kernel: writes go to a durable local outbox and are replayed in order, reads
return the tier's empty default, and the failure shows in ``health()`` and in
the bundle's ``degraded`` entry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from jarvismem import telemetry
from jarvismem.backends.blob.base import BlobStorage
from jarvismem.bundle import Bundle, read_bundle
from jarvismem.defaults import LEDGER_TAIL, PROMPT_BUDGET_CHARS, RECALL_CONTENT_MAX_CHARS
from jarvismem.engine.core import MemoryEngine
from jarvismem.engine.workflow import WorkflowState
from jarvismem.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidPayloadError,
    PayloadTooLargeError,
    RecallStoreMissingError,
)
from jarvismem.health import memory_health
from jarvismem.keys import KeySpace, validate_id, validate_turn_id
from jarvismem.payload import clean_value, max_field_chars_for, turn_record_max_bytes
from jarvismem.recall.models import MemoryEntry, RecallResult
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.recall.prompt import (
    Preflight,
    capture_conversation,
    recall_for_turn,
    redact_results,
)
from jarvismem.recall.prompt import preflight as build_preflight
from jarvismem.recall.stores import RecallStore
from jarvismem.records import encode_fields
from jarvismem.redaction import REDACTED, redact_json_text
from jarvismem.settings import Settings, default_settings
from jarvismem.spaces.store import SpacesStore
from jarvismem.tiers.checkpoints import CLOCK, Checkpoint, new_op_id, validate_checkpoint
from jarvismem.tiers.episodic import EpisodicLedger
from jarvismem.tiers.longterm import LongTermMemory
from jarvismem.tiers.pending import newer_checkpoint, outstanding_records, queued_checkpoint
from jarvismem.tiers.working import WorkingScratchpad

if TYPE_CHECKING:  # the client (and httpx) is loaded only when Athena is configured
    from jarvismem.backends.athena import AthenaClient

log = telemetry.logger(__name__)

# Checkpoint states up to this size are redacted on the event loop (~0.1 ms at
# this size); larger ones on a worker thread.
_INLINE_REDACT_CHARS = 16_384


class UnifiedMemory:
    """Tiered memory of one agent at one step of one workflow.

    ``UnifiedMemory(workflow_id, step_id, agent_id, redis_store=None,
    blob_storage=None, athena_client=None)`` builds the tiers from the given
    clients (which it does not close) on a private engine, configured by
    ``settings`` (default: read from the environment once per process).
    ``MemoryRuntime.memory(...)`` (or ``runtime=`` any
    :class:`~jarvismem.engine.MemoryEngine`) builds it on a shared engine that
    owns the connections.
    """

    def __init__(
        self,
        workflow_id: str,
        step_id: str,
        agent_id: str,
        redis_store: Any = None,
        blob_storage: BlobStorage | None = None,
        athena_client: AthenaClient | None = None,
        *,
        runtime: MemoryEngine | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.step_id = validate_id(step_id, "step_id")
        self.agent_id = validate_id(agent_id, "agent_id")
        self._owns_runtime = runtime is None
        if runtime is None:
            # A private engine around the caller's clients; it never closes them.
            runtime = MemoryEngine(
                settings if settings is not None else default_settings(),
                redis=redis_store,
                blob=blob_storage,
                athena=athena_client,
            )
        elif (
            redis_store is not None
            or blob_storage is not None
            or athena_client is not None
            or settings is not None
        ):
            raise TypeError("pass either backends (and settings) or runtime=, not both")
        self.runtime = rt = runtime
        s = rt.settings
        self._turn_field_limit = s.max_turn_field_chars
        self._max_depth = s.max_payload_depth
        self._is_secret_key = rt.is_secret_key
        _check_append_limit(rt.blob, self._turn_field_limit)
        # Validates the id and creates the state now; the view keeps no reference
        # to it (see _wf), so an idle view costs what the view itself holds.
        rt.workflow(self.workflow_id)
        self.working: WorkingScratchpad | None = None
        if rt.blob is not None:
            self.working = WorkingScratchpad(
                rt.blob,
                rt.keyspace,
                self.workflow_id,
                self.step_id,
                self.agent_id,
                tail_bytes=s.scratchpad_tail_bytes,
                budget_chars=s.scratchpad_budget_chars,
                redactor=rt.redactor,
                append=self._durable_append,
                max_chars=self._turn_field_limit,
                max_depth=self._max_depth,
                is_secret_key=self._is_secret_key,
            )
        self._spaces: SpacesStore | None = None
        # KeySpace.turn_field of (step, agent, turn) minus the turn: the ids are
        # validated above, so log_turn only appends the validated turn id.
        self._turn_prefix = KeySpace.turn_field(self.step_id, self.agent_id, "0")[:-1]
        # The step's current goal as the user last stated it (log_turn/capture):
        # the bundle ranks Athena's mid-term chains against it.
        self._goal: str | None = None

    @property
    def _wf(self) -> WorkflowState:
        """The workflow's shared state, from the engine each time.

        Not kept on the view: the engine holds the recently used workflows
        (an LRU) and any other only while something uses it, so thousands of
        idle views do not pin thousands of workflow states; a state the engine
        let go is made again on next use (its outboxes are files, its counters
        in Redis).
        """
        return self.runtime.workflow(self.workflow_id)

    @property
    def episodic(self) -> EpisodicLedger | None:
        """The episodic ledger tier (None without Redis)."""
        return self._wf.ledger

    @property
    def ltm(self) -> LongTermMemory | None:
        """The long-term summary tier (None without Redis or blob storage)."""
        return self._wf.ltm

    async def _durable_append(self, path: str, data: bytes) -> bool:
        return await self._wf.durable_append(path, data)

    # --- the hot path ------------------------------------------------------------------

    @telemetry.log_turn
    async def log_turn(
        self,
        turn_id: str | int,
        thought: Any,
        action: Any,
        result: Any,
        tokens: int = 0,
        *,
        user_message: str | None = None,
    ) -> None:
        """Record one turn in every active tier. Exactly-once per turn id.

        ``user_message``: what the user said this turn. Athena gets it as a
        ``message`` event with role ``user`` (the server forms mid-term memory
        from user messages only) before the turn's thought, action and result
        (role ``agent``); it also becomes the goal the bundle ranks Athena's
        mid-term chains against.

        Raises only for bad input (a specific error, before anything is
        written); a backend outage queues the turn durably instead.
        """
        turn = validate_turn_id(turn_id)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError("tokens must be a non-negative int")
        user_message = self._user_text(user_message)
        self.runtime.ensure_background()
        thought = self._clean(thought, "thought")
        action = self._clean(action, "action")
        result = self._clean(result, "result")
        ts = time.time()
        wf = self._wf
        ledger_write: Awaitable[object] | None = None
        args: list[str] | None = None
        if wf.redis_writer is not None:
            entry = {
                "turn_id": turn,
                "step_id": self.step_id,
                "agent_id": self.agent_id,
                "ts": ts,
                "thought": thought,
                "action": action,
                "result": result,
                "tokens": tokens,
            }
            args = encode_fields(entry)
            record = {"op": "turn", "args": args, "field": self._turn_prefix + turn}
            ledger_write = wf.redis_writer.submit(record)
        local: list[Awaitable[object]] = []
        if self.working is not None:
            if args is not None:
                # The ledger's JSON of each field is reused for the scratchpad line.
                local.append(self.working.append_turn_encoded(turn, args, ts))
            else:
                turn_data = {
                    "thought": thought,
                    "action": action,
                    "result": result,
                    "tokens": tokens,
                }
                local.append(self.working.append_turn(turn, turn_data, ts))
        if self.runtime.athena is not None:
            local.append(self._athena_turn(turn, thought, action, result, user_message))
        if ledger_write is None:
            for write in local:
                await write
        elif not local:
            await ledger_write
        else:
            # The ledger append is awaited here, so it runs now, in this step,
            # up to its socket write (or joins the pipeline in flight); the local
            # writes go to a task that runs on the next loop iteration, while
            # Redis works on the append: a local append's CPU (~10-40 us)
            # overlaps the round trip instead of adding to it.
            others = asyncio.ensure_future(
                local[0] if len(local) == 1 else _in_order(local)  # type: ignore[arg-type]
            )
            try:
                await ledger_write
            finally:
                await others
        if wf.compactor is not None:
            wf.compactor.note_turn(tokens or _estimate_tokens(thought, action, result))
            wf.compactor.maybe_schedule()

    def _user_text(self, user_message: str | None) -> str | None:
        """A user message checked, redacted and bounded like a turn field; noted as the goal."""
        if user_message is None:
            return None
        if not isinstance(user_message, str):
            raise InvalidPayloadError(
                f"user_message must be a string, got {type(user_message).__name__}"
            )
        cleaned = self._clean(user_message, "user_message")
        if isinstance(cleaned, str) and cleaned.strip():
            self._goal = cleaned
        return cleaned if isinstance(cleaned, str) else None

    async def _athena_turn(
        self, turn: str, thought: Any, action: Any, result: Any, user_message: str | None = None
    ) -> None:
        """Queue the turn for Athena; never waits for the network and never raises.

        Athena is a best-effort tier and the turn is in the ledger already: a
        failure here (a local disk error, a full outbox) is counted and shown in
        ``health()`` by the Athena tier, never raised into the kernel. The turn's
        identity makes its idempotency keys, so a re-logged turn reaches Athena once.
        """
        try:
            athena = await self.runtime.athena_memory_for_write(self.agent_id)
            if athena is not None:
                # The values were redacted by _clean already.
                await athena.record_turn(
                    turn,
                    thought,
                    action,
                    result,
                    redacted=True,
                    workflow_id=self.workflow_id,
                    step_id=self.step_id,
                    agent_id=self.agent_id,
                    user_message=user_message,
                )
        except Exception as exc:  # the last guard: log_turn must not fail because of Athena
            log.warning("Athena copy of turn %s not queued: %s: %s", turn, type(exc).__name__, exc)

    def _clean(self, value: Any, name: str) -> Any:
        """Redact, bound and check one turn field (the size policy of ``jarvismem.payload``).

        Raises ``InvalidPayloadError`` naming the field (too deep, not JSON)
        before anything is written.
        """
        return clean_value(
            value,
            redact=self.runtime.redactor,
            is_secret_key=self._is_secret_key,
            max_chars=self._turn_field_limit,
            max_depth=self._max_depth,
            field=name,
        )

    # --- checkpoints -----------------------------------------------------------------------

    async def save_checkpoint(
        self, state_json: str, *, expected_rev: int | None = None
    ) -> int | None:
        """Save this step's resumable state; returns the revision this save wrote.

        An int is always a revision this save wrote itself, never another's.
        With ``expected_rev``, a save based on a stale revision raises
        :class:`~jarvismem.errors.CheckpointConflictError` and one that cannot be
        checked now (Redis down or stalled) raises
        :class:`~jarvismem.errors.BackendUnavailableError`; nothing is queued.
        Without it, ``None`` means no revision is known to this call: the save
        was queued durably (Redis unavailable; it lands when replayed unless a
        newer save is stored by then), or it was superseded (a save newer than
        this one is already stored, so this one is not), or there is no Redis.
        Load the checkpoint to learn the current revision.
        """
        max_bytes = self.runtime.settings.max_checkpoint_bytes
        state = validate_checkpoint(state_json, max_bytes)
        if isinstance(expected_rev, bool) or not (
            expected_rev is None or isinstance(expected_rev, int)
        ):
            raise InvalidPayloadError("expected_rev must be an int or None")
        wf = self._wf
        writer = wf.redis_writer
        if writer is None:
            return None
        if self.runtime.settings.redact_checkpoints:
            # Checkpoints go into the bundle, hence the prompt: secrets are
            # hidden unless REDACT_CHECKPOINTS=false (exact state needed).
            # Redacting can lengthen the state ("[REDACTED]"), so it is
            # checked against the limit again.
            state = validate_checkpoint(await self._redact_state(state), max_bytes)
        self.runtime.ensure_background()
        store = wf.checkpoints(self.step_id)
        if expected_rev is not None:
            if await writer.notice():
                raise BackendUnavailableError(
                    "Redis is unavailable: a conditional checkpoint save cannot be checked now"
                )
            # Translated errors (BackendUnavailableError, CheckpointConflictError)
            # and a bounded wait: a stalled Redis cannot hang the caller.
            try:
                async with asyncio.timeout(writer.timeout):
                    return await store.save_validated(state, expected_rev=expected_rev)
            except TimeoutError:
                raise BackendUnavailableError(
                    f"checkpoint save: Redis did not answer within {writer.timeout:g}s "
                    "(the save may or may not have landed; it is safe to retry)"
                ) from None
        # The stamp is taken now, when the save is made: queued or not, it
        # orders against every other save by when it was acknowledged.
        record = {
            "op": "checkpoint",
            "step": self.step_id,
            "state": state,
            "ts": time.time(),
            "stamp": CLOCK.next(),
            "opid": new_op_id(),
        }
        result = await writer.submit(record)
        return None if result is None else int(result)

    async def _redact_state(self, state: str) -> str:
        """Checkpoint state redacted by structure when it is JSON (see redact_json_text).

        A large state is parsed and redacted on a worker thread: up to
        MAX_CHECKPOINT_BYTES of JSON would hold the event loop for tens of ms.
        """
        rt = self.runtime
        if len(state) <= _INLINE_REDACT_CHARS:
            return redact_json_text(state, rt.redactor, rt.is_secret_key)
        return await asyncio.to_thread(redact_json_text, state, rt.redactor, rt.is_secret_key)

    async def load_checkpoint(self) -> str | None:
        """This step's last saved state, or None."""
        record = await self.load_checkpoint_record()
        return None if record is None else record.state

    async def load_checkpoint_record(self) -> Checkpoint | None:
        """State with its revision and time; None when absent or Redis is down."""
        wf = self._wf
        writer = wf.redis_writer
        if writer is None:
            return None
        self.runtime.ensure_background()
        timeout = self.runtime.settings.tier_timeout_checkpoint
        queued = queued_checkpoint(await outstanding_records(writer, timeout), self.step_id)
        try:
            async with asyncio.timeout(timeout):
                stored = await wf.checkpoints(self.step_id).load()
        except Exception as exc:
            log.warning("checkpoint unavailable: %s", type(exc).__name__)
            stored = None
        return newer_checkpoint(stored, queued)

    # --- cognitive spaces ---------------------------------------------------------------------

    @property
    def spaces(self) -> SpacesStore | None:
        """The agent's cognitive spaces (world beliefs, task agenda); lazy, no I/O until used."""
        if self._spaces is None and self.runtime.redis is not None:
            self._spaces = SpacesStore(
                self.runtime.redis,
                self.runtime.keyspace,
                self.workflow_id,
                self.agent_id,
                ttl_seconds=self.runtime.settings.ttl_seconds,
                timeout=self.runtime.settings.tier_timeout_checkpoint,
                redactor=self.runtime.redactor,
                is_secret_key=self.runtime.is_secret_key,
            )
        return self._spaces

    # --- recall: facts remembered into the prompt by policy -------------------------------

    async def remember(
        self,
        content: str,
        *,
        entry_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        occurred_at: int | str | datetime | None = None,
        policy: MemoryPolicy | None = None,
    ) -> MemoryEntry:
        """Store a fact for later recall (an upsert when ``entry_id`` is given).

        ``occurred_at``: when the fact happened (epoch ms, ISO 8601, a datetime;
        zone-less = UTC); its day becomes searchable ("in May 2023"). ``None``:
        when it is written (an upsert keeps the entry's earlier ``occurred_at``).
        Scope and namespace come from the runtime's :class:`MemoryPolicy`
        (``policy`` overrides it for this call); raises ``RecallStoreMissingError``
        when no recall store is configured and
        :class:`~jarvismem.errors.PayloadTooLargeError` for content longer than
        ``RECALL_CONTENT_MAX_CHARS`` (checked before the redactor reads it all).
        """
        if isinstance(content, str) and len(content) > RECALL_CONTENT_MAX_CHARS:
            raise PayloadTooLargeError(
                f"content is {len(content)} characters; a remembered fact may hold at most "
                f"{RECALL_CONTENT_MAX_CHARS}"
            )
        store = self._recall_store()
        request = (policy or self.runtime.policy).write_request(
            agent_id=self.agent_id,
            content=self.runtime.redactor(content),
            session_id=session_id,
            context=context,
            entry_id=entry_id,
            metadata=None if metadata is None else self._redacted_metadata(metadata),
            occurred_at=occurred_at,
        )
        return await store.write(request)

    def _redacted_metadata(self, metadata: Mapping[str, str]) -> dict[str, str]:
        """Entry metadata with secret-named values hidden and the rest redacted."""
        rt = self.runtime
        return {
            key: REDACTED
            if rt.is_secret_key(key) and value
            else (rt.redactor(value) if isinstance(value, str) else value)
            for key, value in metadata.items()
        }

    async def recall(
        self,
        query: str,
        *,
        limit: int | None = None,
        filter: Mapping[str, str] | None = None,
        min_score: float | None = None,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        policy: MemoryPolicy | None = None,
    ) -> list[RecallResult]:
        """The ``limit`` (default: the policy's ``max_entries``) most relevant remembered
        facts, each with its ``score`` ([] when the policy is disabled).
        ``policy``: instead of the runtime's, for this call.

        Matches come first by score; when fewer than ``limit`` match, the newest
        other entries fill the list with score 0 (the *recency fill*), so the
        list is ``limit`` long whenever the scope holds that many entries.
        ``filter``: metadata that every result must carry (key: value, all must
        match; values are redacted like stored metadata before comparing).
        ``min_score``: leave out weaker results; above 0 it also leaves out the fill.

        Their content is redacted with the runtime's redactor: an entry stored
        before a pattern existed does not hand its secret back to the agent.
        """
        results = await recall_for_turn(
            self.runtime.recall_store,
            policy or self.runtime.policy,
            agent_id=self.agent_id,
            query=query,
            session_id=session_id,
            context=context,
            limit=limit,
            filter=None if filter is None else self._redacted_metadata(filter),
            min_score=0.0 if min_score is None else min_score,
        )
        return redact_results(results, self.runtime.redactor)

    async def preflight(
        self,
        instructions: str,
        user_message: str,
        *,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        ledger_tail: int = LEDGER_TAIL,
        budget_chars: int = PROMPT_BUDGET_CHARS,
    ) -> Preflight:
        """The exact chat messages of the next LLM call and which memory went in.

        Rehydrates the bundle, recalls by policy, and assembles the prompt;
        calls no LLM.
        """
        bundle = await self.rehydrate_bundle(ledger_tail, query=user_message)
        recalled = await self.recall(user_message, session_id=session_id, context=context)
        return build_preflight(
            instructions,
            user_message,
            bundle=bundle,
            recalled=recalled,
            policy=self.runtime.policy,
            budget_chars=budget_chars,
            redactor=self.runtime.redactor,
            is_secret_key=self.runtime.is_secret_key,
        )

    async def capture(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str | None = None,
        context: Mapping[str, str] | None = None,
        turn_id: str | int | None = None,
    ) -> MemoryEntry | None:
        """After a turn: store ``"User: …\nAssistant: …"`` when the policy captures conversation.

        With Athena configured, the exchange also goes to Athena (whatever the
        policy): the user's message as a ``message`` event with role ``user``,
        the reply with role ``agent``. ``turn_id``: the turn it belongs to; its
        user message then reaches Athena once even if ``log_turn`` carried it too.
        """
        user = self.runtime.redactor(user)
        assistant = self.runtime.redactor(assistant)
        if isinstance(user, str) and user.strip():
            self._goal = user
        if self.runtime.athena is not None:
            await self._athena_conversation(user, assistant, turn_id)
        return await capture_conversation(
            self.runtime.recall_store,
            self.runtime.policy,
            agent_id=self.agent_id,
            user=user,
            assistant=assistant,
            session_id=session_id,
            context=context,
        )

    async def _athena_conversation(
        self, user: str, assistant: str, turn_id: str | int | None
    ) -> None:
        """Queue the exchange for Athena; like :meth:`_athena_turn`, never raises."""
        try:
            turn = None if turn_id is None else validate_turn_id(turn_id)
            athena = await self.runtime.athena_memory_for_write(self.agent_id)
            if athena is not None:
                await athena.record_interaction(
                    user,
                    assistant,
                    turn_id=turn,
                    workflow_id=self.workflow_id,
                    step_id=self.step_id,
                    redacted=True,
                )
        except Exception as exc:  # Athena is best effort: capture must not fail because of it
            log.warning("Athena copy of a conversation not queued: %s: %s", type(exc).__name__, exc)

    def _recall_store(self) -> RecallStore:
        store = self.runtime.recall_store
        if store is None:
            raise RecallStoreMissingError(
                "no recall store: give the runtime Redis or pass recall_store="
            )
        return store

    # --- recovery ----------------------------------------------------------------------------

    @telemetry.rehydrate_bundle
    async def rehydrate_bundle(
        self, ledger_tail: int = LEDGER_TAIL, *, query: str | None = None
    ) -> Bundle:
        """Everything needed to carry on after a crash, read from all tiers at once.

        ``query``: the current goal; Athena's mid-term chains are ranked against
        it (default: the user message this view last logged or captured; with
        neither, the newest chains).

        See :class:`~jarvismem.bundle.Bundle` for its keys: ``ltm_summary``,
        ``recent_turns``, ``checkpoint``, ``scratchpad``, ``athena_context``,
        ``spaces`` (empty defaults None, [], None, "", None, None) and
        ``degraded`` ({tier: reason} for tiers that failed or timed out).
        """
        rt = self.runtime
        if isinstance(ledger_tail, bool) or not isinstance(ledger_tail, int) or ledger_tail < 0:
            raise ValueError("ledger_tail must be a non-negative int")
        rt.ensure_background()
        return await read_bundle(
            self._wf,
            self.step_id,
            ledger_tail,
            settings=rt.settings,
            working=self.working,
            athena=None if rt.athena is None else partial(rt.athena_memory, self.agent_id),
            spaces=self.spaces,
            athena_query=query if query is not None else self._goal,
        )

    async def health(self) -> dict[str, Any]:
        """Per-tier state: active, backend, reachable, latency, outbox, reasons."""
        return await memory_health(self.runtime, self._wf, self.working)

    async def compact_now(self) -> dict[str, Any]:
        """Run long-term compaction for this workflow now (waits for it)."""
        if self._wf.compactor is None:
            return {"compacted": False, "reason": "long-term tier inactive (needs Redis and blob)"}
        result = await self._wf.compactor.compact()
        return dict(result) if isinstance(result, dict) else result.__dict__

    async def close(self) -> None:
        """Close a view built from backends directly (drains its outboxes).

        A view handed out by a runtime leaves the runtime open.
        """
        if self._owns_runtime:
            await self.runtime.close()

    async def __aenter__(self) -> UnifiedMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_append_limit(blob: BlobStorage | None, max_chars: int) -> None:
    """Refuse a field limit whose turn records could exceed the blob store's largest append.

    Such a record would fail on the scratchpad append after the ledger write
    (Azure: one append block, 4 MiB). Settings check this for the Azure
    backend; this covers any store handed to a view.
    """
    limit = getattr(blob, "max_append_bytes", None)
    if isinstance(limit, int) and turn_record_max_bytes(max_chars) > limit:
        raise ConfigError(
            f"MAX_TURN_FIELD_CHARS={max_chars} allows turn records larger than the "
            f"{limit}-byte largest append of the {getattr(blob, 'name', 'given')} blob store; "
            f"use at most {max_field_chars_for(limit)}"
        )


async def _in_order(writes: list[Awaitable[object]]) -> None:
    """Await ``writes`` one after the other (the scratchpad append, then Athena's queueing)."""
    for write in writes:
        await write


def _estimate_tokens(*values: Any) -> int:
    """~4 characters per token: good enough to trigger compaction."""
    return sum(len(v) if isinstance(v, str) else 16 for v in values) // 4 + 1
