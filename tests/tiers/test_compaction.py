"""Compaction: the policy, the lock, rolling folds of the ledger into the summary,
background scheduling, and Redis failures surfacing as jarvismem errors."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.llm import LLMSummarizer
from jarvismem.errors import BackendUnavailableError, ConfigError, LockNotAcquiredError
from jarvismem.keys import KeySpace
from jarvismem.testing.fake_llm import FakeLLMServer
from jarvismem.tiers.compaction import CompactionPolicy, Compactor
from jarvismem.tiers.episodic import EpisodicLedger
from tests.tiers.conftest import TTL, RecordingSummarizer, make_ltm

# --- compaction ------------------------------------------------------------------------------


class Setup:
    def __init__(self, redis: Any, blob: Any, keyspace: KeySpace, wf: str) -> None:
        self.redis, self.keyspace, self.wf = redis, keyspace, wf
        # The workflow's ledger counts for compaction, as the runtime builds it.
        self.ledger = EpisodicLedger(
            redis, keyspace, wf, ttl_seconds=TTL, count_for_compaction=True
        )
        self.counters: tuple[int, int] | None = None
        self.ltm = make_ltm(redis, blob, keyspace, wf)
        self.summarizer = RecordingSummarizer()

    def compactor(self, **policy: Any) -> Compactor:
        defaults: dict[str, Any] = {"every_turns": 5, "token_threshold": 10**6, "page_size": 4}
        defaults.update(policy)
        return Compactor(
            self.redis,
            self.ltm,
            self.ledger,
            self.summarizer,
            self.keyspace,
            self.wf,
            CompactionPolicy(**defaults),
        )

    async def log(self, first: int, last: int, tokens: int = 0) -> list[str]:
        ids = []
        for i in range(first, last + 1):
            res = await self.ledger.append_turn(
                step_id="s1",
                agent_id="a1",
                turn_id=i,
                thought=f"thought {i}",
                action="act",
                result=f"result {i}",
                tokens=tokens,
            )
            ids.append(res.id)
            self.counters = res.counters
        return ids


@pytest.fixture
def setup(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> Setup:
    return Setup(redis_client, local_blob, keyspace, workflow_id)


def test_policy_due_at_n_turns() -> None:
    policy = CompactionPolicy(every_turns=3, token_threshold=10**6)
    assert [policy.is_due(n, 0) for n in (0, 2, 3, 4)] == [False, False, True, True]


async def test_each_new_turn_is_counted_by_its_append_and_a_duplicate_is_not(
    setup: Setup,
) -> None:
    seen = []
    for turn in (1, 2, 2, 3):  # turn 2 logged twice (a re-run after a crash)
        res = await setup.ledger.append_turn(
            step_id="s1",
            agent_id="a1",
            turn_id=turn,
            thought="t",
            action="a",
            result="r",
            tokens=40,
        )
        seen.append(res.counters)
    assert seen == [(1, 40), (2, 80), None, (3, 120)]
    state = await setup.compactor().state()
    assert (state["turns"], state["tokens"]) == (3, 120)


async def test_an_unsized_turn_counts_its_estimate(setup: Setup) -> None:
    await setup.ledger.append_turn(
        step_id="s1",
        agent_id="a1",
        turn_id=1,
        thought="x" * 10,
        action="y" * 4,
        result={"k": 1},
    )
    # ceil(10/4) + ceil(4/4) + ceil(len("{'k': 1}")/4)
    assert (await setup.compactor().state())["tokens"] == 3 + 1 + 2


async def test_note_counters_compacts_at_the_nth_turn(setup: Setup) -> None:
    compactor = setup.compactor(every_turns=3)
    await setup.log(1, 2)
    assert setup.counters is not None and compactor.note_counters(*setup.counters) is None
    await setup.log(3, 3)
    assert setup.counters is not None
    task = compactor.note_counters(*setup.counters)
    assert task is not None
    await task
    record = await setup.ltm.load_summary_record()
    assert record is not None and record.turns == 3


async def test_note_counters_compacts_at_the_token_threshold(setup: Setup) -> None:
    compactor = setup.compactor(every_turns=1000, token_threshold=100)
    await setup.log(1, 2, tokens=40)
    assert setup.counters is not None and compactor.note_counters(*setup.counters) is None
    await setup.log(3, 3, tokens=40)
    assert setup.counters == (3, 120)
    task = compactor.note_counters(*setup.counters)
    assert task is not None
    await task


def test_policy_from_settings() -> None:
    from jarvismem.settings import load_settings

    settings = load_settings(_env_file=None, compaction_every_turns=7, compaction_lock_ttl=9)
    policy = CompactionPolicy.from_settings(settings)
    assert (policy.every_turns, policy.lock_ttl) == (7, 9)


async def test_compact_saves_summary_with_provenance(setup: Setup) -> None:
    ids = await setup.log(1, 6)
    result = await setup.compactor().compact()
    assert (result.compacted, result.entries, result.from_id, result.to_id) == (
        True,
        6,
        ids[0],
        ids[-1],
    )
    record = await setup.ltm.load_summary_record()
    assert record is not None
    assert (record.from_id, record.to_id, record.turns) == (ids[0], ids[-1], 6)
    assert record.summarizer == "recording"
    assert [f"result {i}" in record.text for i in range(1, 7)] == [True] * 6


async def test_rolling_compaction_reads_only_new_entries(setup: Setup) -> None:
    first_ids = await setup.log(1, 3)
    await setup.compactor().compact()
    setup.summarizer.calls.clear()
    new_ids = await setup.log(4, 5)
    result = await setup.compactor().compact()
    sent = "\n".join(text for text, _ in setup.summarizer.calls)
    assert "result 4" in sent and "result 5" in sent
    assert "result 1" not in sent
    # Provenance keeps the first id of the whole rolling range.
    assert (result.from_id, result.to_id) == (first_ids[0], new_ids[-1])
    record = await setup.ltm.load_summary_record()
    assert record is not None and record.turns == 5
    assert [record.text.count(f"result {i}") for i in range(1, 6)] == [1] * 5


async def test_nothing_new_is_a_no_op(setup: Setup) -> None:
    await setup.log(1, 2)
    await setup.compactor().compact()
    result = await setup.compactor().compact()
    assert not result.compacted
    assert "no new" in result.reason


async def test_compaction_resets_counters(setup: Setup) -> None:
    compactor = setup.compactor()
    await setup.log(1, 3, tokens=10)
    assert (await compactor.state())["turns"] == 3
    await compactor.compact()
    state = await compactor.state()
    assert (state["turns"], state["tokens"]) == (0, 0)
    assert "last_compacted_at" in state


async def test_concurrent_compactions_run_exactly_one(setup: Setup) -> None:
    await setup.log(1, 3)
    setup.summarizer.gate = asyncio.Event()
    first = asyncio.create_task(setup.compactor().compact())
    await setup.summarizer.started.wait()  # the first one holds the lock now
    with pytest.raises(LockNotAcquiredError):
        await setup.compactor().compact()
    setup.summarizer.gate.set()
    assert (await first).compacted
    assert len(setup.summarizer.calls) == 1


async def test_lock_expires_after_a_crashed_holder(setup: Setup) -> None:
    await setup.log(1, 2)
    # A holder that died without releasing: its lock only has its TTL left.
    await setup.redis.set(setup.keyspace.ltm_lock(setup.wf), "dead-process", px=300)
    compactor = setup.compactor()
    with pytest.raises(LockNotAcquiredError):
        await compactor.compact()
    for _ in range(200):  # bounded wait for the TTL to run out
        if not await setup.redis.exists(setup.keyspace.ltm_lock(setup.wf)):
            break
        await asyncio.sleep(0.05)
    assert (await compactor.compact()).compacted


async def test_lock_is_released_after_compaction(setup: Setup) -> None:
    await setup.log(1, 2)
    await setup.compactor().compact()
    assert not await setup.redis.exists(setup.keyspace.ltm_lock(setup.wf))


async def test_failed_llm_keeps_the_old_summary(setup: Setup) -> None:
    await setup.log(1, 2)
    await setup.compactor().compact()
    before = await setup.ltm.load_summary_record()
    await setup.log(3, 4)
    setup.summarizer.fail = True
    compactor = setup.compactor()
    result = await compactor.compact()
    assert (result.compacted, result.failed) == (False, True)
    assert await setup.ltm.load_summary_record() == before
    assert "summarizer down" in (await compactor.state())["last_error"]
    assert not await setup.redis.exists(setup.keyspace.ltm_lock(setup.wf))


async def test_failed_real_llm_keeps_the_old_summary(
    setup: Setup, fake_llm: FakeLLMServer, llm_summarizer: LLMSummarizer
) -> None:
    await setup.ltm.save_summary("old summary")
    await setup.log(1, 2)
    fake_llm.mode = "error"
    setup.summarizer = llm_summarizer  # type: ignore[assignment]
    result = await setup.compactor().compact()
    assert result.failed
    assert await setup.ltm.load_summary() == "old summary"


async def test_progress_is_reported_per_page(setup: Setup) -> None:
    await setup.log(1, 6)
    seen: list[int] = []
    await setup.compactor(page_size=4).compact(progress=lambda done, _total: seen.append(done))
    assert seen == [4, 6]


async def test_note_counters_does_nothing_when_disabled(setup: Setup) -> None:
    compactor = setup.compactor(every_turns=1, enabled=False)
    assert compactor.note_counters(5, 5) is None


async def test_a_compactor_runs_one_background_task_and_a_second_one_compacts_nothing_more(
    setup: Setup,
) -> None:
    await setup.log(1, 2)
    setup.summarizer.gate = asyncio.Event()
    one, two = setup.compactor(every_turns=1), setup.compactor(every_turns=1)
    task = one.note_counters(2, 0)
    assert task is not None
    assert one.note_counters(2, 0) is None  # its own task still runs
    await setup.summarizer.started.wait()  # the first holds the workflow's lock now
    other = two.note_counters(2, 0)  # another runtime's compactor of the same workflow
    if other is not None:
        await other  # meets the lock and gives up, quietly
    setup.summarizer.gate.set()
    await task
    assert len(setup.summarizer.calls) == 1


async def test_background_failure_is_logged_not_raised(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    await setup.log(1, 2)
    setup.summarizer.fail = True
    compactor = setup.compactor(every_turns=1)
    task = compactor.note_counters(2, 0)
    assert task is not None
    with caplog.at_level(logging.WARNING):
        await task  # does not raise
    assert "summarizer down" in caplog.text


async def test_aclose_cancels_a_running_compaction(setup: Setup) -> None:
    await setup.log(1, 2)
    setup.summarizer.gate = asyncio.Event()
    compactor = setup.compactor(every_turns=1)
    task = compactor.note_counters(2, 0)
    assert task is not None
    await setup.summarizer.started.wait()
    await compactor.aclose()
    assert task.cancelled()
    assert await setup.ltm.load_summary_record() is None


# --- through the facade ---------------------------------------------------------------------------


async def test_log_turn_triggers_background_compaction_via_the_runtime(
    redis_client: Any,
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    tmp_path: Path,
    fake_llm: FakeLLMServer,
) -> None:
    from jarvismem.runtime import MemoryRuntime
    from jarvismem.settings import load_settings

    settings = load_settings(
        _env_file=None,
        jarvismem_namespace=keyspace.namespace,
        outbox_path=tmp_path / "outbox",
        compaction_every_turns=3,
        llm_base_url=fake_llm.url,
        llm_max_retries=0,
    )
    async with MemoryRuntime(settings, redis=redis_client, blob=local_blob) as runtime:
        mem = runtime.memory(workflow_id, "s1", "a1")
        for i in range(1, 4):
            await mem.log_turn(i, f"thought {i}", "act", f"result {i}")
        compactor = runtime._workflows[workflow_id].compactor
        assert compactor is not None
        await asyncio.gather(*compactor._tasks)
        bundle = await mem.rehydrate_bundle()
    assert bundle["ltm_summary"] is not None
    assert bundle["ltm_summary"].startswith("SUMMARY:")
    [request] = fake_llm.completion_requests()
    assert "[turn 3] thought 3 → act = result 3" in request.json["messages"][-1]["content"]
    await runtime.summarizer.aclose()  # type: ignore[attr-defined]


# --- Redis failures surface as jarvismem errors -------------------------------------------------


async def test_compaction_on_an_unreachable_redis_raises_backend_unavailable(
    unreachable_redis: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    setup = Setup(unreachable_redis, local_blob, keyspace, workflow_id)
    compactor = setup.compactor()
    with pytest.raises(BackendUnavailableError, match=f"compaction lock of {workflow_id}"):
        await compactor.compact()
    with pytest.raises(BackendUnavailableError, match=f"compaction state of {workflow_id}"):
        await compactor.state()


async def test_a_state_hash_redis_refuses_is_logged_when_recording_a_failure(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    await setup.log(1, 2)
    setup.summarizer.fail = True
    compactor = setup.compactor()
    await setup.redis.set(compactor.state_key, "not a hash")
    with caplog.at_level(logging.WARNING):
        result = await compactor.compact()
    assert result.failed
    # Translated at the edge: the log names jarvismem's reading of the refusal.
    assert "could not record the error" in caplog.text
    assert f"compaction state of {setup.wf}: Redis refused it" in caplog.text
    assert not await setup.redis.exists(setup.keyspace.ltm_lock(setup.wf))


# --- the default (extractive) summary says what it left out -----------------------


# One chunk per page; then chunks map-reduced (summary_chars below chunk_chars:
# a previous summary longer than a chunk is cut, and says so only as "[truncated]").
@pytest.mark.parametrize(("chunk_chars", "summary_chars"), [(12_000, 2_000), (1_500, 1_200)])
async def test_the_extractive_summary_accounts_for_every_turn_it_was_given(
    setup: Setup, chunk_chars: int, summary_chars: int
) -> None:
    import re

    from jarvismem.backends.llm.summarizers import ExtractiveSummarizer

    setup.summarizer = ExtractiveSummarizer()  # type: ignore[assignment]
    words = "alpha beta gamma delta billing deploy staging database cache queue".split()
    for t in range(1, 155):
        await setup.ledger.append_turn(
            step_id="s1",
            agent_id="a1",
            turn_id=t,
            thought=" ".join(words[(t * k) % len(words)] for k in range(1, 6)),
            action="act",
            result=f"result {t}",
        )
    result = await setup.compactor(
        page_size=50, chunk_chars=chunk_chars, summary_chars=summary_chars
    ).compact()
    record = await setup.ltm.load_summary_record()
    assert result.compacted and record is not None and record.turns == 154
    text = record.text
    kept = set(re.findall(r"\[turn (\d+)\]", text))
    omitted = sum(int(n) for n in re.findall(r" omitted: (\d+) turns?[\],]", text))
    assert omitted > 0 and len(kept) + omitted == 154


# --- cost: every entry read once, in small reads ------------------------------------------------


class CountingLedger:
    """The ledger, counting the XRANGE reads compaction makes and the entries they return."""

    def __init__(self, ledger: EpisodicLedger) -> None:
        self.ledger = ledger
        self.reads: list[int] = []

    async def range_after(self, after_id: str | None, count: int) -> list[dict[str, Any]]:
        page = await self.ledger.range_after(after_id, count)
        self.reads.append(len(page))
        return page


@pytest.mark.parametrize("turns", [7, 40])
async def test_a_compaction_reads_each_entry_once_in_reads_of_read_size(
    setup: Setup, turns: int
) -> None:
    # O(N): a compaction of N turns reads N entries (never a page twice), in
    # XRANGEs of at most read_size, and folds page_size of them per summarizer pass.
    await setup.log(1, turns)
    counting = CountingLedger(setup.ledger)
    compactor = setup.compactor(page_size=8, read_size=3)
    compactor.ledger = counting
    result = await compactor.compact()
    assert result.entries == turns
    assert sum(counting.reads) == turns
    assert max(counting.reads) <= 3
    # One summarizer call per page of 8 (the recording summarizer never map-reduces).
    assert len(setup.summarizer.calls) == -(-turns // 8)
    # A rolling compaction afterwards reads only what is new.
    await setup.log(turns + 1, turns + 2)
    counting.reads.clear()
    assert (await compactor.compact()).entries == 2
    assert sum(counting.reads) == 2


def test_policy_refuses_a_read_size_below_one() -> None:
    with pytest.raises(ConfigError):
        CompactionPolicy(read_size=0)


async def test_two_processes_count_into_one_total_and_either_compacts_when_it_is_due(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    """Two ledgers of one workflow (two processes) each append fewer turns than the
    policy; the counters are shared in Redis, so whichever append makes the sum
    due hands its compactor a due total."""
    one = Setup(redis_client, local_blob, keyspace, workflow_id)
    two = Setup(redis_client, local_blob, keyspace, workflow_id)
    compactors = one.compactor(every_turns=10), two.compactor(every_turns=10)
    tasks = []
    for i in range(1, 11):
        setup = (one, two)[i % 2]
        await setup.log(i, i)
        assert setup.counters is not None and setup.counters[0] == i
        task = compactors[i % 2].note_counters(*setup.counters)
        if task is not None:
            tasks.append(task)
            await task
    assert len(tasks) == 1  # the tenth turn, whichever process logged it
    record = await one.ltm.load_summary_record()
    assert record is not None and record.turns == 10
