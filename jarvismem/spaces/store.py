"""Cognitive spaces persisted in Redis, with compare-and-set per space.

One hash per (workflow, agent) holds every space and the container's revision, and
a sorted set beside it (same hash slot) the ids of recently applied writes. One Lua
script applies each write, so that:

* a space is stored only at the revision the write was computed from;
* a revision is never reused (a deleted space leaves a tombstone);
* a write is applied at most once, and never after its deadline.

The stored format and the guarantees in full: docs/architecture.md and
docs/reliability.md ("Cognitive spaces").
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from jarvismem.backends.redis import RedisBackend
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    InvalidPayloadError,
    ReservedSpaceError,
    SpaceConflictError,
    SpaceNotFoundError,
    SpaceTypeError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.payload import PayloadPolicy
from jarvismem.redaction import redact_value
from jarvismem.resilience import Backoff
from jarvismem.spaces.models import (
    RESERVED_SPACES,
    TASKS,
    WORLD,
    MemoryContainer,
    Space,
    SpaceData,
    check_item_id,
    check_json,
    check_space_data,
    kind_of,
    new_container_id,
    new_task_id,
    now_ms,
    validate_space_name,
)

CONTAINER_FIELD = "__container__"

DEFAULT_TIMEOUT = 5.0
"""Seconds a spaces operation may take before :class:`BackendUnavailableError`."""

CONFLICT_BACKOFF = Backoff(base=0.002, cap=0.2, jitter="full")
"""Wait before re-reading after a lost compare-and-set: full jitter on an
exponential window spreads racing writers apart."""

T = TypeVar("T")

# One field and Redis' clock, read in one step on the node that owns the key
# (a plain TIME could go to another cluster node, with another clock).
_READ_SCRIPT = """
local t = redis.call('TIME')
return {redis.call('HGET', KEYS[1], ARGV[1]), t[1], t[2]}
"""

# KEYS[1] = spaces hash; KEYS[2] = applied-ops sorted set
# ARGV[1] = "set" | "del"; ARGV[2] = space field; ARGV[3] = expected space rev (set)
# ARGV[4] = op id; ARGV[5] = deadline (Redis clock, ms); ARGV[6] = new space JSON (set)
# ARGV[7] = container JSON tail used when the container does not exist yet
# (everything after its "updated_at" member); ARGV[8] = now (ms, for updated_at)
# ARGV[9] = TTL in ms ("0" = none)
# Returns {1, new container rev} on success, {2, 0} when this op id was already
# applied, {0, stored rev} on a stale rev, {0, -1} when "del" finds no such
# space, {0, -2} when the deadline has passed (nothing written).
# Every check comes before the first write, so a refusal writes nothing. A
# revision at MAX_REVISION (2^53-1, written out below; a test pins it) is refused
# with an error reply: Lua numbers are doubles, so bumping it would store an
# inexact (once, a negative) revision.
_CAS_SCRIPT = """
local key, ops, op, field = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('ZSCORE', ops, ARGV[4]) then
  -- Already applied (a resent attempt). Still a write (a TTL refresh), so that a
  -- replicated write's WAIT covers the earlier attempt, not an older offset.
  local left = redis.call('PTTL', ops)
  if left > 0 then redis.call('PEXPIRE', ops, left) end
  return {2, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[5])
if now > deadline then return {0, -2} end
local current = redis.call('HGET', key, field)
local stored = 0
if current then
  stored = tonumber(string.match(current, '^{"rev":(%d+),'))
  if not stored then return redis.error_reply('corrupt space field ' .. field) end
end
local crev, tail = 0, ARGV[7]
local container = redis.call('HGET', key, '__container__')
if container then
  local r, rest = string.match(container, '^{"rev":(%d+),"updated_at":%d+,(.*)$')
  if not r then return redis.error_reply('corrupt container field') end
  crev, tail = tonumber(r), rest
end
if stored >= 9007199254740991 or crev >= 9007199254740991 then
  return redis.error_reply('space revision limit: ' .. field .. ' or the container is at 2^53-1')
