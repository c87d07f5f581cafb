"""Fenced compaction: a compactor that outlived its lock never writes an older summary.

Two compactors of one workflow run against real Redis and real blob storage
(a local folder, then Azurite). The first one is stalled at the worst moment;
its lock runs out (the test deletes it, as the TTL would while the holder's
keep-alive cannot renew); a second compactor saves a newer summary; then the
first one wakes up. It must write nothing and say ``fenced``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from jarvismem.backends.blob.base import BlobVersion
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.errors import BackendRejectedError
from jarvismem.keys import KeySpace
from jarvismem.tiers.compaction import CompactionPolicy, CompactionResult, Compactor
from jarvismem.tiers.episodic import EpisodicLedger
from jarvismem.tiers.longterm import LongTermMemory
from tests.conftest import REAL_REDIS_URL
from tests.harness.netfaults import LostReplyProxy

TTL = 3600
REPO = Path(__file__).resolve().parents[2]


class Summarizer:
    """Summary = previous + new text; ``gate`` (when set) holds every call."""

    name = "recording"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.gate: asyncio.Event | None = None

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return "\n".join(p for p in (previous_summary, text) if p)[:max_chars]


class StalledBlob:
    """A blob storage whose writes stall until released (a slow or paused writer).

    Everything else goes straight to the real storage underneath.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hold: asyncio.Event | None = None
        self.reached = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        if_version: BlobVersion | None = None,
        if_absent: bool = False,
    ) -> BlobVersion:
        if self.hold is not None:
            self.reached.set()
            await self.hold.wait()
        version: BlobVersion = await self.inner.write(
            path, data, if_version=if_version, if_absent=if_absent
        )
        return version


class Workflow:
    """One workflow's ledger plus a way to make compactors, each with its own ltm."""

    def __init__(self, redis: Any, blob: Any, keyspace: KeySpace, wf: str) -> None:
        self.redis, self.blob, self.keyspace, self.wf = redis, blob, keyspace, wf
        self.ledger = EpisodicLedger(redis, keyspace, wf, ttl_seconds=TTL)

    def ltm(self, blob: Any = None, redis: Any = None) -> LongTermMemory:
        return LongTermMemory(
            redis or self.redis,
            blob if blob is not None else self.blob,
            self.keyspace,
            self.wf,
            ttl_seconds=TTL,
        )

    def compactor(
        self, ltm: LongTermMemory, summarizer: Summarizer, redis: Any = None
    ) -> Compactor:
        return Compactor(
            redis or self.redis,
            ltm,
            self.ledger,
            summarizer,
            self.keyspace,
            self.wf,
            CompactionPolicy(every_turns=5, token_threshold=10**6, page_size=100, lock_ttl=30),
        )

    async def log(self, first: int, last: int) -> list[str]:
        ids = []
        for i in range(first, last + 1):
            res = await self.ledger.append_turn(
                step_id="s1",
                agent_id="a1",
                turn_id=i,
                thought=f"thought {i}",
                action="act",
                result=f"result {i}",
            )
            ids.append(res.id)
        return ids

    async def expire_lock(self) -> None:
        """What the lock's TTL does to a holder that stalled and could not renew."""
        await self.redis.delete(self.keyspace.ltm_lock(self.wf))

    async def assert_summary_everywhere(self, text: str, to_id: str | None) -> None:
        """Redis, the blob pair, and a load after Redis lost its copy all hold ``text``."""
        record = await self.ltm().load_summary_record()
        assert record is not None
        assert (record.text, record.to_id) == (text, to_id)
        assert await self.blob.read(self.keyspace.ltm_blob(self.wf)) == text.encode()
        meta = json.loads(await self.blob.read(self.keyspace.ltm_meta_blob(self.wf)))
        assert meta["to_id"] == to_id
        await self.redis.delete(self.keyspace.ltm_summary(self.wf))  # TTL ran out / flushed
        again = await self.ltm().load_summary_record()
        assert again is not None
        assert (again.text, again.to_id) == (text, to_id)


@pytest.fixture
def flow(real_redis: Any, blob_storage: Any, keyspace: KeySpace, workflow_id: str) -> Workflow:
    return Workflow(real_redis, blob_storage, keyspace, workflow_id)


def assert_fenced(result: CompactionResult) -> None:
    assert not result.compacted
    assert result.fenced
    assert result.reason.startswith("fenced:")


