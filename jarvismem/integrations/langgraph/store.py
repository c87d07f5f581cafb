"""JarvisMemStore: LangGraph's ``BaseStore`` (long-term memory) on Redis and the recall tier.

Items live in Redis under one hash tag per store (``{lgstore:<name>}``): one slot,
so every batch's writes are one atomic Lua script, on Redis Cluster too. Keys in
:mod:`jarvismem.keys` (LangGraph block):

* ``items`` hash ``<a.b.c>\\0<key>`` -> ``created_ms\\nttl_ms\\nupdated_ms\\n<JSON value>``
  (LangGraph forbids ``.`` and NUL in namespace labels, so the join is injective
  and a namespace prefix is a lexical range of the ``idx`` sorted set);
* ``exp`` sorted set item -> expiry deadline (ms), items with a TTL only; every
  script first removes up to :data:`SWEEP_BATCH` expired items, and reads skip
  any expired item still there;
* ``nss`` hash ``<a.b.c>`` -> item count (``list_namespaces`` without a scan);
* ``reindex`` hash item -> the text its recall entry must hold (``""``: none):
  the index changes still to make (see below).

Search by ``query`` is lexical (BM25) through jarvismem's recall tier: each
indexed item's text is a recall entry of the store's own scope, whose metadata
names the item; the item itself is read back from Redis. The recall index lives
elsewhere (another slot, or another backend), so it cannot be written by the
item's script: instead that script records, in ``reindex``, every index change
its writes need (a put's text, or the removal of a deleted or expired item).
The put then makes its changes and clears their records; one that fails stays
recorded (the put still returns: its item is stored, its index change is not
lost), and every query search first applies what is recorded, so a search
never sees an index behind the items, and no second put is needed. Reads by
key and namespace listings never touch the index. Search by ``filter``
matches the JSON value (exact values, nested objects, ``$eq $ne $gt $gte $lt
$lte``). TTLs are in minutes, as LangGraph counts them, and are refreshed by
reads unless ``refresh_ttl=False``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
)
from langgraph.store.base import validate_op_namespace as _validate_op_namespace

from jarvismem.backends.redis import RedisBackend
from jarvismem.backends.redis_connect import RedisClient
from jarvismem.defaults import RECALL_CONTENT_MAX_CHARS, RECALL_NAMESPACE
from jarvismem.errors import (
    BackendRejectedError,
    BackendUnavailableError,
    ConfigError,
    InvalidPayloadError,
    RecallError,
)
from jarvismem.keys import KeySpace, lg_text, validate_id
from jarvismem.recall import DeletableRecallStore, RecallRequest, RedisRecallStore, WriteRequest
from jarvismem.redaction import (
    Redactor,
    default_redactor,
    is_secret_key,
    never_secret,
    no_redaction,
    redact_object,
)
from jarvismem.runtime import MemoryRuntime

SEP = "\x00"
SWEEP_BATCH = 1000
"""Expired items one script removes at most (the rest go in the next calls)."""

READ_CHUNK = 500
"""Items read per round trip."""

MAX_RECALL = 10_000
"""The most recall candidates one query search asks for before filtering."""

REPAIR_BATCH = 100
"""Recorded index changes a put applies besides its own, and a search per round trip."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """How a :class:`JarvisMemStore` indexes item text for query search.

    Attributes:
        recall: the recall store that indexes it (default: BM25 in the store's Redis).
        namespace: the recall namespace of the store's entries.
        agent: the recall agent of the store's entries (default ``lgstore-<name>``).
        fields: JSON paths whose text is indexed when a put gives no ``index``
            (default: every string and number of the value).
    """

    recall: DeletableRecallStore | None = None
    namespace: str = RECALL_NAMESPACE
    agent: str | None = None
    fields: tuple[str, ...] = ()


DEFAULT_INDEX = StoreIndex()
"""BM25 in the store's Redis, the default recall namespace, every string and number."""


_TRANSIENT = (BackendUnavailableError, BackendRejectedError, RecallError)
"""Index failures that may pass: their records stay for the next search or put."""

_LUA_COMMON = """
local now = tonumber(ARGV[1])
local SEP = '\\0'
local function ns_of(m) return string.sub(m, 1, string.find(m, SEP, 1, true) - 1) end
local function remove(m)
  if redis.call('HDEL', KEYS[1], m) == 1 then
    redis.call('ZREM', KEYS[2], m)
    if redis.call('HINCRBY', KEYS[4], ns_of(m), -1) <= 0 then
      redis.call('HDEL', KEYS[4], ns_of(m))
    end
    -- Its recall entry goes too: recorded here, done by the next put or search.
    redis.call('HSET', KEYS[5], m, '')
  end
  redis.call('ZREM', KEYS[3], m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, SWEEP_BATCH)) do
  remove(m)
end
""".replace("SWEEP_BATCH", str(SWEEP_BATCH))

# KEYS: items, idx, exp, nss, reindex. ARGV: now ms, then (member, JSON value |
# "" = delete, ttl ms | "0", text to index | "") quadruples. An update keeps the
# item's creation time. Returns up to REPAIR_BATCH recorded index changes
# (member, text, ...), this batch's among them when few are recorded.
_WRITE = (
    _LUA_COMMON
    + """
for i = 2, #ARGV, 4 do
  local m, value, ttl = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if value == '' then
    remove(m)
  else
    local old = redis.call('HGET', KEYS[1], m)
    local created = ARGV[1]
    if old then
      created = string.sub(old, 1, string.find(old, '\\n', 1, true) - 1)
    else
      redis.call('ZADD', KEYS[2], 0, m)
      redis.call('HINCRBY', KEYS[4], ns_of(m), 1)
    end
    redis.call('HSET', KEYS[1], m, created .. '\\n' .. ttl .. '\\n' .. ARGV[1] .. '\\n' .. value)
    if ttl ~= '0' then
      redis.call('ZADD', KEYS[3], now + tonumber(ttl), m)
    else
      redis.call('ZREM', KEYS[3], m)
    end
    redis.call('HSET', KEYS[5], m, ARGV[i + 3])
  end
end
return redis.call('HSCAN', KEYS[5], 0, 'COUNT', REPAIR_BATCH)[2]
"""
).replace("REPAIR_BATCH", str(REPAIR_BATCH))

# ARGV: now ms, "1" to refresh TTLs | "0", member, ... Returns the records.
_READ = (
    _LUA_COMMON
    + """
local out = {}
for i = 3, #ARGV do
  local m = ARGV[i]
  local rec = redis.call('HGET', KEYS[1], m)
  if rec then
    local deadline = redis.call('ZSCORE', KEYS[3], m)
    if deadline and tonumber(deadline) <= now then
      rec = false
    elseif deadline and ARGV[2] == '1' then
      local a = string.find(rec, '\\n', 1, true)
      local b = string.find(rec, '\\n', a + 1, true)
      redis.call('ZADD', KEYS[3], now + tonumber(string.sub(rec, a + 1, b - 1)), m)
    end
  end
  out[#out + 1] = rec
end
return out
"""
)

# ARGV: now ms. Returns HGETALL nss.
_NAMESPACES = (
    _LUA_COMMON
    + """
return redis.call('HGETALL', KEYS[4])
"""
)

# KEYS: reindex. ARGV: (member, text) pairs whose index change is made: each
# record still holding that text is cleared (a newer put's record stays).
_SETTLE = """
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 1
"""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _str(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _when(ms: bytes) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


def _member(namespace: tuple[str, ...], key: str) -> str:
    return ".".join(namespace) + SEP + key


def _check_ids(op: Op) -> None:
    """Every namespace label and key of ``op`` by :func:`~jarvismem.keys.lg_text`
    (after LangGraph's own namespace check), so that a batch is refused whole
    before anything is read or written."""
    _validate_op_namespace(op)
    labels: tuple[str, ...] = ()
    if isinstance(op, PutOp | GetOp):
        labels = op.namespace
        lg_text(op.key, "store key")
    elif isinstance(op, SearchOp):
        labels = op.namespace_prefix
    elif isinstance(op, ListNamespacesOp):
        labels = tuple(label for c in op.match_conditions or () for label in c.path)
    for label in labels:
        lg_text(label, "store namespace label")


def _split(member: str) -> tuple[tuple[str, ...], str]:
    ns, _, key = member.partition(SEP)
    return tuple(ns.split(".")) if ns else (), key


def _compare(value: Any, wanted: Any) -> bool:
    """Whether a stored ``value`` matches one filter condition ``wanted``."""
    if isinstance(wanted, dict):
        if wanted and all(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            left, right = float(value), float(arg)
        except (TypeError, ValueError):
            return False  # a missing or non-numeric value matches no comparison
        return {
            "$gt": left > right,
            "$gte": left >= right,
            "$lt": left < right,
            "$lte": left <= right,
        }[op]
    raise InvalidPayloadError(f"unsupported filter operator {op!r}: use $eq $ne $gt $gte $lt $lte")


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    if condition.match_type not in ("prefix", "suffix"):
        raise InvalidPayloadError(f"unsupported namespace match type {condition.match_type!r}")
    path = tuple(condition.path)
    if not path:
        return True
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _strings(value: Any) -> Iterable[str]:
    """Every string and number leaf of a JSON value (the default text to index)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


class JarvisMemStore(BaseStore):
    """LangGraph store on jarvismem: items in Redis, query search through the recall tier.

    ``redis``: a ``redis.asyncio`` client (plain or cluster). ``keyspace``: the
    tenant's key maker. ``name``: the store (an id): each store is one Redis
    Cluster slot, so split very large stores by name. ``index``: where and how
    item text is indexed (:class:`StoreIndex`: the recall store, its scope, the
    indexed fields). ``ttl``: LangGraph's ``TTLConfig`` (minutes).

    Secrets: a value is redacted before it is stored or indexed (strings,
    dict keys, and any value under a secret-named key, as ``remember`` and
    ``put_space`` do), so neither Redis, the search index nor ``aget``/``asearch``
    hold it in clear. ``redactor``/``is_secret_key`` default to the built-in
    ones; :meth:`from_runtime` uses the runtime's (``REDACTION_ENABLED``).
    """

    supports_ttl = True

    def __init__(
        self,
        redis: RedisClient | RedisBackend,
        keyspace: KeySpace | None = None,
        *,
        name: str = "default",
        index: StoreIndex = DEFAULT_INDEX,
        ttl: TTLConfig | None = None,
        redactor: Redactor = default_redactor,
        is_secret_key: Callable[[str], bool] = is_secret_key,
    ) -> None:
        self._backend = RedisBackend.adopt(redis)
        self._redis = self._backend.client
        self._redactor = redactor
        self._is_secret_key = is_secret_key
        self._keyspace = keyspace or KeySpace()
        self.name = validate_id(name, "store name")
        self._keys = [
            self._keyspace.lg_store_items(name),
            self._keyspace.lg_store_index(name),
            self._keyspace.lg_store_expiry(name),
            self._keyspace.lg_store_namespaces(name),
            self._keyspace.lg_store_reindex(name),
        ]
        recall = index.recall
        self._recall = (
            recall if recall is not None else RedisRecallStore(self._backend, self._keyspace)
        )
        self._recall_ns = validate_id(index.namespace, "recall namespace")
        self._recall_agent = validate_id(index.agent or f"lgstore-{name}", "recall agent")
        self._index_fields = [(p, tokenize_path(p)) for p in index.fields]
        self.ttl_config = ttl
        self._write = self._redis.register_script(_WRITE)
        self._read = self._redis.register_script(_READ)
        self._namespaces = self._redis.register_script(_NAMESPACES)
        self._settle = self._redis.register_script(_SETTLE)
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    def from_runtime(
        cls,
        runtime: MemoryRuntime,
        *,
        name: str = "default",
        ttl: TTLConfig | None = None,
        redact: bool = True,
    ) -> JarvisMemStore:
        """A store on ``runtime``'s Redis, namespace and recall store (when it can delete).

        Values are redacted with the runtime's redactor (none with
        ``REDACTION_ENABLED=false``); ``redact=False`` stores them exactly as given.
        """
        if runtime.backend is None:
            raise ConfigError("JarvisMemStore needs Redis: this runtime has none (REDIS_URL)")
        recall = runtime.recall_store
        usable = recall if isinstance(recall, DeletableRecallStore) else None
        return cls(
            runtime.backend,
            runtime.keyspace,
            name=name,
            index=StoreIndex(recall=usable),
            ttl=ttl,
            redactor=runtime.redactor if redact else no_redaction,
            is_secret_key=runtime.is_secret_key if redact else never_secret,
        )

    # --- helpers --------------------------------------------------------------------------

    def _redacted(self, op: PutOp) -> PutOp:
        """``op`` with its value redacted: what is stored, indexed and read back."""
        if op.value is None:
            return op
        return op._replace(value=redact_object(op.value, self._redactor, self._is_secret_key))

    def _entry_id(self, member: str) -> str:
        return "lg-" + hashlib.sha256(member.encode()).hexdigest()[:40]

    async def _forget(self, members: Iterable[bytes | str]) -> None:
        """Take items that are gone out of the recall index (in parallel)."""
        names = [_str(m) for m in members]
        if names:
            await asyncio.gather(*(self._index_one(m, "") for m in names))

    async def _index_one(self, member: str, text: str) -> None:
        """Make the recall entry of ``member`` hold ``text`` (``""``: no entry)."""
        entry_id = self._entry_id(member)
        if not text:
            await self._recall.delete(
                entry_id, agent_id=self._recall_agent, namespace=self._recall_ns
            )
            return
        await self._recall.write(
            WriteRequest(
                content=text,
                id=entry_id,
                metadata={"item": member},
                agent_id=self._recall_agent,
                namespace=self._recall_ns,
            )
        )

    async def _reindex(self, changes: dict[str, str]) -> None:
        """Make the recorded index ``changes`` (item -> text), in parallel, and clear
        the records of those made. Raises the first failure; a transient one's record
        stays for later, any other's is cleared (it could never be made)."""
        if not changes:
            return
        items = list(changes.items())
        outcomes = await asyncio.gather(
            *(self._index_one(m, text) for m, text in items), return_exceptions=True
        )
        settled: list[str] = []
        first: BaseException | None = None
        for (member, text), outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                first = first or outcome
                if isinstance(outcome, _TRANSIENT):
                    continue
                log.error("langgraph store: dropped the index change of %r: %r", member, outcome)
            settled += [member, text]
        if settled:
            async with self._backend.guard("langgraph store reindex"):
                await self._settle(keys=[self._keys[4]], args=settled)
        if first is not None:
            raise first

    async def _repair(self) -> None:
        """Make every recorded index change (a query search's first step)."""
        batch: dict[str, str] = {}
        async with self._backend.guard("langgraph store reindex"):
            async for field, text in self._redis.hscan_iter(self._keys[4], count=REPAIR_BATCH):
                batch[_str(field)] = _str(text)
                if len(batch) >= REPAIR_BATCH:
                    await self._reindex(batch)
                    batch = {}
            await self._reindex(batch)

    async def _read_items(self, members: list[str], refresh: bool) -> dict[str, Item]:
        found: dict[str, Item] = {}
        for start in range(0, len(members), READ_CHUNK):
            chunk = members[start : start + READ_CHUNK]
            async with self._backend.guard("langgraph store read"):
                records = await self._read(
                    keys=self._keys, args=[_now_ms(), "1" if refresh else "0", *chunk]
                )
            for member, raw in zip(chunk, records, strict=True):
                if raw is None:
                    continue
                created, _ttl, updated, payload = raw.split(b"\n", 3)
                namespace, key = _split(member)
                found[member] = Item(
                    value=json.loads(payload),
                    key=key,
                    namespace=namespace,
                    created_at=_when(created),
                    updated_at=_when(updated),
                )
        return found

    def _text(self, op: PutOp) -> str:
        assert op.value is not None
        if op.index is False:
            return ""
        paths = [(p, tokenize_path(p)) for p in op.index] if op.index else self._index_fields
        if paths:
            texts = [t for _, tokens in paths for t in get_text_at_path(op.value, tokens)]
        else:
            texts = list(_strings(op.value))
        # Lexical search sees the first RECALL_CONTENT_MAX_CHARS characters of an item.
        return "\n".join(t for t in texts if t.strip())[:RECALL_CONTENT_MAX_CHARS].strip()

    # --- operations ------------------------------------------------------------------------

    async def _puts(self, ops: list[PutOp]) -> None:
        last: dict[str, PutOp] = {}
        for op in ops:  # the last put of an item in a batch wins
            last[_member(op.namespace, op.key)] = self._redacted(op)
        args: list[Any] = [_now_ms()]
        own: dict[str, str] = {}
        for member, op in last.items():
            own[member] = self._text(op) if op.value is not None else ""
            if op.value is None:
                args += [member, "", "0", ""]
                continue
            try:
                payload = json.dumps(op.value, ensure_ascii=False, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise InvalidPayloadError(f"store value must be JSON-serialisable: {exc}") from None
            ttl_ms = 0 if op.ttl is None else max(1, int(op.ttl * 60_000))
            args += [member, payload, ttl_ms, own[member]]
        async with self._backend.guard("langgraph store write"):
            flat = await self._backend.run_script(
                self._write, self._keys, args, what="langgraph store write"
            )
        recorded = {_str(flat[i]): _str(flat[i + 1]) for i in range(0, len(flat), 2)}
        try:
            # This batch's changes, and some that earlier calls left recorded.
            await self._reindex(recorded | own)
        except _TRANSIENT as exc:
            # The items are stored with their records: the next search makes the change.
            log.warning("langgraph store: index change left for the next search: %s", exc)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0 or op.offset < 0:
            return []
        want = op.offset + op.limit
        prefix = ".".join(op.namespace_prefix)
        query = (op.query or "").strip()
        scores: dict[str, float] = {}
        if query:
            await self._repair()
            wanted = max(2 * want, 10)
            while True:
                results = await self._recall.recall(
                    RecallRequest(
                        query=query,
                        limit=wanted,
                        agent_id=self._recall_agent,
                        namespace=self._recall_ns,
                    )
                )
                # Score 0 is the recall tier's "nothing matched, here is the newest".
                for r in results:
                    member = r.entry.metadata.get("item", "")
                    if r.score > 0 and self._under(member, prefix):
                        scores.setdefault(member, r.score)
                if len(scores) >= want or len(results) < wanted or wanted >= MAX_RECALL:
                    break
                wanted = min(wanted * 4, MAX_RECALL)
            candidates = list(scores)
        else:
            candidates = await self._members_under(prefix)
        items = await self._read_items(candidates, refresh=False)
        gone = [m for m in candidates if m not in items]
        if query and gone:
            await self._forget(gone)
        kept = [
            (m, item)
            for m, item in items.items()
            if not op.filter or all(_compare(item.value.get(k), v) for k, v in op.filter.items())
        ]
        if query:
            kept.sort(key=lambda mi: -scores[mi[0]])
        else:
            kept.sort(key=lambda mi: mi[1].updated_at, reverse=True)
        page = kept[op.offset : want]
        if op.refresh_ttl and page:
            await self._read_items([m for m, _ in page], refresh=True)
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=scores.get(m) if query else None,
            )
            for m, item in page
        ]

    @staticmethod
    def _under(member: str, prefix: str) -> bool:
        ns = member.partition(SEP)[0]
        return not prefix or ns == prefix or ns.startswith(prefix + ".")

    async def _members_under(self, prefix: str) -> list[str]:
        """Item names whose namespace is ``prefix`` or below it (two lexical ranges)."""
        index = self._keyspace.lg_store_index(self.name)
        raw = prefix.encode()
        ranges = (
            [(b"-", b"+")]
            if not prefix
            else [
                (b"[" + raw + b"\x00", b"(" + raw + b"\x00\xff"),
                (b"[" + raw + b".", b"(" + raw + b".\xff"),
            ]
        )
        found: list[str] = []
        async with self._backend.guard("langgraph store search"):
            for low, high in ranges:
                names: list[Any] = await self._redis.zrangebylex(index, low, high)
                found += [n.decode() for n in names]
        return found

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        async with self._backend.guard("langgraph store list_namespaces"):
            flat = await self._namespaces(keys=self._keys, args=[_now_ms()])
        namespaces = [tuple(flat[i].decode().split(".")) for i in range(0, len(flat), 2)]
        conditions = op.match_conditions or ()
        chosen = [ns for ns in namespaces if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            chosen = list({ns[: op.max_depth] for ns in chosen})
        return sorted(chosen)[op.offset : op.offset + op.limit]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``; reads see the store as it was before the batch's puts."""
        ops = list(ops)
        for op in ops:
            _check_ids(op)
        results: list[Result] = [None] * len(ops)
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                member = _member(op.namespace, op.key)
                results[i] = (await self._read_items([member], op.refresh_ttl)).get(member)
            elif isinstance(op, SearchOp):
                results[i] = await self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = await self._list_namespaces(op)
            elif not isinstance(op, PutOp):
                raise InvalidPayloadError(f"unknown store operation {type(op).__name__}")
        puts = [op for op in ops if isinstance(op, PutOp)]
        if puts:
            await self._puts(puts)
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Sync :meth:`abatch`, for other threads only (as LangGraph's async stores)."""
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            raise asyncio.InvalidStateError(
                "JarvisMemStore is async: use aget/aput/asearch/... Its sync methods only "
                "serve other threads while the loop it was made in runs."
            )
        ops = list(ops)
        result: list[Result] = asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()
        return result