end
local value
if op == 'del' then
  if not current or string.find(current, '^{"rev":%d+,"deleted":true}$') then
    return {0, -1}
  end
  value = '{"rev":' .. string.format('%d', stored + 1) .. ',"deleted":true}'
else
  if stored ~= tonumber(ARGV[3]) then return {0, stored} end
  value = ARGV[6]
end
crev = crev + 1
redis.call('HSET', key, field, value, '__container__',
  '{"rev":' .. string.format('%d', crev) .. ',"updated_at":' .. ARGV[8] .. ',' .. tail)
if ARGV[9] ~= '0' then redis.call('PEXPIRE', key, ARGV[9]) end
-- An op past its deadline is refused above, so its record is no longer needed.
redis.call('ZREMRANGEBYSCORE', ops, '-inf', now)
redis.call('ZADD', ops, deadline, ARGV[4])
local keep = deadline - now + 1000
if redis.call('PTTL', ops) < keep then redis.call('PEXPIRE', ops, keep) end
return {1, crev}
"""

# KEYS[1] = spaces hash; ARGV[1] = deadline (Redis clock, ms); ARGV[2] = TTL ms
# ARGV[3..] = field, value pairs. Returns 1, or 0 past the deadline (nothing written).
_RESTORE_SCRIPT = """
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def encode_space(space: Space) -> str:
    """Field value of a space: JSON with ``rev`` first (the script relies on it)."""
    body = json.dumps(
        {
            "data": space.data,
            "metadata": space.metadata,
            "created_at": space.created_at,
            "updated_at": space.updated_at,
        },
        separators=(",", ":"),
        allow_nan=False,
    )
    return f'{{"rev":{int(space.rev)},{body[1:]}'


def _container_tail(container_id: str, created_at: int, metadata: Mapping[str, Any]) -> str:
    body = json.dumps(
        {"id": container_id, "created_at": created_at, "metadata": dict(metadata)},
        separators=(",", ":"),
        allow_nan=False,
    )
    return body[1:]


def encode_container(container: MemoryContainer) -> str:
    """Value of ``__container__``: ``rev`` and ``updated_at`` first (the script relies on it)."""
    tail = _container_tail(container.id, container.created_at, container.metadata)
    return f'{{"rev":{int(container.rev)},"updated_at":{int(container.updated_at)},{tail}'


def _decode_field(what: str, name: str, value: str) -> Space | int:
    """A stored field: its :class:`Space`, or the revision of a tombstone.

    A field that is neither is reported as :class:`BackendRejectedError`
    (someone wrote it behind the store's back; reading again will not help).
    """
    try:
        raw = json.loads(value)
        if isinstance(raw, dict) and raw.get("deleted") is True:
            rev = raw.get("rev")
            if isinstance(rev, int) and not isinstance(rev, bool) and rev >= 0:
                return rev
            raise InvalidPayloadError("tombstone without a revision")
        return Space.from_dict(raw, name)
    except (ValueError, InvalidPayloadError) as exc:
        raise BackendRejectedError(f"{what}: corrupt space field {name!r} ({exc})") from None


class _Seen:
    """One read made before a write: the visible space, the stored rev, Redis' clock."""

    __slots__ = ("redis_ms", "rev", "space")

    def __init__(self, space: Space | None, rev: int, redis_ms: int) -> None:
        self.space = space
        self.rev = rev  # of the space or of its tombstone; 0 when never stored
        self.redis_ms = redis_ms


class _Outcome(Generic[T]):
    """What one attempt of a mutation decided: the space to write (or none) and the result."""

    __slots__ = ("result", "space")

    def __init__(self, result: T, space: Space | None) -> None:
        self.result = result
        self.space = space


