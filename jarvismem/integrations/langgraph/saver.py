"""JarvisMemSaver: LangGraph's ``BaseCheckpointSaver`` on plain Redis 7 (no modules).

Every key of a thread shares the hash tag ``{lg:<thread>}`` (layout: :mod:`jarvismem.keys`,
LangGraph block), so one Lua script reads or writes a thread atomically; the thread and
run indexes live in slots of their own, pipelined beside it. Checkpoints sort lexically
(uuid6 ids: text order is time order); channel values are stored incrementally, as
LangGraph's own savers do. A checkpoint is an upsert by (thread, ns, id) and a write by
(task id, idx), so a call resent after a lost reply changes nothing. Values are
``self.serde`` bytes: the client must not decode responses. Docs: docs/integrations.md.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from jarvismem.backends.redis import RedisBackend, wait_args
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.errors import ConfigError
from jarvismem.keys import KeySpace, lg_text
from jarvismem.redaction import (
    Redactor,
    default_redactor,
    is_secret_key,
    never_secret,
    no_redaction,
    redact_named,
    redact_object,
)
from jarvismem.runtime import MemoryRuntime

T = TypeVar("T")

SEP = "\x00"
"""Joins the parts of a member or field name; refused inside every part."""

_HIGH = b"\xff"
"""Above every byte of UTF-8 text: the open upper end of a lexical range."""

LIST_PAGE = 64
"""Checkpoints read per round trip while listing."""

# Lua helpers shared by the scripts. KEYS, in KeySpace.lg_thread_keys order:
# [1] cps, [2] rec, [3] blobs, [4] writes, [5] widx, [6] runs.
_LUA_COMMON = """
local SEP, HIGH = '\\0', '\\255'
-- unpack() has a stack limit (~8000): big argument lists go in chunks.
local function chunked(cmd, key, list)
  local out = {}
  for i = 1, #list, 1000 do
    local part = redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    if type(part) == 'table' then
      for _, v in ipairs(part) do out[#out + 1] = v end
    end
  end
  return out
end
local function head_of(rec)
  local nl = string.find(rec, '\\n', 1, true)
  return cjson.decode(string.sub(rec, 1, nl - 1))
end
local function ns_of(member)
  return string.sub(member, 1, string.find(member, SEP, 1, true) - 1)
end
local function blob_fields(member, head)
  local ns, fields, b = ns_of(member), {}, head['b']
  for i = 1, #b, 2 do fields[#fields + 1] = ns .. SEP .. b[i] .. SEP .. b[i + 1] end
  return fields
end
local function writes_of(member)
  return redis.call('ZRANGEBYLEX', KEYS[5], '[' .. member .. SEP, '(' .. member .. SEP .. HIGH)
end
"""

# ARGV: member, record, ttl ms ("0" = none), run id ("" = none), then blob field/value pairs.
_PUT = (
    _LUA_COMMON
    + """
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
if ARGV[4] ~= '' then redis.call('ZADD', KEYS[6], 0, ARGV[4] .. SEP .. ARGV[1]) end
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
if ARGV[3] ~= '0' then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[3]) end
end
return 1
"""
)

# ARGV: ttl ms, then (field, value, "1" = replace | "0" = first wins) triples.
_PUT_WRITES = (
    _LUA_COMMON
    + """
for i = 2, #ARGV, 3 do
  if ARGV[i + 2] == '1' then
    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[5], 0, ARGV[i])
  elseif redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', KEYS[5], 0, ARGV[i])
  end
end
if ARGV[1] ~= '0' then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[1]) end
end
return 1
"""
)

# ARGV: "latest", ns | "members", member, ... Returns, per checkpoint found,
# {member, record, {blob values}, {write names}, {write values}}.
_READ = (
    _LUA_COMMON
    + """
local out = {}
local function one(member)
  local rec = redis.call('HGET', KEYS[2], member)
  if not rec then return end
  local fields = blob_fields(member, head_of(rec))
  local blobs = chunked('HMGET', KEYS[3], fields)
  local names = writes_of(member)
  local values = chunked('HMGET', KEYS[4], names)
  out[#out + 1] = {member, rec, blobs, names, values}
end
if ARGV[1] == 'latest' then
  local top = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ARGV[2] .. SEP .. HIGH,
                         '[' .. ARGV[2] .. SEP, 'LIMIT', 0, 1)
  if top[1] then one(top[1]) end
