"""Cognitive spaces persisted in Redis, with compare-and-set per space.

Layout: one hash per (workflow, agent) at ``KeySpace.spaces(wf, agent)``:

* one field per space, ``{"rev":N,"data":...,"metadata":...,"created_at":...,"updated_at":...}``;
* ``__container__``: ``{"rev":N,"updated_at":T,"id":"mem_...","created_at":...,"metadata":...}``.

Both JSON documents are written with ``rev`` (and, for the container,
``updated_at``) first, so the Lua script reads and rewrites those numbers with a
string pattern instead of decoding and re-encoding JSON (Redis' cjson would
reformat user data and round large numbers).

Concurrency: a write carries the revision it was computed from; the script
stores the space only if that is still the stored revision and, in the same
atomic step, bumps the container revision. Writers to different spaces never
conflict; a writer that lost a race re-reads and re-applies its (pure) change,
so no update is lost. Nothing is written until the first mutation, and a store
that is never used costs no round trip.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from jarvismem.backends.redis import RedisClient
from jarvismem.errors import (
    InvalidPayloadError,
    ReservedSpaceError,
    SpaceConflictError,
    SpaceNotFoundError,
    SpaceTypeError,
)
from jarvismem.keys import KeySpace, validate_id
from jarvismem.spaces.models import (
    RESERVED_SPACES,
    TASKS,
    WORLD,
    MemoryContainer,
    Space,
    SpaceData,
    check_json,
    check_space_data,
    kind_of,
    new_container_id,
    new_task_id,
    now_ms,
    validate_space_name,
)

CONTAINER_FIELD = "__container__"

T = TypeVar("T")

# KEYS[1] = spaces hash
# ARGV[1] = "set" | "del"; ARGV[2] = space field; ARGV[3] = expected space rev
# ARGV[4] = new space JSON (set only); ARGV[5] = container JSON tail used when the
# container does not exist yet (everything after its "updated_at" member);
# ARGV[6] = now (ms); ARGV[7] = TTL in ms ("0" = none)
# Returns {1, new container rev} on success, {0, stored rev} on a stale rev,
# {0, -1} when "del" finds no such space.
_CAS_SCRIPT = """
local key, op, field = KEYS[1], ARGV[1], ARGV[2]
local current = redis.call('HGET', key, field)
if op == 'del' then
  if not current then return {0, -1} end
  redis.call('HDEL', key, field)
else
  local stored = 0
  if current then
    stored = tonumber(string.match(current, '^{"rev":(%d+),'))
    if not stored then return redis.error_reply('corrupt space field ' .. field) end
  end
  if stored ~= tonumber(ARGV[3]) then return {0, stored} end
  redis.call('HSET', key, field, ARGV[4])
end
local crev, tail = 0, ARGV[5]
local container = redis.call('HGET', key, '__container__')
if container then
  local r, rest = string.match(container, '^{"rev":(%d+),"updated_at":%d+,(.*)$')
  if not r then return redis.error_reply('corrupt container field') end
  crev, tail = tonumber(r), rest
end
crev = crev + 1
redis.call('HSET', key, '__container__',
  '{"rev":' .. string.format('%d', crev) .. ',"updated_at":' .. ARGV[6] .. ',' .. tail)
if ARGV[7] ~= '0' then redis.call('PEXPIRE', key, ARGV[7]) end
return {1, crev}
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


class _Outcome(Generic[T]):
    """What one attempt of a mutation decided: the space to write (or none) and the result."""

    __slots__ = ("result", "space")

    def __init__(self, result: T, space: Space | None) -> None:
        self.result = result
        self.space = space