class SpacesStore:
    """The cognitive spaces of one (workflow, agent), stored in one Redis hash.

    ``redis``: a :class:`~jarvismem.backends.redis.RedisBackend`, or a ``redis.asyncio``
    client (plain or cluster; fakeredis works).
    ``keyspace``: the tenant's key maker. ``ttl_seconds``: expiry refreshed on
    every write (``None`` = keep forever). ``max_retries``: how many times a
    mutation that lost a race is re-applied before :class:`SpaceConflictError`.
    ``timeout``: seconds each method may take (retries included) before it
    raises :class:`BackendUnavailableError`.

    ``policy``: the runtime's payload policy, whose redactor and secret-key
    matcher apply to every value and key a write stores, data and metadata
    alike - spaces go into the bundle and the prompt, so a belief such as
    ``{"api_key": ...}`` is stored as ``[REDACTED]``. (Its field bounds do not
    apply: a space is bounded by its own rules.) ``None`` stores values as given.

    ``retries`` counts the re-applications this store has made (observability
    and tests).
    """

    def __init__(
        self,
        redis: Any,
        keyspace: KeySpace,
        workflow_id: str,
        agent_id: str,
        *,
        ttl_seconds: int | None,
        max_retries: int = 16,
        timeout: float = DEFAULT_TIMEOUT,
        policy: PayloadPolicy | None = None,
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise InvalidPayloadError("ttl_seconds must be positive or None")
        if max_retries < 0:
            raise InvalidPayloadError("max_retries must be >= 0")
        if not timeout > 0:
            raise InvalidPayloadError("timeout must be a positive number of seconds")
        self._redis = RedisBackend.adopt(redis)
        self._key = keyspace.spaces(workflow_id, agent_id)
        self._ops_key = keyspace.spaces_ops(workflow_id, agent_id)
        self._ttl_ms = "0" if ttl_seconds is None else str(int(ttl_seconds) * 1000)
        self._max_retries = max_retries
        self._timeout = float(timeout)
        # Used only if this store is the first to write the container.
        self._container_id = new_container_id()
        self._read_script = self._redis.script(_READ_SCRIPT)
        self._script = self._redis.script(_CAS_SCRIPT)
        self._restore_script = self._redis.script(_RESTORE_SCRIPT)
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.agent_id = validate_id(agent_id, "agent_id")
        self.retries = 0
        self._policy = policy

    def _redacted(self, space: Space) -> None:
        """Redact ``space``'s data and metadata in place, before it is encoded and stored."""
        policy = self._policy
        if policy is not None:
            space.data = redact_value(space.data, policy.redact, policy.is_secret_key)
            space.metadata = redact_value(space.metadata, policy.redact, policy.is_secret_key)

    @property
    def key(self) -> str:
        """The Redis hash holding this agent's spaces."""
        return self._key

    @property
    def redis(self) -> RedisBackend:
        """The Redis backend this store reads and writes through."""
        return self._redis

    @asynccontextmanager
    async def _guard(self, op: str) -> AsyncIterator[float]:
        """Run one public operation under the timeout, Redis errors translated.

        Yields the loop-clock deadline, from which writes derive the deadline
        they carry to Redis.
        """
        deadline = asyncio.get_running_loop().time() + self._timeout
        async with self._redis.guard(f"spaces {op}", self._timeout):
            yield deadline

    # --- reading -------------------------------------------------------------------------

    async def exists(self) -> bool:
        """Whether the container was ever written (a fresh one reads with a new random id)."""
        return bool(await self._redis.call("exists", self._key, what="spaces exists"))

    async def load(self) -> MemoryContainer:
        """The whole container as stored now (one HGETALL; writes nothing).

        Before the first mutation this is a fresh container whose reserved
        spaces are empty at rev 0.
        """
        async with self._guard("load"):
            return await self._load("spaces load")

    async def load_unbounded(self) -> MemoryContainer:
        """:meth:`load` under the caller's deadline instead of the store's own (the
        rehydrate bundle bounds each tier with its tier timeout)."""
        return await self._load("spaces load")

    async def _load(self, what: str) -> MemoryContainer:
        return self.decode_container(await self._redis.call("hgetall", self._key, what=what), what)

    def decode_container(
        self, raw: Mapping[Any, Any], what: str = "spaces load"
    ) -> MemoryContainer:
        """The container in an ``HGETALL`` reply of :attr:`key` (rev 0: never written).

        Raises :class:`~jarvismem.errors.BackendRejectedError` for a corrupt field.
        """
        fields = {_text(k): _text(v) for k, v in raw.items()}
        head = fields.pop(CONTAINER_FIELD, None)
        spaces = {}
        for name, value in fields.items():
            decoded = _decode_field(what, name, value)
            if isinstance(decoded, Space):  # tombstones stay hidden
                spaces[name] = decoded
        if head is None:  # nothing written yet, or spaces written by a restore without head
            return MemoryContainer(id=self._container_id, spaces=spaces)
        try:
            meta = json.loads(head)
            return MemoryContainer(
                id=meta["id"],
                rev=int(meta["rev"]),
                spaces=spaces,
                created_at=int(meta["created_at"]),
                updated_at=int(meta["updated_at"]),
                metadata=meta.get("metadata") or {},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendRejectedError(f"{what}: corrupt container field ({exc})") from None

    @staticmethod
    def _default(name: str) -> Space | None:
        """What a never-written space reads as: reserved ones exist empty at rev 0."""
        kind = RESERVED_SPACES.get(name)
        if kind is None:
            return None
        return Space({} if kind == "map" else [])

    async def _get(self, what: str, name: str) -> Space | None:
        """A fresh copy of one visible space (one HGET); ``None`` if absent or deleted."""
        raw = await self._redis.call("hget", self._key, name, what=what)
        if raw is None:
            return self._default(name)
        decoded = _decode_field(what, name, _text(raw))
        return decoded if isinstance(decoded, Space) else None

    async def _read_raw(self, field: str, what: str) -> tuple[Any, int]:
        """One field of the hash (raw) and Redis' clock in ms, in one round trip."""
        raw, secs, micros = await self._redis.run_script(
            self._read_script, [self._key], [field], what=what, wait=False
        )
        return raw, int(secs) * 1000 + int(micros) // 1000

    async def _read(self, name: str, what: str) -> _Seen:
        """The read a write starts from: the space, its stored rev and Redis' clock."""
        raw, redis_ms = await self._read_raw(name, f"spaces {what}")
        if raw is None:
            return _Seen(self._default(name), 0, redis_ms)
        decoded = _decode_field(f"spaces {what}", name, _text(raw))
        if isinstance(decoded, Space):
            return _Seen(decoded, decoded.rev, redis_ms)
        return _Seen(None, decoded, redis_ms)

    async def _existing_space(self, what: str, name: str) -> Space:
        space = await self._get(f"spaces {what}", validate_space_name(name))
        if space is None:
            raise SpaceNotFoundError(f"no space named {name!r}")
        return space

    async def get_space(self, name: str) -> Space:
        """A copy of one space (one HGET). :class:`SpaceNotFoundError` if absent."""
        async with self._guard("get_space"):
            return await self._existing_space("get_space", name)

    async def has_space(self, name: str) -> bool:
        """Whether the space exists (reserved ones always do)."""
        async with self._guard("has_space"):
            return await self._get("spaces has_space", validate_space_name(name)) is not None

    async def snapshot(self) -> dict[str, Any]:
        """JSON-able dict of the whole container (rehydrate bundle, export)."""
        async with self._guard("snapshot"):
            return (await self._load("spaces snapshot")).to_dict()

    # --- the one write path ----------------------------------------------------------

    @staticmethod
    def _redis_deadline(redis_ms: int, deadline: float) -> int:
        """The caller's deadline on Redis' clock, never later than the caller's own.

        ``redis_ms`` was read before its reply arrived, so adding the time the
        caller has left from now on lands at or before its deadline.
        """
        left = deadline - asyncio.get_running_loop().time()
        return redis_ms + max(0, int(left * 1000))

    def _expired(self, what: str) -> BackendUnavailableError:
        return BackendUnavailableError(
            f"spaces {what}: Redis ran the write after its deadline; nothing was written"
        )

    async def _transact(
        self, what: str, name: str, step: Callable[[Space | None], _Outcome[T]], *, strict: bool
    ) -> T:
        """Read the space, let ``step`` decide, compare-and-set; retry on a lost race."""
        validate_space_name(name)
        # One id for every attempt: a re-sent attempt that had landed is not applied twice.
        op_id = uuid.uuid4().hex
        attempt = 0
        async with self._guard(what) as deadline:
            while True:
                seen = await self._read(name, what)
                current, expected = seen.space, seen.rev
                outcome = step(current)
                new = outcome.space
                if new is None:
                    return outcome.result
                # The whole space, not just the new value: mutate()/update_space()
                # may change anything, and redaction is idempotent.
                self._redacted(new)
                new.data = check_space_data(name, new.data)
                check_json(new.metadata, "space metadata")
                now = now_ms()
                new.rev = expected + 1
                new.updated_at = now
                if current is None or not new.created_at:
                    new.created_at = now
                tail = _container_tail(self._container_id, now, {})
                # With replicated durability, acknowledged only once WAIT confirmed it.
                ok, stored = await self._redis.run_script(
                    self._script,
                    [self._key, self._ops_key],
                    [
                        "set",
                        name,
                        expected,
                        op_id,
                        self._redis_deadline(seen.redis_ms, deadline),
                        encode_space(new),
                        tail,
                        now,
                        self._ttl_ms,
                    ],
                    what=f"spaces {what}",
                )
                if int(ok) in (1, 2):
                    return outcome.result
                if int(stored) == -2:
                    raise self._expired(what)
                if strict:
                    raise SpaceConflictError(
                        f"space {name!r} changed since it was read (expected rev {expected})"
                    )
                if attempt >= self._max_retries:
                    raise SpaceConflictError(
                        f"space {name!r}: gave up after {self._max_retries} retries "
                        "under contention"
                    )
                attempt += 1
                self.retries += 1
                await asyncio.sleep(CONFLICT_BACKOFF.delay(attempt))

    async def _mutate(
        self, what: str, space_name: str, fn: Callable[[Space], T], *, strict: bool = False
    ) -> T:
        def step(current: Space | None) -> _Outcome[T]:
            if current is None:
                raise SpaceNotFoundError(f"no space named {space_name!r}")
            return _Outcome(fn(current), current)

        return await self._transact(what, space_name, step, strict=strict)

    async def mutate(self, space_name: str, fn: Callable[[Space], T], *, strict: bool = False) -> T:
        """Apply ``fn`` to a fresh copy of a space and store the result; returns ``fn``'s result.

        ``fn`` must be pure (it may run several times when writers race): change
        the given :class:`Space` in place and return anything. With
        ``strict=True`` a lost race raises :class:`SpaceConflictError` instead of
        retrying. A missing custom space raises :class:`SpaceNotFoundError`.
        """
        return await self._mutate("mutate", space_name, fn, strict=strict)

    # --- whole spaces ----------------------------------------------------------------------

    async def ensure_space(self, name: str, initial: SpaceData | None = None) -> Space:
        """The space, created from ``initial`` (default ``{}``) when missing."""
        if initial is not None:
            check_space_data(validate_space_name(name), initial)

        def step(current: Space | None) -> _Outcome[Space]:
            if current is not None:
                if initial is not None and kind_of(initial) != current.kind:
                    raise SpaceTypeError(f"space {name!r} exists as a {current.kind} space")
                return _Outcome(current, None)
            space = Space(json.loads(json.dumps({} if initial is None else initial)))
            return _Outcome(space, space)

        return await self._transact("ensure_space", name, step, strict=False)

    async def put_space(
        self, name: str, data: SpaceData, metadata: Mapping[str, Any] | None = None
    ) -> Space:
        """Create or replace a space's data (and metadata when given); returns it."""
        check_space_data(validate_space_name(name), data)
        if metadata is not None:
            check_json(dict(metadata), "metadata")

        def step(current: Space | None) -> _Outcome[Space]:
            space = current if current is not None else Space([])
            space.data = json.loads(json.dumps(data))
            if metadata is not None:
                space.metadata = json.loads(json.dumps(dict(metadata)))
            return _Outcome(space, space)

        return await self._transact("put_space", name, step, strict=False)

    async def update_space(
        self, name: str, fn: Callable[[SpaceData], SpaceData | None], *, strict: bool = False
    ) -> Space:
        """Replace a space's data with ``fn(copy_of_data)`` (``None`` = changed in place)."""

        def apply(space: Space) -> Space:
            result = fn(space.data)
            if result is not None:
                space.data = result
            return space

        return await self._mutate("update_space", name, apply, strict=strict)

    async def delete_space(self, name: str) -> None:
        """Delete a custom space (container rev +1); reserved: :class:`ReservedSpaceError`.

        The space leaves a tombstone, so a later space of the same name goes on
        from its revisions instead of reusing them.
        """
        if validate_space_name(name) in RESERVED_SPACES:
            raise ReservedSpaceError(f"space {name!r} is reserved and cannot be deleted")
        op_id = uuid.uuid4().hex
        async with self._guard("delete_space") as deadline:
            seen = await self._read(name, "delete_space")
            now = now_ms()
            ok, found = await self._redis.run_script(
                self._script,
                [self._key, self._ops_key],
                [
                    "del",
                    name,
                    -1,
                    op_id,
                    self._redis_deadline(seen.redis_ms, deadline),
                    "",
                    _container_tail(self._container_id, now, {}),
                    now,
                    self._ttl_ms,
                ],
                what="spaces delete_space",
            )
            if int(ok) in (1, 2):
                return
            if int(found) == -2:
                raise self._expired("delete_space")
            raise SpaceNotFoundError(f"no space named {name!r}")

    async def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace everything with a :meth:`snapshot` (import). Validated before writing.

        Tombstones go too: revisions restart from the snapshot's. Not meant to race
        live writers.
        """
        container = MemoryContainer.from_dict(snapshot)
        args: list[Any] = [CONTAINER_FIELD, encode_container(container)]
        for name, space in container.spaces.items():
            # An export file may come from anyone: its values are redacted as a write's are.
            self._redacted(space)
            args += [name, encode_space(space)]
        async with self._guard("restore") as deadline:
            _head, redis_ms = await self._read_raw(CONTAINER_FIELD, "spaces restore")
            done = await self._redis.run_script(
                self._restore_script,
                [self._key],
                [self._redis_deadline(redis_ms, deadline), self._ttl_ms, *args],
                what="spaces restore",
            )
            if int(done) != 1:
                raise self._expired("restore")

    # --- map spaces --------------------------------------------------------------------

    async def get_key(self, space: str, key: str, default: Any = None) -> Any:
        """A value of a map space (``default`` when absent)."""
        async with self._guard("get_key"):
            return (await self._existing_space("get_key", space)).get_key(key, default)

    async def put_key(self, space: str, key: str, value: Any) -> None:
        """Set ``key`` in a map space."""
        check_json(value, f"value of key {key!r}")
        await self._mutate("put_key", space, lambda s: s.put_key(key, value))

    async def _delete_key(self, what: str, space: str, key: str) -> bool:
        def step(current: Space | None) -> _Outcome[bool]:
            if current is None:
                raise SpaceNotFoundError(f"no space named {space!r}")
            removed = current.delete_key(key)
            return _Outcome(removed, current if removed else None)

        return await self._transact(what, space, step, strict=False)

    async def delete_key(self, space: str, key: str) -> bool:
        """Remove ``key``; returns whether it existed (no write when it did not)."""
        return await self._delete_key("delete_key", space, key)

    # --- list spaces ---------------------------------------------------------------------

    async def append(self, space: str, item: Any) -> None:
        """Append to a list space."""
        check_json(item, "item")
        await self._mutate("append", space, lambda s: s.append(item))

    async def prepend(self, space: str, item: Any) -> None:
        """Put an item first in a list space."""
        check_json(item, "item")
        await self._mutate("prepend", space, lambda s: s.prepend(item))

    async def insert(self, space: str, index: int, item: Any) -> None:
        """Insert before ``index`` in a list space."""
        check_json(item, "item")
        await self._mutate("insert", space, lambda s: s.insert(index, item))

    async def remove(self, space: str, index: int) -> Any:
        """Remove and return the item at ``index``."""
        return await self._mutate("remove", space, lambda s: s.remove(index))

    async def update_item(self, space: str, index: int, item: Any) -> Any:
        """Replace the item at ``index``; returns the previous one."""
        check_json(item, "item")
        return await self._mutate("update_item", space, lambda s: s.update_item(index, item))

    async def remove_from_space(self, space: str, item_id: str | int) -> Any:
        """Remove and return the first item of a list space whose ``id`` is ``item_id``.

        Compare-and-set like every write (a race re-reads and looks the id up
        again). :class:`SpaceNotFoundError`, :class:`SpaceTypeError` (a map
        space) or :class:`~jarvismem.errors.SpaceItemNotFoundError`.
        """
        check_item_id(item_id)
        return await self._mutate("remove_from_space", space, lambda s: s.remove_by_id(item_id))

    async def update_in_space(
        self,
        space: str,
        item_id: str | int,
        fn: Callable[[Any], Any],
        *,
        strict: bool = False,
    ) -> Any:
        """Replace the item whose ``id`` is ``item_id`` with ``fn(copy_of_item)``; returns it.

        ``fn`` must be pure: it runs again on the fresh item when a writer raced
        this one (``strict=True``: :class:`SpaceConflictError` instead). Errors as
        :meth:`remove_from_space`, plus :class:`InvalidPayloadError` for a result
        that is not a dict with the same ``id`` (or, in ``tasks``, not a task).
        """
        check_item_id(item_id)
        return await self._mutate(
            "update_in_space", space, lambda s: s.update_by_id(item_id, fn), strict=strict
        )

    # --- world ------------------------------------------------------------------------------

    async def world_get(self, key: str, default: Any = None) -> Any:
        """A belief from ``world``."""
        async with self._guard("world_get"):
            return (await self._existing_space("world_get", WORLD)).get_key(key, default)

    async def world_put(self, key: str, value: Any) -> None:
        """Set a belief in ``world``."""
        check_json(value, f"value of key {key!r}")
        await self._mutate("world_put", WORLD, lambda s: s.put_key(key, value))

    async def world_delete(self, key: str) -> bool:
        """Forget a belief; returns whether it existed."""
        return await self._delete_key("world_delete", WORLD, key)

    async def world_items(self) -> dict[str, Any]:
        """Every belief."""
        async with self._guard("world_items"):
            return (await self._existing_space("world_items", WORLD)).items()

    # --- tasks ---------------------------------------------------------------------------------

    async def tasks_add(self, text: str) -> dict[str, Any]:
        """Append an open task; returns it (its id is fixed across retries)."""
        task_id = new_task_id()
        return await self._mutate("tasks_add", TASKS, lambda s: s.tasks_add(text, task_id=task_id))

    async def tasks_insert(self, index: int, text: str) -> dict[str, Any]:
        """Insert an open task at priority position ``index``; returns it."""
        task_id = new_task_id()
        return await self._mutate(
            "tasks_insert", TASKS, lambda s: s.tasks_insert(index, text, task_id=task_id)
        )

    async def tasks_complete(self, task_id: str) -> dict[str, Any]:
        """Mark a task done; returns it."""
        return await self._mutate("tasks_complete", TASKS, lambda s: s.tasks_complete(task_id))

    async def tasks_remove(self, task_id: str) -> dict[str, Any]:
        """Remove a task; returns it."""
        return await self._mutate("tasks_remove", TASKS, lambda s: s.tasks_remove(task_id))

    async def tasks_reorder(self, task_ids: Iterable[str]) -> None:
        """Reorder the agenda to a permutation of the existing ids."""
        ids = list(task_ids)
        await self._mutate("tasks_reorder", TASKS, lambda s: s.tasks_reorder(ids))

    async def tasks_next(self) -> dict[str, Any] | None:
        """The first open task, or ``None``."""
        async with self._guard("tasks_next"):
            return (await self._existing_space("tasks_next", TASKS)).tasks_next()

    async def tasks_open(self) -> list[dict[str, Any]]:
        """Open tasks in priority order."""
        async with self._guard("tasks_open"):
            return (await self._existing_space("tasks_open", TASKS)).tasks_open()