else
  for i = 2, #ARGV do one(ARGV[i]) end
end
return out
"""
)

# ARGV: "prune" (keep the newest checkpoint of each namespace, then drop the blobs
# no kept checkpoint names) | "runs", run id, ... (drop those runs' checkpoints).
# Returns how many checkpoints were dropped.
_DROP = (
    _LUA_COMMON
    + """
local function drop(member)
  local rec = redis.call('HGET', KEYS[2], member)
  redis.call('ZREM', KEYS[1], member)
  if rec then
    redis.call('HDEL', KEYS[2], member)
    local run = head_of(rec)['r']
    if run ~= '' then redis.call('ZREM', KEYS[6], run .. SEP .. member) end
  end
  local names = writes_of(member)
  chunked('HDEL', KEYS[4], names)
  chunked('ZREM', KEYS[5], names)
end
local dropped = 0
if ARGV[1] == 'prune' then
  local members = redis.call('ZRANGE', KEYS[1], 0, -1)
  local keep = {}
  for i, m in ipairs(members) do
    local nxt = members[i + 1]
    if nxt and ns_of(nxt) == ns_of(m) then
      drop(m)
      dropped = dropped + 1
    else
      keep[#keep + 1] = m
    end
  end
  local wanted = {}
  for _, m in ipairs(keep) do
    local rec = redis.call('HGET', KEYS[2], m)
    if rec then
      for _, f in ipairs(blob_fields(m, head_of(rec))) do wanted[f] = true end
    end
  end
  local unused = {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
    if not wanted[f] then unused[#unused + 1] = f end
  end
  chunked('HDEL', KEYS[3], unused)
else
  for i = 2, #ARGV do
    local run = ARGV[i]
    local entries = redis.call('ZRANGEBYLEX', KEYS[6], '[' .. run .. SEP, '(' .. run .. SEP .. HIGH)
    for _, e in ipairs(entries) do
      drop(string.sub(e, #run + 2))
      dropped = dropped + 1
    end
  end
end
return dropped
"""
)

# A consistent snapshot of a whole thread (acopy_thread's source).
_DUMP = """
return {redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('HGETALL', KEYS[2]),
        redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4]),
        redis.call('ZRANGE', KEYS[6], 0, -1)}
"""

# ARGV: ttl ms, #blob pairs, #write pairs, #record pairs, #runs, then the items in
# that order. Existing entries of the target win (a copy merges, never overwrites);
# records are written last so no checkpoint is listed before its blobs exist.
_MERGE = """
local pos = 6
local function pairs_into(n, fn)
  for _ = 1, n do fn(ARGV[pos], ARGV[pos + 1]); pos = pos + 2 end
end
pairs_into(tonumber(ARGV[2]), function(f, v) redis.call('HSETNX', KEYS[3], f, v) end)
pairs_into(tonumber(ARGV[3]), function(f, v)
  redis.call('HSETNX', KEYS[4], f, v); redis.call('ZADD', KEYS[5], 0, f)
end)
pairs_into(tonumber(ARGV[4]), function(m, v)
  redis.call('HSETNX', KEYS[2], m, v); redis.call('ZADD', KEYS[1], 0, m)
end)
for _ = 1, tonumber(ARGV[5]) do redis.call('ZADD', KEYS[6], 0, ARGV[pos]); pos = pos + 1 end
if ARGV[1] ~= '0' then
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[1]) end
end
return 1
"""


def _text(value: object, kind: str, *, empty: bool = False) -> str:
    """``value`` if it is an id usable in a member name (:func:`~jarvismem.keys.lg_text`),
    else InvalidIdError. Every public method checks its ids with it before any write."""
    return lg_text(value, kind, empty=empty)


def _typed(kind: str, data: bytes) -> bytes:
    # serde type names ("msgpack", "json", "bytes", ...) never hold a newline.
    return kind.encode() + b"\n" + data


def _untyped(raw: bytes) -> tuple[str, bytes]:
    kind, _, data = raw.partition(b"\n")
    return kind.decode(), data


def _is_noscript(reply: object) -> bool:
    text = str(reply)
    return isinstance(reply, Exception) and ("NOSCRIPT" in text or "No matching script" in text)


def _binary_client(redis: RedisClient) -> RedisClient:
    """``redis`` if it returns bytes; checkpoints are binary and must not be decoded."""
    try:
        decodes = bool(redis.get_encoder().decode_responses)
    except AttributeError:  # a client without an encoder object: trust it
        decodes = False
    if decodes:
        raise ConfigError(
            "JarvisMemSaver needs a Redis client made with decode_responses=False "
            "(checkpoints are binary)"
        )
    return redis


class JarvisMemSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer on jarvismem's Redis (plain or Cluster, Redis 7, no modules).

    ``redis``: a ``redis.asyncio`` client (plain or cluster) that returns bytes.
    ``keyspace``: the tenant's key maker (``KeySpace(namespace)``).
    ``ttl_seconds``: retention of a thread after its last write (every key of the
    thread expires together; ``None`` keeps threads until deleted). ``serde``: as
    for every LangGraph saver. Use :meth:`from_runtime` to share a
    :class:`~jarvismem.runtime.MemoryRuntime`'s client.

    Secrets: channel values, pending writes and checkpoint metadata are redacted
    before they are serialised (:func:`~jarvismem.redaction.redact_named`: a
    channel or key with a secret name is hidden whole, strings inside containers,
    dataclasses and pydantic models such as LangChain messages are redacted, and
    values holding no secret are stored as they are). ``redactor`` and
    ``is_secret_key`` default to the built-in ones; pass
    :func:`~jarvismem.redaction.no_redaction` and
    :func:`~jarvismem.redaction.never_secret` to store state exactly.

    Async first: the sync methods are for other threads only (they run the async
    ones on the loop the saver was made in), as LangGraph's async savers do.
    Redis failures raise :class:`~jarvismem.errors.BackendUnavailableError` or
    :class:`~jarvismem.errors.BackendRejectedError`.
    """

    def __init__(
        self,
        redis: RedisClient | RedisBackend,
        keyspace: KeySpace | None = None,
        *,
        ttl_seconds: float | None = None,
        serde: SerializerProtocol | None = None,
        redactor: Redactor = default_redactor,
        is_secret_key: Callable[[str], bool] = is_secret_key,
    ) -> None:
        super().__init__(serde=serde)
        self._redactor = redactor
        self._is_secret_key = is_secret_key
        if ttl_seconds is not None and not ttl_seconds > 0:
            raise ConfigError("ttl_seconds must be positive or None")
        self._backend = RedisBackend.adopt(redis)
        self._redis = _binary_client(self._backend.client)
        self._keyspace = keyspace or KeySpace()
        self._ttl_ms = 0 if ttl_seconds is None else max(1, int(ttl_seconds * 1000))
        # Redis Cluster clients route each command by key and do not pipeline across
        # slots; plain clients get one round trip for a script and its index updates.
        self._cluster = self._backend.cluster
        self._put = self._redis.register_script(_PUT)
        self._put_writes = self._redis.register_script(_PUT_WRITES)
        self._read = self._redis.register_script(_READ)
        self._drop = self._redis.register_script(_DROP)
        self._dump = self._redis.register_script(_DUMP)
        self._merge = self._redis.register_script(_MERGE)
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    def from_runtime(
        cls,
        runtime: MemoryRuntime,
        *,
        ttl_seconds: float | bool | None = True,
        serde: SerializerProtocol | None = None,
        redact: bool | None = None,
    ) -> JarvisMemSaver:
        """A saver on ``runtime``'s Redis client and namespace.

        ``ttl_seconds=True`` (the default) keeps a thread as long as the runtime
        keeps a workflow's context (``REDIS_CONTEXT_TTL_DAYS``); a number or
        ``None`` overrides it. ``redact``: redact graph state with the runtime's
        redactor; ``None`` (the default) follows ``REDACT_CHECKPOINTS`` (graph
        state is checkpoint state), ``False`` stores it exactly as given. The
        runtime keeps owning (and closes) the client.
        """
        if runtime.backend is None:
            raise ConfigError("JarvisMemSaver needs Redis: this runtime has none (REDIS_URL)")
        ttl = runtime.settings.ttl_seconds if ttl_seconds is True else ttl_seconds
        if redact is None:
            redact = runtime.settings.redact_checkpoints
        return cls(
            runtime.backend,
            runtime.keyspace,
            ttl_seconds=ttl or None,
            serde=serde,
            redactor=runtime.redactor if redact else no_redaction,
            is_secret_key=runtime.is_secret_key if redact else never_secret,
        )

    # --- helpers --------------------------------------------------------------------------

    def _hide(self, channel: str, value: Any) -> Any:
        """``value`` of ``channel`` redacted before it is serialised (see the class doc)."""
        return redact_named(channel, value, self._redactor, self._is_secret_key)

    def _keys(self, thread_id: object) -> list[str]:
        return self._keyspace.lg_thread_keys(_text(thread_id, "thread_id"))

    async def _script_with(
        self,
        script: Any,
        keys: list[str],
        args: list[Any],
        side: list[tuple[str, tuple[Any, ...]]],
        what: str,
    ) -> Any:
        """Run ``script`` and the cross-slot index commands ``side`` in one round trip.

        The index commands are idempotent, so a resend after a lost reply is harmless.
        With replicated durability (``REDIS_DURABILITY``) a ``WAIT`` ends the round
        trip, and a write the replicas did not confirm raises
        :class:`~jarvismem.errors.BackendUnavailableError` (the saver has no outbox).
        """
        if self._cluster:
            # The script's WAIT goes to its slot's node; the side commands touch other
            # slots' indexes (thread listing), which a WAIT there could not cover.
            calls = [getattr(self._redis, name)(*a) for name, a in side]
            replies = await asyncio.gather(
                self._backend.run_script(script, keys, args, what=what), *calls
            )
            return replies[0]
        durability = self._backend.durability
        for attempt in range(2):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                for name, a in side:
                    getattr(pipe, name)(*a)
                if durability is not None:
                    pipe.execute_command(*wait_args(durability))
                replies = await pipe.execute(raise_on_error=False)
            if _is_noscript(replies[0]) and attempt == 0:
                # The server lost its scripts (restart, SCRIPT FLUSH): load, send again.
                await self._redis.script_load(script.script)
                continue
            break
        return self._settled(replies, durability is not None, what)

    def _settled(self, replies: list[Any], waited: bool, what: str) -> Any:
        """The first reply of a round trip, or its first error, or the WAIT's shortfall."""
        done = replies[:-1] if waited else replies
        for reply in done:
            if isinstance(reply, Exception):
                raise reply
        short = self._backend.wait_shortfall(replies[-1], what) if waited else None
        if short is not None:
            raise short
        return done[0] if done else None

    async def _commands(self, ops: list[tuple[str, tuple[Any, ...]]], what: str) -> None:
        """Plain write commands in one round trip, then ``WAIT`` as :meth:`_script_with`."""
        if self._cluster:
            # Keys of several slots: no one connection's WAIT could cover them all.
            for name, a in ops:
                await getattr(self._redis, name)(*a)
            return
        durability = self._backend.durability
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, a in ops:
                getattr(pipe, name)(*a)
            if durability is not None:
                pipe.execute_command(*wait_args(durability))
            replies = await pipe.execute(raise_on_error=False)
        self._settled(replies, durability is not None, what)

    def _thread_index_ops(self, thread_id: str) -> list[tuple[str, tuple[Any, ...]]]:
        now = int(time.time() * 1000)
        ops: list[tuple[str, tuple[Any, ...]]] = [
            ("zadd", (self._keyspace.lg_threads(), {thread_id: now}))
        ]
        if self._ttl_ms:
            # Threads whose keys expired leave the index too.
            ops.append(("zremrangebyscore", (self._keyspace.lg_threads(), 0, now - self._ttl_ms)))
        return ops

    def _run_index_ops(self, run_id: str, thread_id: str) -> list[tuple[str, tuple[Any, ...]]]:
        key = self._keyspace.lg_run_threads(run_id)
        ops: list[tuple[str, tuple[Any, ...]]] = [("sadd", (key, thread_id))]
        if self._ttl_ms:
            ops.append(("pexpire", (key, self._ttl_ms)))
        return ops

    def _tuple(self, thread_id: str, entry: list[Any]) -> CheckpointTuple:
        member, rec, blobs, names, values = entry
        ns, _, checkpoint_id = member.decode().partition(SEP)
        head_raw, _, body = rec.partition(b"\n")
        head = json.loads(head_raw)
        size = head["cl"]
        checkpoint: Any = self.serde.loads_typed((head["ct"], body[:size]))
        metadata = self.serde.loads_typed((head["mt"], body[size:]))
        pairs = head["b"]
        channel_values: dict[str, Any] = {}
        for i, raw in enumerate(blobs):
            if raw is None:
                continue
            kind, data = _untyped(raw)
            if kind != "empty":
                channel_values[pairs[2 * i]] = self.serde.loads_typed((kind, data))
        found: list[tuple[tuple[str, str, int], PendingWrite]] = []
        for name, raw in zip(names, values, strict=True):
            if raw is None:
                continue
            _, _, task_id, idx = name.decode().split(SEP)
            head_w, _, data = raw.partition(b"\n")
            meta = json.loads(head_w)
            value = self.serde.loads_typed((meta["t"], data))
            found.append(
                (writes_sort_key(meta["p"], task_id, int(idx)), (task_id, meta["c"], value))
            )
        found.sort(key=lambda item: item[0])
        checkpoint["channel_values"] = channel_values
        config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        parent: RunnableConfig | None = None
        if head["p"]:
            parent = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": head["p"],
                }
            }
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent,
            pending_writes=[write for _, write in found],
        )

    # --- the async contract ---------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (an upsert) and the values of the channels in ``new_versions``."""
        conf = config["configurable"]
        thread_id = _text(conf.get("thread_id"), "thread_id")
        ns = _text(conf.get("checkpoint_ns", ""), "checkpoint_ns", empty=True)
        checkpoint_id = _text(checkpoint["id"], "checkpoint_id")
        parent = conf.get("checkpoint_id") or ""
        member = ns + SEP + checkpoint_id
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        blob_args: list[Any] = []
        for channel, version in new_versions.items():
            field = SEP.join((ns, _text(channel, "channel"), str(version)))
            value = (
                _typed(*self.serde.dumps_typed(self._hide(channel, values[channel])))
                if channel in values
                else None
            )
            blob_args += [field, value if value is not None else b"empty\n"]
        meta = redact_object(
            get_serializable_checkpoint_metadata(config, metadata),
            self._redactor,
            self._is_secret_key,
        )
        run = meta.get("run_id")
        run_id = _text(str(run), "run_id") if run not in (None, "") else ""
        ckpt_kind, ckpt_data = self.serde.dumps_typed(stored)
        meta_kind, meta_data = self.serde.dumps_typed(meta)
        pairs: list[str] = []
        for channel, version in checkpoint["channel_versions"].items():
            pairs += [_text(channel, "channel"), str(version)]
        head = {
            "p": _text(parent, "parent checkpoint_id", empty=True),
            "ct": ckpt_kind,
            "cl": len(ckpt_data),
            "mt": meta_kind,
            "r": run_id,
            "b": pairs,
        }
        record = (
            json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode()
            + b"\n"
            + ckpt_data
            + meta_data
        )
        side = self._thread_index_ops(thread_id)
        if run_id:
            side += self._run_index_ops(run_id, thread_id)
        keys = self._keys(thread_id)
        async with self._backend.guard("langgraph checkpoint put"):
            await self._script_with(
                self._put,
                keys,
                [member, record, self._ttl_ms, run_id, *blob_args],
                side,
                "langgraph checkpoint put",
            )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for a checkpoint, once per (task id, index)."""
        conf = config["configurable"]
        thread_id = _text(conf.get("thread_id"), "thread_id")
        ns = _text(conf.get("checkpoint_ns", ""), "checkpoint_ns", empty=True)
        checkpoint_id = _text(conf.get("checkpoint_id"), "checkpoint_id")
        prefix = SEP.join((ns, checkpoint_id, _text(task_id, "task_id")))
        task_path = _text(task_path, "task_path", empty=True)
        channels = [_text(channel, "channel") for channel, _ in writes]
        keys = self._keys(thread_id)
        args: list[Any] = [self._ttl_ms]
        for i, (channel, (_, value)) in enumerate(zip(channels, writes, strict=True)):
            idx = WRITES_IDX_MAP.get(channel, i)
            kind, data = self.serde.dumps_typed(self._hide(channel, value))
            meta = json.dumps({"c": channel, "t": kind, "p": task_path}, ensure_ascii=False)
            args += [f"{prefix}{SEP}{idx}", meta.encode() + b"\n" + data, "1" if idx < 0 else "0"]
        if len(args) == 1:
            return
        async with self._backend.guard("langgraph put_writes"):
            await self._backend.run_script(
                self._put_writes, keys, args, what="langgraph put_writes"
            )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or its namespace's newest; None if absent."""
        conf = config["configurable"]
        thread_id = _text(conf.get("thread_id"), "thread_id")
        ns = _text(conf.get("checkpoint_ns", ""), "checkpoint_ns", empty=True)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            args = ["members", ns + SEP + _text(checkpoint_id, "checkpoint_id")]
        else:
            args = ["latest", ns]
        async with self._backend.guard("langgraph get_tuple"):
            found = await self._read(keys=self._keys(thread_id), args=args)
        return self._tuple(thread_id, found[0]) if found else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first (by id), per thread; ``filter`` matches metadata values.

        ``config=None`` lists every thread of the namespace (from the thread index).
        """
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        if before_id is not None:
            before_id = _text(before_id, "before checkpoint_id")
        if config is None:
            async with self._backend.guard("langgraph list threads"):
                raw: list[Any] = await self._redis.zrange(self._keyspace.lg_threads(), 0, -1)
            threads = [t.decode() for t in raw]
            ns: str | None = None
            checkpoint_id = None
        else:
            conf = config["configurable"]
            threads = [_text(conf.get("thread_id"), "thread_id")]
            ns = conf.get("checkpoint_ns")
            if ns is not None:
                ns = _text(ns, "checkpoint_ns", empty=True)
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id:
                checkpoint_id = _text(checkpoint_id, "checkpoint_id")
        left = limit
        for thread_id in threads:
            async for tup in self._list_thread(thread_id, ns, checkpoint_id, before_id, filter):
                yield tup
                if left is not None:
                    left -= 1
                    if left == 0:
                        return

    async def _members(
        self, thread_id: str, ns: str | None, checkpoint_id: str | None, before_id: str | None
    ) -> AsyncIterator[list[bytes]]:
        """Pages of members to read, newest first."""
        cps = self._keyspace.lg_checkpoints(thread_id)
        if ns is not None and not checkpoint_id:
            low = b"[" + _text(ns, "checkpoint_ns", empty=True).encode() + b"\x00"
            high = low[1:] + (before_id.encode() if before_id else _HIGH)
            offset = 0
            while True:
                async with self._backend.guard("langgraph list"):
                    page: list[Any] = await self._redis.zrevrangebylex(
                        cps, b"(" + high, low, start=offset, num=LIST_PAGE
                    )
                if page:
                    yield page
                if len(page) < LIST_PAGE:
                    return
                offset += len(page)
        async with self._backend.guard("langgraph list"):
            every: list[Any] = await self._redis.zrange(cps, 0, -1)
        split = [m.partition(b"\x00") for m in every]
        chosen = [
            (cid, m)
            for m, (n, _, cid) in zip(every, split, strict=True)
            if (ns is None or n == ns.encode())
            and (not checkpoint_id or cid == checkpoint_id.encode())
            and (before_id is None or cid < before_id.encode())
        ]
        # Across namespaces: newest id first, as a database ordered by id would.
        ordered = [m for _, m in sorted(chosen, key=lambda c: c[0], reverse=True)]
        for start in range(0, len(ordered), LIST_PAGE):
            yield ordered[start : start + LIST_PAGE]

    async def _list_thread(
        self,
        thread_id: str,
        ns: str | None,
        checkpoint_id: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
    ) -> AsyncIterator[CheckpointTuple]:
        keys = self._keys(thread_id)
        async for page in self._members(thread_id, ns, checkpoint_id, before_id):
            async with self._backend.guard("langgraph list"):
                found = await self._read(keys=keys, args=["members", *page])
            for entry in found:
                tup = self._tuple(thread_id, entry)
                if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):  # type: ignore[misc]
                    continue
                yield tup

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread (all namespaces)."""
        keys = self._keys(thread_id)
        async with self._backend.guard("langgraph delete_thread"):
            await self._commands(
                [("delete", tuple(keys)), ("zrem", (self._keyspace.lg_threads(), thread_id))],
                "langgraph delete_thread",
            )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed.

        Channel values they alone used stay until the thread is pruned, deleted or expires.
        """
        by_thread: dict[str, list[str]] = {}
        runs = [_text(str(r), "run_id") for r in run_ids]
        async with self._backend.guard("langgraph delete_for_runs"):
            for run_id in runs:
                members: set[Any] = await self._redis.smembers(
                    self._keyspace.lg_run_threads(run_id)
                )
                for raw in members:
                    by_thread.setdefault(raw.decode(), []).append(run_id)
            for thread_id, its_runs in by_thread.items():
                await self._backend.run_script(
                    self._drop,
                    self._keys(thread_id),
                    ["runs", *its_runs],
                    what="langgraph delete_for_runs",
                )
            for run_id in runs:
                await self._redis.delete(self._keyspace.lg_run_threads(run_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread into another (a merge).

        The source is read in one consistent snapshot and the target written by one
        script; a large thread travels in one reply and one request.
        """
        source = self._keys(source_thread_id)
        target = self._keys(target_thread_id)
        async with self._backend.guard("langgraph copy_thread"):
            members, records, blobs, writes, runs = await self._dump(keys=source)
            if not members:
                return
            args = [self._ttl_ms, len(blobs) // 2, len(writes) // 2, len(records) // 2, len(runs)]
            args += [*blobs, *writes, *records, *runs]
            side = self._thread_index_ops(target_thread_id)
            for run_id in {r.partition(b"\x00")[0].decode() for r in runs}:
                side += self._run_index_ops(run_id, target_thread_id)
            await self._script_with(self._merge, target, args, side, "langgraph copy_thread")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (and its writes and
        values); ``delete``: delete the threads.

        Like every ``keep_latest``, it drops the ancestors a ``DeltaChannel`` would
        rebuild its value from: skip threads whose graph uses one.
        """
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            async with self._backend.guard("langgraph prune"):
                await self._backend.run_script(
                    self._drop, self._keys(thread_id), ["prune"], what="langgraph prune"
                )

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """``<counter>.<random>``: increasing, and unique across forks of a thread."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # --- the sync contract: other threads only --------------------------------------------

    def _on_loop(self, make: Any) -> Any:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            raise asyncio.InvalidStateError(
                "JarvisMemSaver is async: use aget_tuple/alist/aput/... (graph.ainvoke). Its "
                "sync methods only serve other threads while the loop it was made in runs."
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple` (from another thread only)."""
        result: CheckpointTuple | None = self._on_loop(lambda: self.aget_tuple(config))
        return result

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist` (from another thread only)."""

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        found: list[CheckpointTuple] = self._on_loop(collect)
        yield from found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput` (from another thread only)."""
        result: RunnableConfig = self._on_loop(
            lambda: self.aput(config, checkpoint, metadata, new_versions)
        )
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync :meth:`aput_writes` (from another thread only)."""
        self._on_loop(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread` (from another thread only)."""
        self._on_loop(lambda: self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync :meth:`adelete_for_runs` (from another thread only)."""
        self._on_loop(lambda: self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread` (from another thread only)."""
        self._on_loop(lambda: self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync :meth:`aprune` (from another thread only)."""
        self._on_loop(lambda: self.aprune(thread_ids, strategy=strategy))
