"""Hostile input, generated: the adversary's property suite.

Each property feeds generated hostile input into a public entry point and checks
the documented outcome, never one example chosen by the author:

* **turns** (``log_turn``): deep nesting (up to 10,000 levels), lists and dicts
  of a few MB, odd types, lone surrogates, NUL, huge ints, nan/inf, bytes. Only a
  ``jarvismem.errors`` payload error may escape; a refusal leaves every stored
  byte as it was; an accepted turn is stored bounded (``MAX_TURN_FIELD_CHARS``
  applies to the encoded JSON of structured values too).
* **checkpoints** and **spaces**: the same hostile values, hostile revisions
  and indexes; a refusal changes nothing, and the spaces stay writable.
* **ids** (path traversal, separators, unicode, very long, empty, non-str)
  everywhere an id is taken: ``InvalidIdError``, or a key and a path inside the
  namespace and its folders.
* **export files** (truncated lines, wrong order, ``0-0`` ids, duplicate turns,
  giant revisions, wrong types, wrong format/version): only documented errors,
  the target unchanged when refused, and a retry of the good file then works.
* **sizes**: a write of 5-10 MB anywhere (spaces, tasks, notes, remembered
  facts, turns) is refused or stored bounded by the largest documented limit.
* **secrets** placed anywhere (turn fields, dict keys, checkpoints, spaces,
  scratchpad notes, remembered facts, summaries) never appear in what is
  stored, what goes to the prompt, what is sent to Athena or the LLM, the logs,
  or the CLI's ``--json`` output. With ``tests/secret_corpus.py`` present its
  samples join the 15 shapes here.

Layers: the input-handling properties run on fakeredis (a private server per
example) and a local blob folder, which is what the property is about and keeps
the suite under a minute; the properties whose outcome depends on the real
server (Lua number handling of space revisions, the end-to-end secrets run with
Athena and the CLI) use the real Redis at 127.0.0.1:6379 with a fresh namespace
per example, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import importlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.defaults import MAX_CHECKPOINT_BYTES, MAX_TURN_FIELD_CHARS
from jarvismem.errors import (
    CheckpointConflictError,
    InvalidIdError,
    InvalidPayloadError,
    PayloadTooLargeError,
    SpaceError,
)
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.testing.fake_llm import FakeLLMServer
from jarvismem.transfer import TransferError, export_workflow, import_workflow
from tests.conftest import (
    REAL_REDIS_URL,
    env_without_settings,
    real_redis_available,
    require_backend,
)

# --- the documented outcomes --------------------------------------------------------------

# What bad input may raise (jarvismem.errors; every one says nothing was written).
PAYLOAD_ERRORS: tuple[type[BaseException], ...] = (InvalidPayloadError, PayloadTooLargeError)
ID_ERRORS: tuple[type[BaseException], ...] = (InvalidIdError,)
SPACE_ERRORS: tuple[type[BaseException], ...] = (SpaceError, InvalidIdError, *PAYLOAD_ERRORS)
CHECKPOINT_ERRORS: tuple[type[BaseException], ...] = (*PAYLOAD_ERRORS, CheckpointConflictError)
IMPORT_ERRORS: tuple[type[BaseException], ...] = (TransferError, InvalidIdError, *PAYLOAD_ERRORS)

# Room for the truncation marker (``…[truncated N chars]`` or its structured form).
MARKER_ROOM = 256
MAX_SAFE_INT = 2**53 - 1

# Hypothesis on top of async tests and shared fixtures: each example builds its own
# stores (below), so sharing a function-scoped fixture across examples is safe.


def prop(examples: int) -> hsettings:
    """The settings of one property: ``examples`` examples, no per-example deadline
    (a 3 MB turn is slow by design), and the health checks that large generated
    values trip off."""
    return hsettings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# --- stores, one set per example -----------------------------------------------------------


@dataclass
class Stores:
    """One runtime over private stores: its Redis, its folders, its namespace."""

    rt: MemoryRuntime
    redis: Any
    base: Path
    namespace: str
    real: bool
    log: list[str] = field(default_factory=list)

    @property
    def blob_root(self) -> Path:
        return self.base / "blobs"

    @property
    def outbox_root(self) -> Path:
        return self.base / "outbox"


class _ListHandler(logging.Handler):
    """Keeps every formatted jarvismem log line (secrets must not reach the logs)."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink.append(self.format(record))
        except Exception:  # a record that cannot format is itself worth seeing
            self.sink.append(repr(record.msg) + repr(record.args))