class SpacesStore:
    """The cognitive spaces of one (workflow, agent), stored in one Redis hash.

    ``redis``: a ``redis.asyncio`` client (plain or cluster; fakeredis works).
    ``keyspace``: the tenant's key maker. ``ttl_seconds``: expiry refreshed on
    every write (``None`` = keep forever). ``max_retries``: how many times a
    mutation that lost a race is re-applied before :class:`SpaceConflictError`.

    ``retries`` counts the re-applications this store has made (observability
    and tests).
    """

    def __init__(
        self,
        redis: RedisClient,
        keyspace: KeySpace,
        workflow_id: str,
        agent_id: str,
        *,
        ttl_seconds: int | None,
        max_retries: int = 16,
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise InvalidPayloadError("ttl_seconds must be positive or None")
        if max_retries < 0:
            raise InvalidPayloadError("max_retries must be >= 0")
        self._redis = redis
        self._key = keyspace.spaces(workflow_id, agent_id)
        self._ttl_ms = "0" if ttl_seconds is None else str(int(ttl_seconds) * 1000)
        self._max_retries = max_retries
        # Used only if this store is the first to write the container.
        self._container_id = new_container_id()
        self._script = redis.register_script(_CAS_SCRIPT)
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.agent_id = validate_id(agent_id, "agent_id")
        self.retries = 0

    @property
    def key(self) -> str:
        """The Redis hash holding this agent's spaces."""
        return self._key

    # --- reading -------------------------------------------------------------------------

    async def load(self) -> MemoryContainer:
        """The whole container as stored now (one HGETALL; writes nothing).

        Before the first mutation this is a fresh container whose reserved
        spaces are empty at rev 0.
        """
        raw = await self._redis.hgetall(self._key)
        fields = {_text(k): _text(v) for k, v in raw.items()}
        head = fields.pop(CONTAINER_FIELD, None)
        if head is None:
            container = MemoryContainer(id=self._container_id)
            for name, value in fields.items():  # spaces written by a restore without head
                container.spaces[name] = self._decode(name, value)
            return container
        meta = json.loads(head)
        spaces = {name: self._decode(name, value) for name, value in fields.items()}
        return MemoryContainer(
            id=meta["id"],
            rev=int(meta["rev"]),
            spaces=spaces,
            created_at=int(meta["created_at"]),
            updated_at=int(meta["updated_at"]),
            metadata=meta.get("metadata") or {},
        )

    @staticmethod
    def _decode(name: str, value: str) -> Space:
        return Space.from_dict(json.loads(value), name)

    async def _read(self, name: str) -> Space | None:
        """A fresh copy of one space; reserved spaces default to empty at rev 0."""
        raw = await self._redis.hget(self._key, name)
        if raw is not None:
            return self._decode(name, _text(raw))
        kind = RESERVED_SPACES.get(name)
        if kind is None:
            return None
        return Space({} if kind == "map" else [])

    async def get_space(self, name: str) -> Space:
        """A copy of one space (one HGET). :class:`SpaceNotFoundError` if absent."""
        space = await self._read(validate_space_name(name))
        if space is None:
            raise SpaceNotFoundError(f"no space named {name!r}")
        return space

    async def has_space(self, name: str) -> bool:
        """Whether the space exists (reserved ones always do)."""
        return await self._read(validate_space_name(name)) is not None

    async def snapshot(self) -> dict[str, Any]:
        """JSON-able dict of the whole container (rehydrate bundle, export)."""
        return (await self.load()).to_dict()

    # --- the one write path ----------------------------------------------------------

    async def _transact(
        self, name: str, step: Callable[[Space | None], _Outcome[T]], *, strict: bool
    ) -> T:
        """Read the space, let ``step`` decide, compare-and-set; retry on a lost race."""
        validate_space_name(name)
        attempt = 0
        while True:
            current = await self._read(name)
            expected = current.rev if current is not None else 0
            outcome = step(current)
            new = outcome.space
            if new is None:
                return outcome.result
            check_space_data(name, new.data)
            check_json(new.metadata, "space metadata")
            now = now_ms()
            new.rev = expected + 1
            new.updated_at = now
            if current is None or not new.created_at:
                new.created_at = now
            tail = _container_tail(self._container_id, now, {})
            ok, _stored = await self._script(
                keys=[self._key],
                args=["set", name, expected, encode_space(new), tail, now, self._ttl_ms],
            )
            if int(ok) == 1:
                return outcome.result
            if strict:
                raise SpaceConflictError(
                    f"space {name!r} changed since it was read (expected rev {expected})"
                )
            if attempt >= self._max_retries:
                raise SpaceConflictError(
                    f"space {name!r}: gave up after {self._max_retries} retries under contention"
                )
            attempt += 1
            self.retries += 1
            # Full jitter on an exponential window spreads racing writers apart.
            await asyncio.sleep(random.uniform(0, min(0.2, 0.002 * 2**attempt)))

    def _existing(
        self, name: str, fn: Callable[[Space], T]
    ) -> Callable[[Space | None], _Outcome[T]]:
        def step(current: Space | None) -> _Outcome[T]:
            if current is None:
                raise SpaceNotFoundError(f"no space named {name!r}")
            return _Outcome(fn(current), current)

        return step

    async def mutate(self, space_name: str, fn: Callable[[Space], T], *, strict: bool = False) -> T:
        """Apply ``fn`` to a fresh copy of a space and store the result; returns ``fn``'s result.

        ``fn`` must be pure (it may run several times when writers race): change
        the given :class:`Space` in place and return anything. With
        ``strict=True`` a lost race raises :class:`SpaceConflictError` instead of
        retrying. A missing custom space raises :class:`SpaceNotFoundError`.
        """
        return await self._transact(space_name, self._existing(space_name, fn), strict=strict)

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

        return await self._transact(name, step, strict=False)

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

        return await self._transact(name, step, strict=False)

    async def update_space(
        self, name: str, fn: Callable[[SpaceData], SpaceData | None], *, strict: bool = False
    ) -> Space:
        """Replace a space's data with ``fn(copy_of_data)`` (``None`` = changed in place)."""

        def apply(space: Space) -> Space:
            result = fn(space.data)
            if result is not None:
                space.data = result
            return space

        return await self.mutate(name, apply, strict=strict)

    async def delete_space(self, name: str) -> None:
        """Delete a custom space (container rev +1); reserved: :class:`ReservedSpaceError`."""
        if validate_space_name(name) in RESERVED_SPACES:
            raise ReservedSpaceError(f"space {name!r} is reserved and cannot be deleted")
        now = now_ms()
        ok, _ = await self._script(
            keys=[self._key],
            args=[
                "del",
                name,
                -1,
                "",
                _container_tail(self._container_id, now, {}),
                now,
                self._ttl_ms,
            ],
        )
        if int(ok) != 1:
            raise SpaceNotFoundError(f"no space named {name!r}")

    async def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace everything with a :meth:`snapshot` (import). Validated before writing."""
        container = MemoryContainer.from_dict(snapshot)
        mapping: dict[Any, Any] = {
            name: encode_space(space) for name, space in container.spaces.items()
        }
        mapping[CONTAINER_FIELD] = encode_container(container)
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(self._key)
        pipe.hset(self._key, mapping=mapping)
        if self._ttl_ms != "0":
            pipe.pexpire(self._key, int(self._ttl_ms))
        await pipe.execute()

    # --- map spaces --------------------------------------------------------------------

    async def get_key(self, space: str, key: str, default: Any = None) -> Any:
        """A value of a map space (``default`` when absent)."""
        return (await self.get_space(space)).get_key(key, default)

    async def put_key(self, space: str, key: str, value: Any) -> None:
        """Set ``key`` in a map space."""
        check_json(value, f"value of key {key!r}")
        await self.mutate(space, lambda s: s.put_key(key, value))

    async def delete_key(self, space: str, key: str) -> bool:
        """Remove ``key``; returns whether it existed (no write when it did not)."""

        def step(current: Space | None) -> _Outcome[bool]:
            if current is None:
                raise SpaceNotFoundError(f"no space named {space!r}")
            removed = current.delete_key(key)
            return _Outcome(removed, current if removed else None)

        return await self._transact(space, step, strict=False)

    # --- list spaces ---------------------------------------------------------------------

    async def append(self, space: str, item: Any) -> None:
        """Append to a list space."""
        check_json(item, "item")
        await self.mutate(space, lambda s: s.append(item))

    async def prepend(self, space: str, item: Any) -> None:
        """Put an item first in a list space."""
        check_json(item, "item")
        await self.mutate(space, lambda s: s.prepend(item))

    async def insert(self, space: str, index: int, item: Any) -> None:
        """Insert before ``index`` in a list space."""
        check_json(item, "item")
        await self.mutate(space, lambda s: s.insert(index, item))

    async def remove(self, space: str, index: int) -> Any:
        """Remove and return the item at ``index``."""
        return await self.mutate(space, lambda s: s.remove(index))

    async def update_item(self, space: str, index: int, item: Any) -> Any:
        """Replace the item at ``index``; returns the previous one."""
        check_json(item, "item")
        return await self.mutate(space, lambda s: s.update_item(index, item))

    # --- world ------------------------------------------------------------------------------

    async def world_get(self, key: str, default: Any = None) -> Any:
        """A belief from ``world``."""
        return await self.get_key(WORLD, key, default)

    async def world_put(self, key: str, value: Any) -> None:
        """Set a belief in ``world``."""
        await self.put_key(WORLD, key, value)

    async def world_delete(self, key: str) -> bool:
        """Forget a belief; returns whether it existed."""
        return await self.delete_key(WORLD, key)

    async def world_items(self) -> dict[str, Any]:
        """Every belief."""
        return (await self.get_space(WORLD)).items()

    # --- tasks ---------------------------------------------------------------------------------

    async def tasks_add(self, text: str) -> dict[str, Any]:
        """Append an open task; returns it (its id is fixed across retries)."""
        task_id = new_task_id()
        return await self.mutate(TASKS, lambda s: s.tasks_add(text, task_id=task_id))

    async def tasks_insert(self, index: int, text: str) -> dict[str, Any]:
        """Insert an open task at priority position ``index``; returns it."""
        task_id = new_task_id()
        return await self.mutate(TASKS, lambda s: s.tasks_insert(index, text, task_id=task_id))

    async def tasks_complete(self, task_id: str) -> dict[str, Any]:
        """Mark a task done; returns it."""
        return await self.mutate(TASKS, lambda s: s.tasks_complete(task_id))

    async def tasks_remove(self, task_id: str) -> dict[str, Any]:
        """Remove a task; returns it."""
        return await self.mutate(TASKS, lambda s: s.tasks_remove(task_id))

    async def tasks_reorder(self, task_ids: Iterable[str]) -> None:
        """Reorder the agenda to a permutation of the existing ids."""
        ids = list(task_ids)
        await self.mutate(TASKS, lambda s: s.tasks_reorder(ids))

    async def tasks_next(self) -> dict[str, Any] | None:
        """The first open task, or ``None``."""
        return (await self.get_space(TASKS)).tasks_next()

    async def tasks_open(self) -> list[dict[str, Any]]:
        """Open tasks in priority order."""
        return (await self.get_space(TASKS)).tasks_open()