async def test_compactor_stalled_between_lock_check_and_write_is_fenced(flow: Workflow) -> None:
    await flow.log(1, 3)
    stalled = StalledBlob(flow.blob)
    stalled.hold = asyncio.Event()
    a = flow.compactor(flow.ltm(blob=stalled), Summarizer())
    a_run = asyncio.create_task(a.compact())
    await stalled.reached.wait()  # A checked its lock and is about to write
    await flow.expire_lock()

    ids = await flow.log(4, 5)
    b_result = await flow.compactor(flow.ltm(), Summarizer()).compact()
    assert b_result.compacted and b_result.to_id == ids[-1]
    b_text = await flow.ltm().load_summary()
    assert b_text is not None and "result 5" in b_text

    stalled.hold.set()
    assert_fenced(await a_run)
    await flow.assert_summary_everywhere(b_text, ids[-1])


async def test_compactor_stalled_in_the_summarizer_past_its_lock_is_fenced(
    flow: Workflow,
) -> None:
    await flow.log(1, 3)
    slow = Summarizer()
    slow.gate = asyncio.Event()
    a_run = asyncio.create_task(flow.compactor(flow.ltm(), slow).compact())
    await slow.started.wait()
    await flow.expire_lock()

    ids = await flow.log(4, 5)
    assert (await flow.compactor(flow.ltm(), Summarizer()).compact()).compacted
    b_text = await flow.ltm().load_summary()
    assert b_text is not None

    slow.gate.set()
    assert_fenced(await a_run)
    await flow.assert_summary_everywhere(b_text, ids[-1])


async def test_a_user_save_during_compaction_fences_the_compactor(flow: Workflow) -> None:
    await flow.log(1, 3)
    slow = Summarizer()
    slow.gate = asyncio.Event()
    a = flow.compactor(flow.ltm(), slow)
    a_run = asyncio.create_task(a.compact())
    await slow.started.wait()  # A holds its lock the whole time: only the save fences it

    await flow.ltm().save_summary("written by the user", provenance={"to_id": "1-0"})
    slow.gate.set()
    assert_fenced(await a_run)
    await flow.assert_summary_everywhere("written by the user", "1-0")


async def test_compaction_after_a_fenced_run_builds_on_the_newest_summary(
    flow: Workflow,
) -> None:
    await flow.log(1, 2)
    slow = Summarizer()
    slow.gate = asyncio.Event()
    a_run = asyncio.create_task(flow.compactor(flow.ltm(), slow).compact())
    await slow.started.wait()
    await flow.ltm().save_summary("user summary", provenance={"to_id": "1-0"})
    slow.gate.set()
    assert_fenced(await a_run)

    ids = await flow.log(3, 3)
    result = await flow.compactor(flow.ltm(), Summarizer()).compact()
    assert result.compacted and result.to_id == ids[-1]
    text = await flow.ltm().load_summary()
    assert text is not None and text.startswith("user summary")


class ReplayingBlob(StalledBlob):
    """A blob storage whose every write is sent twice, as a client does when the
    reply of a write that landed was lost: the second, conditional on the old
    version, fails its condition against the first."""

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        if_version: BlobVersion | None = None,
        if_absent: bool = False,
    ) -> BlobVersion:
        await self.inner.write(path, data, if_version=if_version, if_absent=if_absent)
        version: BlobVersion = await self.inner.write(
            path, data, if_version=if_version, if_absent=if_absent
        )
        return version


async def test_a_compaction_whose_blob_writes_are_replayed_still_saves(flow: Workflow) -> None:
    ids = await flow.log(1, 3)
    ltm = flow.ltm(blob=ReplayingBlob(flow.blob))
    await ltm.save_summary("before", provenance={"to_id": "1-0"})
    result = await flow.compactor(ltm, Summarizer()).compact()
    assert result.compacted and not result.fenced
    text = await flow.ltm().load_summary()
    assert text is not None and text.startswith("before")
    await flow.assert_summary_everywhere(text, ids[-1])