@asynccontextmanager
async def stores(
    *, real: bool = False, athena: AthenaClient | None = None, **overrides: Any
) -> AsyncIterator[Stores]:
    """Fresh stores for one example: fakeredis (private server) or the real Redis
    with a new namespace, a temporary blob folder and outbox; all removed after."""
    namespace = "h" + uuid.uuid4().hex[:12]
    base = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="jm-hostile-")) / "store"
    await asyncio.to_thread(base.mkdir)
    if real:
        require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
        import redis.asyncio as aioredis

        client: Any = aioredis.Redis.from_url(REAL_REDIS_URL)
    else:
        import fakeredis

        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    blob = LocalBlobStorage(base / "blobs")
    settings = load_settings(
        _env_file=None,
        jarvismem_namespace=namespace,
        outbox_path=base / "outbox",
        storage_base_path=base / "blobs",
        compaction_enabled=False,
        **overrides,
    )
    rt = MemoryRuntime(settings, redis=client, blob=blob, athena=athena)
    s = Stores(rt=rt, redis=client, base=base, namespace=namespace, real=real)
    handler = _ListHandler(s.log)
    logger = logging.getLogger("jarvismem")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield s
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        await rt.close()
        await blob.close()
        keys = [k async for k in client.scan_iter(match=f"jm:{namespace}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        await asyncio.to_thread(shutil.rmtree, base.parent, True)


async def _redis_dump(s: Stores) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    r = s.redis
    # A private fakeredis server holds nothing else, so every key is listed there:
    # a key written outside the namespace shows up.
    pattern = f"jm:{s.namespace}:*" if s.real else "*"
    async for key in r.scan_iter(match=pattern, count=1000):
        kind = (await r.type(key)).decode()
        value: Any
        if kind == "string":
            value = await r.get(key)
        elif kind == "hash":
            value = sorted((await r.hgetall(key)).items())
        elif kind == "stream":
            value = await r.xrange(key)
        elif kind == "zset":
            value = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = await r.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        else:
            value = kind
        out[key] = (kind, value)
    return out


def _files(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


async def dump(s: Stores) -> dict[str, Any]:
    """Every byte the example's stores hold: Redis keys (by type) and every file."""
    return {"redis": await _redis_dump(s), "files": await asyncio.to_thread(_files, s.base)}


def dump_text(d: dict[str, Any]) -> str:
    """A dump as one searchable text (bytes decoded leniently)."""
    parts: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, bytes):
            parts.append(value.decode("utf-8", "replace"))
            # JSON-escaped copies of non-ASCII text would hide a needle otherwise.
            parts.append(value.decode("unicode_escape", "replace"))
        elif isinstance(value, dict):
            for k, v in value.items():
                add(k)
                add(v)
        elif isinstance(value, list | tuple):
            for v in value:
                add(v)
        else:
            parts.append(str(value))

    add(d)
    return "\n".join(parts)


def assert_same(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    """Byte-identical stores after a refusal (the first difference is named)."""
    for part in ("redis", "files"):
        b, a = before[part], after[part]
        for key in sorted(set(b) | set(a), key=repr):
            assert b.get(key) == a.get(key), f"{what}: {part} {key!r} changed after a refusal"


async def warm(s: Stores) -> Any:
    """Something in every tier first, so that damage to existing data would show."""
    mem = s.rt.memory("wf", "s1", "a1")
    await mem.log_turn(1, "first thought", {"tool": "t", "n": 1}, "ok")
    await mem.save_checkpoint('{"next": 2}')
    assert mem.spaces is not None
    await mem.spaces.world_put("where", "here")
    await mem.spaces.tasks_add("the first task")
    return mem


# --- hostile values -----------------------------------------------------------------------


class _ShownList(list[Any]):
    """A generated list whose repr names how it was built (not megabytes of it)."""

    shown = ""

    def __repr__(self) -> str:
        return self.shown


class _ShownDict(dict[str, Any]):
    """A generated dict whose repr names how it was built."""

    shown = ""

    def __repr__(self) -> str:
        return self.shown


def _shown(value: Any, shown: str) -> Any:
    wrapped = _ShownList(value) if isinstance(value, list) else _ShownDict(value)
    wrapped.shown = shown
    return wrapped


def nested(depth: int, kind: str) -> Any:
    """``depth`` levels of list/dict nesting, built without recursion."""
    value: Any = "bottom"
    for level in range(depth):
        if kind == "list" or (kind == "mixed" and level % 2):
            value = [value]
        else:
            value = {"k": value}
    return _shown(value, f"nested({depth}, {kind!r})")


def huge(size: int, kind: str) -> Any:
    """A list or dict of about ``size`` characters of JSON."""
    value: Any
    if kind == "list":
        value = ["x" * 1000] * max(1, size // 1004)
    elif kind == "dict":
        value = {f"k{i:07d}": "v" * 90 for i in range(max(1, size // 110))}
    else:
        value = [{"n": i, "payload": "y" * 200} for i in range(max(1, size // 225))]
    return _shown(value, f"huge({size}, {kind!r})")


class _LongText(str):
    """A long generated string whose repr says how it was built."""

    shown = ""

    def __repr__(self) -> str:
        return self.shown or f"<{len(self)} chars>"


def long_text(value: str, shown: str) -> str:
    text = _LongText(value)
    text.shown = shown
    return text


class _HugeInt(int):
    """An int past int->str's digit limit (json.dumps raises ValueError on it),
    with a repr hypothesis can print."""

    def __repr__(self) -> str:
        return "10**5000"


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


ODD_LEAVES = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        -0.0,
        1e308,
        _HugeInt(10**5000),
        2**64,
        -(2**63) - 1,
        b"\xff\xfe raw",
        bytearray(b"abc"),
        memoryview(b"mv"),
        {1, 2},
        frozenset({"a"}),
        complex(1, 2),
        decimal.Decimal("1.10"),
        datetime.datetime(2026, 1, 1),
        _Opaque(),
        Ellipsis,
        object,
        "\x00NUL\x00",
        "lone \ud800 surrogate",
        "\udfff",
        "\u202eRTL\u200b",
        (1, "tuple"),
    ]
)
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=40)
KEYS = st.one_of(
    ANY_TEXT,
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.tuples(st.integers()),
    st.sampled_from(["password", "api_key", "Authorization", "", "\x00", "__proto__"]),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    ANY_TEXT,
    st.binary(max_size=20),
    ODD_LEAVES,
)
SMALL = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4),
        st.tuples(inner, inner),
    ),
    max_leaves=12,
)
DEEP = st.builds(
    nested,
    st.one_of(st.integers(1, 200), st.integers(400, 600), st.sampled_from([1_000, 10_000])),
    st.sampled_from(["list", "dict", "mixed"]),
)
HUGE = st.builds(
    huge,
    st.sampled_from([70_000, 300_000, 1_000_000, 3_000_000]),
    st.sampled_from(["list", "dict", "records"]),
)
LONG_TEXT = st.just(long_text("z" * 2_000_000, "'z' * 2_000_000"))
HOSTILE_VALUE = st.one_of(SMALL, SMALL, DEEP, HUGE, LONG_TEXT)


def _encoded_len(value: Any) -> int:
    """How long a stored field is, as text (a ledger field holds str or JSON)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return len(value) if isinstance(value, str) else len(json.dumps(value))


# --- turns --------------------------------------------------------------------------------


@prop(100)
@given(
    field_name=st.sampled_from(["thought", "action", "result"]),
    value=HOSTILE_VALUE,
    tokens=st.one_of(st.just(0), st.integers(-5, 10**20), st.just(True), st.just(1.5)),
)
async def test_a_hostile_turn_is_refused_cleanly_or_stored_bounded(
    field_name: str, value: Any, tokens: Any
) -> None:
    async with stores() as s:
        mem = await warm(s)
        before = await dump(s)
        fields = {"thought": "t", "action": "a", "result": "r", field_name: value}
        try:
            await mem.log_turn(2, tokens=tokens, **fields)
        except PAYLOAD_ERRORS:
            assert_same(before, await dump(s), "log_turn refused")
            return
        except ValueError as exc:
            # Documented for ``tokens`` alone (a non-negative int).
            assert "tokens" in str(exc), f"undocumented ValueError: {exc!r}"
            assert_same(before, await dump(s), "log_turn refused")
            return
        # Accepted: stored once, each field bounded, the earlier turn untouched.
        assert mem.episodic is not None and mem.working is not None
        history = await mem.episodic.full_history()
        assert [str(t["turn_id"]) for t in history] == ["1", "2"]
        assert history[0]["thought"] == "first thought"
        for name in ("thought", "action", "result"):
            size = _encoded_len(history[1][name])
            assert size <= MAX_TURN_FIELD_CHARS + MARKER_ROOM, (
                f"ledger {name} is {size} chars; MAX_TURN_FIELD_CHARS is {MAX_TURN_FIELD_CHARS}"
            )
        records = await mem.working.read_records()
        turn_records = [r for r in records if r.get("type") == "turn"]
        assert len(turn_records) == 2
        for name in ("thought", "action", "result"):
            size = _encoded_len(turn_records[1]["data"][name])
            assert size <= MAX_TURN_FIELD_CHARS + MARKER_ROOM, f"scratchpad {name} is {size} chars"
        assert await mem.load_checkpoint() == '{"next": 2}'


# --- checkpoints --------------------------------------------------------------------------


CHECKPOINT_STATES = st.one_of(
    ANY_TEXT,
    SMALL,
    st.builds(
        lambda d: long_text("[" * d + "]" * d, f"'[' * {d} + ']' * {d}"),
        st.sampled_from([10, 500, 1_000, 10_000]),
    ),
    st.builds(
        lambda n: long_text("s" * n, f"'s' * {n}"), st.sampled_from([1_000, 2_000_000, 20_000_000])
    ),
    st.just(long_text('{"n": ' + "9" * 5000 + "}", "a 5,000-digit number")),
    st.just('{"x": NaN, "y": Infinity}'),
)
EXPECTED_REVS = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from([2**53, 2**63, 2**64, -(2**63) - 1, 10**30]),
    st.sampled_from([True, 1.0, "1", b"1"]),
)


@prop(40)
@given(state=CHECKPOINT_STATES, expected_rev=EXPECTED_REVS)
async def test_a_hostile_checkpoint_is_refused_and_the_stored_one_kept(
    state: Any, expected_rev: Any
) -> None:
    async with stores() as s:
        mem = await warm(s)
        before = await dump(s)
        try:
            rev = await mem.save_checkpoint(state, expected_rev=expected_rev)
        except CHECKPOINT_ERRORS:
            assert_same(before, await dump(s), "save_checkpoint refused")
            assert await mem.load_checkpoint() == '{"next": 2}'
            return
        # Accepted: a revision a JSON reader can hold, and it loads back.
        assert rev is None or (isinstance(rev, int) and 1 <= rev <= MAX_SAFE_INT)
        record = await mem.load_checkpoint_record()
        assert record is not None and 1 <= record.rev <= MAX_SAFE_INT
        history = await mem.episodic.full_history()  # type: ignore[union-attr]
        assert len(history) == 1 and history[0]["thought"] == "first thought"


# --- ids ----------------------------------------------------------------------------------


HOSTILE_IDS = st.one_of(
    st.sampled_from(
        [
            "..",
            "../x",
            "a/../../b",
            "/etc/passwd",
            "..\\..\\win",
            "%2e%2e%2f",
            "",
            " ",
            ".",
            ".hidden",
            "a:b",
            "{tag}",
            "*",
            "a\x00b",
            "é",
            "\u202e",
            "x" * 129,
            "x" * 10_000,
            "ok",
        ]
    ),
    st.text(alphabet=st.sampled_from("a./\\:{}*?[]\x00 é-_"), max_size=12),
    ANY_TEXT,
    st.sampled_from([None, 1.5, True, b"..", ["a"], 10**40, -1]),
)


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    real = path.resolve()
    return any(real.is_relative_to(root.resolve()) for root in roots)


def _assert_contained(s: Stores, d: dict[str, Any], what: str) -> None:
    for key in d["redis"]:
        assert key.decode("utf-8", "replace").startswith(f"jm:{s.namespace}:"), (
            f"{what}: key {key!r} outside the namespace"
        )
    for rel in d["files"]:
        assert _inside(s.base / rel, (s.blob_root, s.outbox_root)), f"{what}: file {rel!r} escaped"
    # Nothing beside the store's folder either (a path that climbed out of it);
    # "io" holds the test's own export files.
    assert {p.name for p in s.base.parent.iterdir()} <= {"store", "io"}, what


@prop(80)
@given(
    where=st.sampled_from(
        ["workflow", "step", "agent", "turn", "space", "task", "note", "import_workflow"]
    ),
    value=HOSTILE_IDS,
)
async def test_a_hostile_id_is_refused_or_kept_inside_its_namespace(where: str, value: Any) -> None:
    async with stores() as s:
        await warm(s)
        before = await dump(s)
        ids = {"workflow": "wf2", "step": "s1", "agent": "a1"}
        try:
            if where in ids:
                ids[where] = value
                mem = s.rt.memory(ids["workflow"], ids["step"], ids["agent"])
                await mem.log_turn(1, "t", "a", "r")
                await mem.save_checkpoint("{}")
                assert mem.spaces is not None
                await mem.spaces.world_put("k", "v")
            elif where == "turn":
                await s.rt.memory("wf", "s1", "a1").log_turn(value, "t", "a", "r")
            elif where == "space":
                spaces = s.rt.memory("wf", "s1", "a1").spaces
                assert spaces is not None
                await spaces.put_space(value, {"k": 1})
            elif where == "task":
                spaces = s.rt.memory("wf", "s1", "a1").spaces
                assert spaces is not None
                try:
                    await spaces.tasks_complete(value)
                except SpaceError:
                    pass  # TaskNotFoundError: a documented refusal
            elif where == "note":
                working = s.rt.memory("wf", "s1", "a1").working
                assert working is not None
                try:
                    await working.write(value, "a note")
                except PAYLOAD_ERRORS:
                    pass  # entry_type must be a non-empty string: documented
            else:
                path = s.base.parent / "io" / "export.jsonl"
                await asyncio.to_thread(path.parent.mkdir)
                lines = [line async for line in export_workflow(s.rt, "wf")]
                await asyncio.to_thread(path.write_text, "\n".join(lines) + "\n")
                try:
                    await import_workflow(s.rt, path, workflow_id=value)
                except TransferError:
                    pass  # "" falls back to the header's id, which holds data
        except ID_ERRORS:
            after = await dump(s)
            if where != "import_workflow":
                assert_same(before, after, f"{where} id {value!r} refused")
            _assert_contained(s, after, f"{where} id {value!r}")
            return
        except SpaceError as exc:
            # put_space of a reserved name with the wrong kind is a documented refusal.
            assert where == "space", f"{where}: {exc!r}"
            return
        _assert_contained(s, await dump(s), f"{where} id {value!r} accepted")


# --- spaces -------------------------------------------------------------------------------


SPACE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("world_put"), st.one_of(ANY_TEXT, st.just("")), HOSTILE_VALUE),
        st.tuples(st.just("put_space"), st.sampled_from(["custom", "world", "tasks"]), SMALL),
        st.tuples(st.just("tasks_add"), st.one_of(ANY_TEXT, SMALL), st.none()),
        st.tuples(
            st.just("insert"),
            st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([True, 1.5, "0", None])),
            SMALL,
        ),
        st.tuples(
            st.just("restore"),
            st.sampled_from(["rev", "space_rev", "created_at", "updated_at"]),
            st.one_of(
                st.sampled_from(
                    [2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -1, 1.5, "7", None, True]
                ),
                st.integers(),
            ),
        ),
        st.tuples(st.just("delete_space"), st.sampled_from(["custom", "world", "nope"]), st.none()),
    ),
    min_size=1,
    max_size=4,
)


async def _space_op(spaces: Any, op: str, a: Any, b: Any) -> None:
    if op == "world_put":
        await spaces.world_put(a, b)
    elif op == "put_space":
        await spaces.put_space(a, b)
    elif op == "tasks_add":
        await spaces.tasks_add(a)
    elif op == "insert":
        await spaces.ensure_space("list", [])
        await spaces.insert("list", a, b)
    elif op == "restore":
        snap = await spaces.snapshot()
        if a == "space_rev":
            for space in snap["spaces"].values():
                space["rev"] = b
        else:
            snap[a] = b
        await spaces.restore(snap)
    else:
        await spaces.delete_space(a)


@prop(30)
@given(ops=SPACE_OPS)
async def test_hostile_space_operations_leave_the_spaces_intact_and_writable(
    ops: list[tuple[str, Any, Any]],
) -> None:
    # The real server: space revisions go through its Lua scripts (doubles).
    async with stores(real=True) as s:
        mem = await warm(s)
        spaces = mem.spaces
        assert spaces is not None
        for op, a, b in ops:
            before = await dump(s)
            try:
                await _space_op(spaces, op, a, b)
            except SPACE_ERRORS:
                if op != "insert":  # insert's ensure_space may have created the list
                    assert_same(before, await dump(s), f"{op} refused")
            snap = await spaces.snapshot()
            assert 0 <= snap["rev"] <= MAX_SAFE_INT, f"container rev {snap['rev']} after {op}"
            for name, space in snap["spaces"].items():
                assert 0 <= space["rev"] <= MAX_SAFE_INT, f"space {name} rev {space['rev']}"
        # Whatever happened, the agent can still write its spaces.
        await spaces.world_put("probe", {"still": "writable"})
        assert await spaces.world_get("probe") == {"still": "writable"}
        rev_before = (await spaces.snapshot())["rev"]
        await spaces.tasks_add("after the storm")
        assert (await spaces.snapshot())["rev"] == rev_before + 1


REVISIONS = st.one_of(
    st.sampled_from([2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -1, 1.5, "7", None, True]),
    st.integers(),
)


@prop(30)
@given(which=st.sampled_from(["rev", "space_rev", "created_at", "updated_at"]), value=REVISIONS)
async def test_a_restored_snapshot_with_hostile_revisions_leaves_the_spaces_writable(
    which: str, value: Any
) -> None:
    # A revision above 2**53 went through Redis' Lua doubles
    # and left the agent's spaces unwritable. The real server, for its Lua.
    async with stores(real=True) as s:
        mem = await warm(s)
        spaces = mem.spaces
        assert spaces is not None
        before = await dump(s)
        try:
            await _space_op(spaces, "restore", which, value)
        except SPACE_ERRORS:
            assert_same(before, await dump(s), f"restore with {which}={value!r} refused")
        snap = await spaces.snapshot()
        assert 0 <= snap["rev"] <= MAX_SAFE_INT, f"container rev {snap['rev']}"
        await spaces.world_put("probe", 1)
        await spaces.tasks_add("still writable")
        after = await spaces.snapshot()
        assert after["rev"] == snap["rev"] + 2, (snap["rev"], after["rev"])


# Every stored field has a documented size policy: none may hold more
# than the largest limit documented for any field, a checkpoint's 4 MiB
# (MAX_CHECKPOINT_BYTES), plus room for the record around it.
LARGEST_STORED_FIELD = MAX_CHECKPOINT_BYTES + 64 * 1024


async def _big_write(mem: Any, where: str, value: Any) -> None:
    if where == "world_put":
        await mem.spaces.world_put("big", value)
    elif where == "put_space":
        await mem.spaces.put_space("custom", {"big": value})
    elif where == "tasks_add":
        await mem.spaces.tasks_add(value if isinstance(value, str) else json.dumps(value))
    elif where == "note":
        await mem.working.write("note", value)
    elif where == "remember":
        await mem.remember(value if isinstance(value, str) else json.dumps(value))
    else:
        await mem.log_turn(2, "t", "a", value)


@prop(20)
@given(
    where=st.sampled_from(["world_put", "put_space", "tasks_add", "note", "remember", "turn"]),
    size=st.sampled_from([5_000_000, 10_000_000]),
    shape=st.sampled_from(["text", "list"]),
)
async def test_no_write_stores_a_field_larger_than_the_documented_maximum(
    where: str, size: int, shape: str
) -> None:
    value = long_text("b" * size, f"'b' * {size}") if shape == "text" else huge(size, "list")
    async with stores() as s:
        mem = await warm(s)
        before = await dump(s)
        try:
            await _big_write(mem, where, value)
        except SPACE_ERRORS:
            assert_same(before, await dump(s), f"{where} of {size} refused")
            return
        after = await dump(s)
        sizes = {k: len(repr(v[1])) for k, v in after["redis"].items()}
        sizes.update({k: len(v) for k, v in after["files"].items()})
        largest = max(sizes, key=lambda k: sizes[k])
        assert sizes[largest] <= LARGEST_STORED_FIELD, (
            f"{where} of a {size:,}-char {shape}: {largest!r} holds {sizes[largest]:,} bytes"
        )


# --- import files -------------------------------------------------------------------------


async def _good_export(s: Stores) -> list[dict[str, Any]]:
    src = s.rt.memory("src", "s1", "a1")
    for turn in (1, 2, 3):
        await src.log_turn(turn, f"thinks {turn}", {"tool": "t"}, f"ok {turn}")
    await src.save_checkpoint('{"next": 4}')
    assert src.spaces is not None and src.working is not None
    await src.spaces.world_put("where", "there")
    await src.working.write("note", "a note")
    return [json.loads(line) async for line in export_workflow(s.rt, "src")]


def _mutate(records: list[dict[str, Any]], how: str, pick: int, value: Any) -> list[str] | bytes:
    """The export with one hostile change (``pick`` chooses where)."""
    recs = json.loads(json.dumps(records))
    header, body = recs[0], recs[1:]
    ledger = [r for r in body if r["kind"] == "ledger"]
    target = body[pick % len(body)]
    if how == "truncate":
        lines = [json.dumps(r) for r in recs]
        i = 1 + pick % len(body)
        lines[i] = lines[i][: max(1, len(lines[i]) * (pick % 7 + 1) // 9)]
        return lines
    if how == "swap" and len(ledger) > 1:
        a, b = ledger[0], ledger[1 + pick % (len(ledger) - 1)]
        ia, ib = body.index(a), body.index(b)
        body[ia], body[ib] = b, a
    elif how == "ledger_id":
        ledger[pick % len(ledger)]["id"] = value
    elif how == "duplicate_turn":
        dup = json.loads(json.dumps(ledger[-1]))
        dup["id"] = "9999999999999-0"
        body.append(dup)
    elif how == "turn_field":
        ledger[pick % len(ledger)]["fields"][
            ["turn_id", "step_id", "agent_id", "tokens"][pick % 4]
        ] = value
    elif how == "checkpoint_rev":
        for r in body:
            if r["kind"] == "checkpoint":
                r["rev"] = value
    elif how == "spaces_rev":
        for r in body:
            if r["kind"] == "spaces":
                snap = r["snapshot"]
                if pick % 2:
                    snap["rev"] = value
                else:
                    for space in snap["spaces"].values():
                        space["rev"] = value
    elif how == "wrong_type":
        keys = sorted(k for k in target if k != "kind")
        target[keys[pick % len(keys)]] = value
    elif how == "header":
        header[["format", "version", "workflow_id", "namespace"][pick % 4]] = value
    elif how == "no_header":
        recs = body
    elif how == "not_utf8":
        return b"\xff\xfe" + "\n".join(json.dumps(r) for r in recs).encode()
    elif how == "garbage_line":
        return [
            *(json.dumps(r) for r in recs[: 1 + pick % len(recs)]),
            "[1, 2",
            *(json.dumps(r) for r in recs[1 + pick % len(recs) :]),
        ]
    elif how == "id_step":
        for r in body:
            if r["kind"] in ("checkpoint", "scratchpad", "goals"):
                r["step_id"] = value
    return [json.dumps(r) for r in ([header, *body] if how != "no_header" else recs)]


HOSTILE_JSON: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(
        [
            "0-0",
            "1-0-0",
            "abc",
            "18446744073709551616-0",
            "-1-0",
            "../x",
            "",
            2**53,
            2**63,
            2**64,
            -1,
            0,
            1.5,
            None,
            True,
            [],
            {},
            "x" * 300,
        ]
    ),
    st.integers(),
    ANY_TEXT,
)
MUTATIONS = st.sampled_from(
    [
        "none",
        "truncate",
        "swap",
        "ledger_id",
        "duplicate_turn",
        "turn_field",
        "checkpoint_rev",
        "spaces_rev",
        "wrong_type",
        "header",
        "no_header",
        "not_utf8",
        "garbage_line",
        "id_step",
    ]
)


def _write_file(path: Path, content: list[str] | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text("\n".join(content) + "\n", encoding="utf-8", errors="surrogatepass")


@prop(80)
@given(how=MUTATIONS, pick=st.integers(0, 1000), value=HOSTILE_JSON, force=st.booleans())
async def test_a_hostile_export_file_is_refused_whole_and_the_target_kept(
    how: str, pick: int, value: Any, force: bool
) -> None:
    async with stores() as s:
        records = await _good_export(s)
        good, bad = s.base / "good.jsonl", s.base / "bad.jsonl"
        await asyncio.to_thread(_write_file, good, [json.dumps(r) for r in records])
        await asyncio.to_thread(_write_file, bad, _mutate(records, how, pick, value))
        if force:  # the target already holds a workflow that --force would replace
            await import_workflow(s.rt, good, workflow_id="dst")
        before = await dump(s)
        try:
            await import_workflow(s.rt, bad, workflow_id="dst", force=force)
        except IMPORT_ERRORS:
            assert_same(before, await dump(s), f"import refused ({how})")
            # The refusal left nothing behind: the good file now goes in (no
            # "already holds data" for a workflow the refused import never wrote).
            await import_workflow(s.rt, good, workflow_id="dst", force=force)
            mem = s.rt.memory("dst", "s1", "a1")
            assert [t["turn_id"] for t in await mem.episodic.full_history()] == ["1", "2", "3"]  # type: ignore[union-attr]
            return
        # Accepted: the imported workflow is usable (ledger readable, appendable;
        # spaces writable; revisions in range).
        mem = s.rt.memory("dst", "s1", "a1")
        assert mem.episodic is not None and mem.spaces is not None
        await mem.log_turn(100, "after import", "a", "r")
        await mem.spaces.world_put("probe", 1)
        snap = await mem.spaces.snapshot()
        assert 0 <= snap["rev"] <= MAX_SAFE_INT
        record = await mem.load_checkpoint_record()
        assert record is None or 1 <= record.rev <= MAX_SAFE_INT
        raw = await s.redis.xrange(s.rt.keyspace.ledger("dst"))
        stream_ids = [tuple(map(int, i.decode().split("-"))) for i, _ in raw]
        assert stream_ids == sorted(stream_ids) and (0, 0) not in stream_ids


# --- secrets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Secret:
    """A secret shape: as a structure, as text, and the part that must never show."""

    name: str
    value: Any
    text: str
    needle: str


GITHUB_PAT = "github_pat_11AZQ3B5Y0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTu"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudC03In0.q3Vd0kWx9Lm2Pn8Rs5Tu7Yz1Ab4Cd6Ef"
PEM_BODY = "MIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQ4Xq9Hf3yYtQz8wTnR0uKs2Vb9XcL1mPd"
SECRETS = [
    Secret("password-key", {"password": "hunter2"}, 'password: "hunter2"', "hunter2"),
    Secret(
        "api_key-key",
        {"api_key": "Qm9vZ2llV29vZ2llMTIzNA"},
        "api_key=Qm9vZ2llV29vZ2llMTIzNA",
        "Qm9vZ2llV29vZ2llMTIzNA",
    ),
    Secret(
        "client_secret-key",
        {"client_secret": "cs7Hq2LmNp9Xr4Tz"},
        'client_secret = "cs7Hq2LmNp9Xr4Tz"',
        "cs7Hq2LmNp9Xr4Tz",
    ),
    Secret(
        "db_password-int", {"db_password": 918273645018}, "db_password=918273645018", "918273645018"
    ),
    Secret(
        "private_key-list",
        {"private_key": ["pk-part-VhX7q2Lw", "pk-part-Ry8s3Mn"]},
        "private_key: pk-part-VhX7q2Lw",
        "pk-part-VhX7q2Lw",
    ),
    Secret(
        "x-api-key-header",
        {"headers": {"X-Api-Key": "zq9Vv81KeyMaterialQ"}},
        "X-Api-Key: zq9Vv81KeyMaterialQ",
        "zq9Vv81KeyMaterialQ",
    ),
    Secret(
        "pem",
        {"key": f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"},
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        PEM_BODY,
    ),
    Secret(
        "stripe",
        {"charge": "sk_live_51HxQ2bK8vTn3Lm9Pq7Rs4Wd"},
        "using sk_live_51HxQ2bK8vTn3Lm9Pq7Rs4Wd for the charge",
        "sk_live_51HxQ2bK8vTn3Lm9Pq7Rs4Wd",
    ),
    Secret(
        "huggingface",
        {"model_auth": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456"},
        "HF=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456",
        "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456",
    ),
    Secret(
        "escaped-json-password",
        {"config": '{"password": "s3cr3t-Pa55w0rd"}'},
        json.dumps({"config": '{"password": "s3cr3t-Pa55w0rd"}'}),
        "s3cr3t-Pa55w0rd",
    ),
    Secret(
        "slack",
        {"slack": "xoxb-2048163264-1357924680123-AbCdEfGhIjKlMnOpQrStUvWx"},
        "token xoxb-2048163264-1357924680123-AbCdEfGhIjKlMnOpQrStUvWx",
        "AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    Secret(
        "github-fine-grained",
        {"gh": GITHUB_PAT},
        f"git push with {GITHUB_PAT}",
        "mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTu",
    ),
    Secret(
        "jwt",
        {"session": JWT},
        f"cookie={JWT}",
        "q3Vd0kWx9Lm2Pn8Rs5Tu7Yz1Ab4Cd6Ef",
    ),
    Secret(
        "secret-as-dict-key",
        {"sk_live_99KeyInAKeyPosition7Xq": "seen"},
        '{"sk_live_99KeyInAKeyPosition7Xq": "seen"}',
        "sk_live_99KeyInAKeyPosition7Xq",
    ),
    Secret(
        "authorization-basic",
        {"Authorization": "Basic YWdlbnQ6c3VwZXJzZWNyZXQ="},
        "Authorization: Basic YWdlbnQ6c3VwZXJzZWNyZXQ=",
        "YWdlbnQ6c3VwZXJzZWNyZXQ",
    ),
]


def _corpus() -> list[Secret]:
    """The shared secret corpus (``tests/secret_corpus.py``, ``SECRETS`` as
    ``(family, text, secret)``) when this tree has it: every shape in every place."""
    if importlib.util.find_spec("tests.secret_corpus") is None:
        return []
    corpus = importlib.import_module("tests.secret_corpus")
    return [
        Secret(f"corpus:{family}:{i}", {"output": text}, text, secret)
        for i, (family, text, secret) in enumerate(corpus.SECRETS)
    ]


CORPUS = _corpus()
ALL_SECRETS = SECRETS + CORPUS

PLACES = [
    "thought-text",
    "action-dict",
    "result-nested",
    "dict-key",
    "checkpoint",
    "world_put-value",
    "world_put-key",
    "task",
    "note",
    "remember",
    "summary",
]


async def place(mem: Any, secret: Secret, where: str, turn: int = 7) -> None:
    """Put ``secret`` into ``where`` through the public API (``turn``: the turn id
    a turn placement uses; a re-logged turn id would be a no-op)."""
    if where == "thought-text":
        await mem.log_turn(turn, f"I found {secret.text} in the output", "a", "r")
    elif where == "action-dict":
        await mem.log_turn(turn, "t", secret.value, "r")
    elif where == "result-nested":
        await mem.log_turn(turn, "t", "a", {"outputs": [{"tool": "env", "value": secret.value}]})
    elif where == "dict-key":
        # The text form as a key (a bare value such as "hunter2" is no secret shape).
        await mem.log_turn(turn, "t", "a", {secret.text: 1, "env": {secret.text: True}})
    elif where == "checkpoint":
        await mem.save_checkpoint(json.dumps({"memo": secret.value, "raw": secret.text}))
    elif where == "world_put-value":
        await mem.spaces.world_put("creds", secret.value)
    elif where == "world_put-key":
        await mem.spaces.world_put(secret.text, "x")
    elif where == "task":
        await mem.spaces.tasks_add(f"rotate {secret.text}")
    elif where == "note":
        await mem.working.write("note", {"found": secret.value, "text": secret.text})
    elif where == "remember":
        await mem.remember(f"the deploy uses {secret.text}")
    else:
        await mem.ltm.save_summary(f"The agent used {secret.text} to log in.")


async def outgoing(mem: Any) -> str:
    """What the memory hands back to a prompt: the bundle and recall results."""
    bundle = await mem.rehydrate_bundle()
    recalled = await mem.recall("deploy uses key password token")
    return json.dumps(bundle, default=str) + json.dumps([repr(r) for r in recalled])


@prop(100)
@given(secret=st.sampled_from(ALL_SECRETS), where=st.sampled_from(PLACES))
async def test_a_secret_placed_anywhere_is_never_stored_or_handed_out(
    secret: Secret, where: str
) -> None:
    async with stores() as s:
        mem = await warm(s)
        await place(mem, secret, where)
        stored = dump_text(await dump(s))
        assert secret.needle not in stored, f"{secret.name} via {where}: stored"
        assert secret.needle not in await outgoing(mem), f"{secret.name} via {where}: in the bundle"
        assert not any(secret.needle in line for line in s.log), (
            f"{secret.name} via {where}: logged"
        )


# The end-to-end run: every secret in every place at once, on the real server,
# with Athena (the in-repo fake over real HTTP) and the CLI reading it back.


@pytest.fixture
def athena() -> Any:
    server = FakeAthenaServer().start()
    yield server
    server.stop()


def _cli(s: Stores, *args: str) -> str:
    """Run ``python -m jarvismem ARGS`` on the example's namespace; stdout and stderr."""
    env = env_without_settings()
    env.update(
        REDIS_URL=REAL_REDIS_URL,
        JARVISMEM_NAMESPACE=s.namespace,
        STORAGE_BASE_PATH=str(s.blob_root),
        OUTBOX_PATH=str(s.base / "cli-outbox"),
        REDIS_CONNECT_RETRIES="0",
    )
    done = subprocess.run(
        [sys.executable, "-m", "jarvismem", "--env-file", os.devnull, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The command must have worked, or "no secret in its output" proves nothing.
    assert done.returncode == 0, f"jarvismem {' '.join(args)}: {done.stderr[-2000:]}"
    assert done.stdout.strip(), f"jarvismem {' '.join(args)} printed nothing"
    return done.stdout + done.stderr


async def test_no_secret_reaches_any_store_athena_the_llm_the_logs_or_the_cli_json(
    athena: FakeAthenaServer, fake_llm: FakeLLMServer
) -> None:
    client = AthenaClient(athena.url, max_retries=0)
    try:
        llm = {"llm_base_url": fake_llm.url, "llm_max_retries": 0}
        async with stores(real=True, athena=client, **llm) as s:
            mem = await warm(s)
            assert await s.rt.athena_memory("a1") is not None
            turn = 10
            for secret in ALL_SECRETS:
                for where in PLACES:
                    turn += 1
                    await place(mem, secret, where, turn)
            # A compaction sends the ledger to the LLM and stores what it answers
            # (the fake echoes the start of its input, so a leak could land in the summary too).
            assert (await mem.compact_now())["compacted"] is True
            llm_sent = json.dumps([r.json for r in fake_llm.completion_requests()])
            athena_mem = await s.rt.athena_memory("a1")
            assert athena_mem is not None
            await athena_mem.flush(timeout=10)
            sent = json.dumps([r.json for r in athena.requests], default=str)
            assert "REDACTED" in sent  # events did reach Athena
            stored = dump_text(await dump(s))
            prompt = await outgoing(mem)
            cli = await asyncio.gather(
                asyncio.to_thread(
                    _cli, s, "bundle", "--json", "--workflow", "wf", "--step", "s1", "--agent", "a1"
                ),
                asyncio.to_thread(_cli, s, "spaces", "--json", "--workflow", "wf", "--agent", "a1"),
                asyncio.to_thread(_cli, s, "tail", "--json", "--workflow", "wf", "-n", "100000"),
                asyncio.to_thread(_cli, s, "export", "--json", "--workflow", "wf"),
            )
            logs = "\n".join(s.log)
            leaks = [
                (secret.name, where)
                for secret in ALL_SECRETS
                for where, text in (
                    ("stored", stored),
                    ("prompt", prompt),
                    ("athena", sent),
                    ("llm", llm_sent),
                    ("logs", logs),
                    ("cli", "\n".join(cli)),
                )
                if secret.needle in text
            ]
            assert not leaks, f"secrets leaked (secret, where): {leaks}"
    finally:
        await client.aclose()


# --- a guard on the generators themselves -------------------------------------------------


def test_the_hostile_generators_build_what_they_promise() -> None:
    deep = nested(10_000, "mixed")
    depth = 0
    while isinstance(deep, list | dict):
        deep = deep[0] if isinstance(deep, list) else deep["k"]
        depth += 1
    assert depth == 10_000
    assert len(json.dumps(huge(3_000_000, "list"))) > 2_900_000
    with pytest.raises(ValueError):
        json.dumps(10**5000)  # the digit limit the odd leaves rely on
    assert len({s.needle for s in SECRETS}) == len(SECRETS)