# A compactor in its own process that SIGSTOPs itself at its first blob write:
# after its last lock check, before anything is written. Its keep-alive stops
# with it, so its lock really expires by its TTL.
_STOPPING_CHILD = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys

    import redis.asyncio as aioredis

    from jarvismem.backends.blob.local import LocalBlobStorage
    from jarvismem.keys import KeySpace
    from jarvismem.tiers.compaction import CompactionPolicy, Compactor
    from jarvismem.tiers.episodic import EpisodicLedger
    from jarvismem.tiers.longterm import LongTermMemory


    class StopAtFirstWrite(LocalBlobStorage):
        stopped = False

        async def write(self, path, data, **kw):
            if not self.stopped:
                self.stopped = True
                print("stalled", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            return await super().write(path, data, **kw)


    class Echo:
        name = "echo"

        async def summarize(self, text, *, previous_summary=None, max_chars=4000):
            return "\\n".join(p for p in (previous_summary, text) if p)[:max_chars]


    async def main(url, namespace, wf, root):
        r = aioredis.Redis.from_url(url)
        ks = KeySpace(namespace)
        ltm = LongTermMemory(r, StopAtFirstWrite(root), ks, wf, ttl_seconds=3600)
        ledger = EpisodicLedger(r, ks, wf, ttl_seconds=3600)
        policy = CompactionPolicy(lock_ttl=1.0, page_size=100)
        result = await Compactor(r, ltm, ledger, Echo(), ks, wf, policy).compact()
        print(json.dumps(result.as_dict()), flush=True)
        await r.aclose()

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_a_sigstopped_compactor_process_is_fenced_after_its_lock_expires(
    real_redis: Any, keyspace: KeySpace, workflow_id: str, tmp_path: Path
) -> None:
    root = tmp_path / "blobs"
    flow = Workflow(real_redis, LocalBlobStorage(root), keyspace, workflow_id)
    await flow.log(1, 3)
    args = [REAL_REDIS_URL, keyspace.namespace, workflow_id, str(root)]
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _STOPPING_CHILD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"stalled"
        lock = keyspace.ltm_lock(workflow_id)
        for _ in range(400):  # bounded wait for the TTL to run out
            if not await real_redis.exists(lock):
                break
            await asyncio.sleep(0.05)
        ids = await flow.log(4, 5)
        b = await flow.compactor(flow.ltm(), Summarizer()).compact()
        assert b.compacted and b.to_id == ids[-1]
        b_text = await flow.ltm().load_summary()
        assert b_text is not None

        os.kill(child.pid, signal.SIGCONT)
        out, _ = await asyncio.wait_for(child.communicate(), timeout=60)
        assert child.returncode == 0
        assert_fenced(CompactionResult(**json.loads(out)))
        await flow.assert_summary_everywhere(b_text, ids[-1])
    finally:
        if child.returncode is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            await child.wait()


async def test_a_save_that_reached_only_the_blob_is_built_on_not_lost(flow: Workflow) -> None:
    ltm = flow.ltm()
    await ltm.save_summary("base")
    ids = await flow.log(1, 3)
    # A compactor writes its blob copy, then is fenced at the Redis step (as if
    # it had died there): the blob is one generation ahead of Redis.
    lock = flow.keyspace.ltm_lock(flow.wf)
    await flow.redis.set(lock, "another-compactor")
    outcome = await ltm.save_fenced(
        "base + 1..3",
        provenance={"to_id": ids[-1]},
        base=await ltm.read_base(),
        lock_key=lock,
        token="mine",
    )
    assert not outcome.saved
    assert await ltm.load_summary() == "base"  # Redis: the last copy saved in full
    await flow.redis.delete(lock)

    more = await flow.log(4, 4)
    result = await flow.compactor(flow.ltm(), Summarizer()).compact()
    # Built on the newer blob copy: only entry 4 is new to it.
    assert result.compacted and result.entries == 1 and result.to_id == more[-1]
    text = await flow.ltm().load_summary()
    assert text is not None and text.startswith("base + 1..3") and "result 4" in text
    await flow.assert_summary_everywhere(text, more[-1])


# --- user saves: last writer wins, in the same order in both copies --------------------


async def test_concurrent_user_saves_leave_both_copies_on_the_same_winner(
    flow: Workflow,
) -> None:
    texts = [f"summary {i}" for i in range(6)]
    await asyncio.gather(*(flow.ltm().save_summary(t) for t in texts))
    in_redis = await flow.redis.hget(flow.keyspace.ltm_summary(flow.wf), "text")
    in_blob = await flow.blob.read(flow.keyspace.ltm_blob(flow.wf))
    assert in_redis == in_blob and in_blob.decode() in texts
    meta = json.loads(await flow.blob.read(flow.keyspace.ltm_meta_blob(flow.wf)))
    assert meta["gen"] == len(texts)  # each save got its own generation


async def test_a_user_save_lands_when_the_blob_copy_went_back_in_time(flow: Workflow) -> None:
    ltm = flow.ltm()
    await ltm.save_summary("one")
    old_text = await flow.blob.read(flow.keyspace.ltm_blob(flow.wf))
    old_meta = await flow.blob.read(flow.keyspace.ltm_meta_blob(flow.wf))
    await ltm.save_summary("two")
    await ltm.save_summary("three")
    # The blob storage is restored from a backup taken after "one".
    await flow.blob.write(flow.keyspace.ltm_blob(flow.wf), old_text)
    await flow.blob.write(flow.keyspace.ltm_meta_blob(flow.wf), old_meta)
    await ltm.save_summary("four")
    await flow.assert_summary_everywhere("four", None)


async def test_a_user_save_lands_when_the_blob_copy_was_lost(flow: Workflow) -> None:
    ltm = flow.ltm()
    for text in ("one", "two", "three"):
        await ltm.save_summary(text)
    await flow.blob.delete(flow.keyspace.ltm_blob(flow.wf))
    await flow.blob.delete(flow.keyspace.ltm_meta_blob(flow.wf))
    await ltm.save_summary("four")
    await flow.assert_summary_everywhere("four", None)


async def test_redis_refusing_the_summary_is_a_jarvismem_error(
    redis_client: Any, local_blob_storage: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = Workflow(redis_client, local_blob_storage, keyspace, workflow_id).ltm()
    await redis_client.set(keyspace.ltm_summary(workflow_id), "not a hash")
    with pytest.raises(BackendRejectedError):
        await ltm.save_summary("text")
    with pytest.raises(BackendRejectedError):
        await ltm.load_summary_record(strict=True)
    # Not strict: read past Redis to the blob copy the save wrote first.
    assert await ltm.load_summary() == "text"


async def test_a_ledger_redis_refuses_to_read_is_a_jarvismem_error_in_compaction(
    redis_client: Any, local_blob_storage: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    """Found by the checker's soak: a ledger page read escaped compact() as redis-py's error."""
    flow = Workflow(redis_client, local_blob_storage, keyspace, workflow_id)
    await redis_client.set(keyspace.ledger(workflow_id), "not a stream")  # XRANGE: WRONGTYPE
    compactor = flow.compactor(flow.ltm(), Summarizer())
    with pytest.raises(BackendRejectedError):
        await compactor.compact()
    assert not await redis_client.exists(keyspace.ltm_lock(workflow_id))  # released


# --- the Redis write alone --------------------------------------------------------------


@pytest.fixture
def redis_only(redis_client: Any, keyspace: KeySpace, workflow_id: str) -> Workflow:
    """Redis without a blob copy: the script's conditions are all that fence."""
    flow = Workflow(redis_client, None, keyspace, workflow_id)
    return flow


async def test_fenced_write_needs_the_lock_token(redis_only: Workflow) -> None:
    ltm = redis_only.ltm()
    lock = redis_only.keyspace.ltm_lock(redis_only.wf)
    await ltm.save_summary("current", provenance={"to_id": "5-0"})
    base = await ltm.read_base()
    await redis_only.redis.set(lock, "someone-else")
    outcome = await ltm.save_fenced(
        "stale", provenance={"to_id": "9-0"}, base=base, lock_key=lock, token="mine"
    )
    assert not outcome.saved and "lock" in outcome.reason
    assert await ltm.load_summary() == "current"


async def test_fenced_write_needs_to_id_to_move_forward(redis_only: Workflow) -> None:
    ltm = redis_only.ltm()
    lock = redis_only.keyspace.ltm_lock(redis_only.wf)
    await redis_only.redis.set(lock, "mine")
    await ltm.save_summary("current", provenance={"to_id": "1700000000000-2"})
    base = await ltm.read_base()
    for stale_to in ("1700000000000-2", "1700000000000-1", "999999999999-9"):
        outcome = await ltm.save_fenced(
            "stale", provenance={"to_id": stale_to}, base=base, lock_key=lock, token="mine"
        )
        assert not outcome.saved and outcome.reason.startswith("fenced:")
    assert await ltm.load_summary() == "current"
    # Numeric, not text order: "10...-0" is after "9...-9".
    outcome = await ltm.save_fenced(
        "newer", provenance={"to_id": "1700000000000-10"}, base=base, lock_key=lock, token="mine"
    )
    assert outcome.saved
    assert await ltm.load_summary() == "newer"


async def test_fenced_write_refuses_a_base_older_than_the_stored_summary(
    redis_only: Workflow,
) -> None:
    ltm = redis_only.ltm()
    lock = redis_only.keyspace.ltm_lock(redis_only.wf)
    await redis_only.redis.set(lock, "mine")
    base = await ltm.read_base()  # nothing stored yet
    await ltm.save_summary("user's", provenance={"to_id": "1-0"})
    outcome = await ltm.save_fenced(
        "compacted", provenance={"to_id": "5-0"}, base=base, lock_key=lock, token="mine"
    )
    assert not outcome.saved and "newer summary" in outcome.reason
    assert await ltm.load_summary() == "user's"


# --- a retry after a lost reply ---------------------------------------------------------


@pytest.fixture
async def proxied_redis(real_redis: Any) -> AsyncIterator[tuple[Any, LostReplyProxy]]:
    parts = urlsplit(REAL_REDIS_URL)
    proxy = await LostReplyProxy(parts.hostname or "127.0.0.1", parts.port or 6379).start()
    port = proxy.port
    client = aioredis.Redis(
        host="127.0.0.1",
        port=port,
        db=int((parts.path or "/0").lstrip("/") or 0),
        retry=Retry(NoBackoff(), 2),
        retry_on_error=[RedisConnectionError],
    )
    yield client, proxy
    await client.aclose()
    await proxy.close()


async def test_a_retried_fenced_save_sees_its_own_write_as_success(
    real_redis: Any,
    proxied_redis: tuple[Any, LostReplyProxy],
    local_blob_storage: Any,
    keyspace: KeySpace,
    workflow_id: str,
) -> None:
    client, proxy = proxied_redis
    flow = Workflow(real_redis, local_blob_storage, keyspace, workflow_id)
    ids = await flow.log(1, 3)
    ltm = flow.ltm(redis=client)
    proxy.lose_next_reply(ltm._save.sha.encode())  # type: ignore[union-attr]
    result = await flow.compactor(ltm, Summarizer(), redis=client).compact()
    assert proxy.lost == 1  # the save script ran, its reply was lost, it was retried
    assert result.compacted and result.to_id == ids[-1]
    raw = await real_redis.hgetall(keyspace.ltm_summary(workflow_id))
    assert raw[b"gen"] == b"1"  # applied once
    assert raw[b"to_id"] == ids[-1].encode()


async def test_a_retried_settle_subtracts_the_covered_turns_once(
    real_redis: Any,
    proxied_redis: tuple[Any, LostReplyProxy],
    local_blob_storage: Any,
    keyspace: KeySpace,
    workflow_id: str,
) -> None:
    client, proxy = proxied_redis
    flow = Workflow(real_redis, local_blob_storage, keyspace, workflow_id)
    await flow.log(1, 3)
    compactor = flow.compactor(flow.ltm(redis=client), Summarizer(), redis=client)
    # Five turns counted, three of them in the ledger: two remain after compaction.
    await real_redis.hset(compactor.state_key, mapping={"turns": 5, "tokens": 0})
    proxy.lose_next_reply(compactor._settle.sha.encode())
    result = await compactor.compact()
    assert proxy.lost == 1 and result.compacted and result.entries == 3
    assert (await compactor.state())["turns"] == 2  # subtracted once, not twice


async def test_a_retried_lock_acquire_finds_its_own_lock(
    real_redis: Any,
    proxied_redis: tuple[Any, LostReplyProxy],
    local_blob_storage: Any,
    keyspace: KeySpace,
    workflow_id: str,
) -> None:
    client, proxy = proxied_redis
    flow = Workflow(real_redis, local_blob_storage, keyspace, workflow_id)
    await flow.log(1, 2)
    compactor = flow.compactor(flow.ltm(redis=client), Summarizer(), redis=client)
    # The first command on the lock key: taking it.
    proxy.lose_next_reply(keyspace.ltm_lock(workflow_id).encode())
    result = await compactor.compact()
    assert proxy.lost == 1 and result.compacted
    assert not await real_redis.exists(keyspace.ltm_lock(workflow_id))


@pytest.fixture
def local_blob_storage(tmp_path: Path) -> LocalBlobStorage:
    return LocalBlobStorage(tmp_path / "blobs")
