"""Long-term memory: summary storage (Redis and blob copies, fallbacks) and compress."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.llm import LLMSummarizer
from jarvismem.errors import InvalidPayloadError
from jarvismem.keys import KeySpace
from jarvismem.testing.fake_llm import FakeLLMServer
from jarvismem.tiers import longterm
from jarvismem.tiers.longterm import SummaryProvenance, SummaryRecord, render_entry
from tests.tiers.conftest import TTL, RecordingSummarizer, make_ltm

# --- save / load -------------------------------------------------------------------------


async def test_save_then_load_returns_text_and_provenance(
    redis_client: Any, blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, blob_storage, keyspace, workflow_id)
    await ltm.save_summary("it rained", provenance={"from_id": "1-0", "to_id": "9-0", "turns": 4})
    assert await ltm.load_summary() == "it rained"
    record = await ltm.load_summary_record()
    assert record is not None
    assert (record.from_id, record.to_id, record.turns) == ("1-0", "9-0", 4)


async def test_save_writes_durable_blob_copy_and_meta(
    redis_client: Any, blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, blob_storage, keyspace, workflow_id)
    await ltm.save_summary("durable", provenance={"to_id": "5-0", "summarizer": "x"})
    assert await blob_storage.read(keyspace.ltm_blob(workflow_id)) == b"durable"
    meta = json.loads(await blob_storage.read(keyspace.ltm_meta_blob(workflow_id)))
    assert (meta["to_id"], meta["summarizer"]) == ("5-0", "x")
    # One provenance model: the meta blob carries exactly the record's provenance,
    # plus what fences saves (text hash, generation, operation id).
    assert set(meta) == set(SummaryProvenance.model_fields) | {"text_sha256", "gen", "op"}
    assert set(SummaryRecord.model_fields) == set(SummaryProvenance.model_fields) | {"text"}


async def test_redis_copy_has_the_ttl(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    await make_ltm(redis_client, local_blob, keyspace, workflow_id).save_summary("s")
    assert 0 < await redis_client.ttl(keyspace.ltm_summary(workflow_id)) <= TTL


async def test_redis_miss_falls_back_to_blob_and_repopulates_with_ttl(
    redis_client: Any, blob_storage: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, blob_storage, keyspace, workflow_id)
    await ltm.save_summary("from blob", provenance={"from_id": "1-0", "to_id": "2-0"})
    key = keyspace.ltm_summary(workflow_id)
    await redis_client.delete(key)  # as if the TTL had run out
    record = await ltm.load_summary_record()
    assert record is not None
    assert (record.text, record.to_id) == ("from blob", "2-0")
    assert await redis_client.hget(key, "text") == b"from blob"
    assert 0 < await redis_client.ttl(key) <= TTL


async def test_repopulate_does_not_overwrite_a_newer_redis_copy(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, local_blob, keyspace, workflow_id)
    await ltm.save_summary("old")
    key = keyspace.ltm_summary(workflow_id)
    await redis_client.delete(key)
    await redis_client.hset(key, mapping={"text": "newer"})
    # The Lua guard is what protects the race; call it the way load does.
    await ltm._repopulate(keys=[key], args=[TTL, "text", "old"])  # type: ignore[misc]
    assert await ltm.load_summary() == "newer"


async def test_garbage_blob_is_treated_as_absent(
    redis_client: Any,
    blob_storage: Any,
    keyspace: KeySpace,
    workflow_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await blob_storage.write(keyspace.ltm_blob(workflow_id), b"\xff\xfe\x00not utf8")
    ltm = make_ltm(redis_client, blob_storage, keyspace, workflow_id)
    with caplog.at_level(logging.WARNING):
        assert await ltm.load_summary() is None
    assert "not UTF-8" in caplog.text


async def test_garbage_meta_keeps_text_drops_provenance(
    redis_client: Any,
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ltm = make_ltm(redis_client, local_blob, keyspace, workflow_id)
    await ltm.save_summary("text", provenance={"to_id": "3-0"})
    await redis_client.delete(keyspace.ltm_summary(workflow_id))
    await local_blob.write(keyspace.ltm_meta_blob(workflow_id), b'{"turns": "many"}')
    with caplog.at_level(logging.WARNING):
        record = await ltm.load_summary_record()
    assert record is not None
    assert (record.text, record.to_id) == ("text", None)
    assert "provenance" in caplog.text


async def test_meta_of_another_text_is_not_trusted(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    await ltm.save_summary("first", provenance={"to_id": "3-0"})
    # A crash between the two blob writes leaves new text with the old meta.
    await local_blob.write(keyspace.ltm_blob(workflow_id), b"second")
    record = await ltm.load_summary_record()
    assert record is not None
    assert (record.text, record.to_id) == ("second", None)


async def test_blob_only_works_without_redis(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    await ltm.save_summary("only blob")
    assert await ltm.load_summary() == "only blob"


async def test_redis_only_works_without_blob(
    redis_client: Any, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, None, keyspace, workflow_id)
    await ltm.save_summary("only redis")
    assert await ltm.load_summary() == "only redis"


async def test_no_backends_is_a_no_op(keyspace: KeySpace, workflow_id: str) -> None:
    ltm = make_ltm(None, None, keyspace, workflow_id)
    await ltm.save_summary("nowhere")
    assert await ltm.load_summary() is None
    assert not ltm.active


async def test_non_string_summary_is_refused_before_writing(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(redis_client, local_blob, keyspace, workflow_id)
    with pytest.raises(InvalidPayloadError):
        await ltm.save_summary(b"bytes")  # type: ignore[arg-type]
    assert not await local_blob.exists(keyspace.ltm_blob(workflow_id))
    assert not await redis_client.exists(keyspace.ltm_summary(workflow_id))


async def test_summary_is_redacted_before_storing(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(
        redis_client, local_blob, keyspace, workflow_id, redactor=lambda s: s.replace("pw", "**")
    )
    await ltm.save_summary("the pw is here")
    assert await local_blob.read(keyspace.ltm_blob(workflow_id)) == b"the ** is here"
    assert await ltm.load_summary() == "the ** is here"


# --- compress -----------------------------------------------------------------------------


def turns(n: int, start: int = 1, width: int = 40) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{i}-0",
            "turn_id": str(i),
            "thought": f"t{i} " + "x" * width,
            "action": "a",
            "result": "r",
        }
        for i in range(start, start + n)
    ]


def test_render_entry_shape() -> None:
    entry = {"turn_id": "3", "thought": "think\nhard", "action": {"tool": "ls"}, "result": 42}
    assert render_entry(entry) == '[turn 3] think hard → {"tool": "ls"} = 42'


async def test_small_input_is_one_summarizer_call(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    fake_llm: FakeLLMServer,
    llm_summarizer: LLMSummarizer,
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    summary = await ltm.compress(turns(3), llm_summarizer, previous="earlier")
    assert summary.startswith("SUMMARY:")
    [request] = fake_llm.completion_requests()
    user = request.json["messages"][-1]["content"]
    assert "earlier" in user and "[turn 1]" in user and "[turn 3]" in user


async def test_large_input_is_map_reduced_in_bounded_calls(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    fake_llm: FakeLLMServer,
    llm_summarizer: LLMSummarizer,
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    entries = turns(20, width=80)  # ~100 chars per line, ~2000 chars in all
    await ltm.compress(entries, llm_summarizer, chunk_chars=500)
    requests = fake_llm.completion_requests()
    # 2000 chars in 500-char chunks: at least 4 map calls, then a final one.
    assert len(requests) >= 5
    for request in requests:
        new_text = request.json["messages"][-1]["content"].split("New entries:\n", 1)[1]
        assert len(new_text) <= 500


async def test_compress_output_is_bounded(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    summary = await ltm.compress(turns(30), RecordingSummarizer(), max_chars=300)
    assert len(summary) <= 300


async def test_compress_redacts_before_sending(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=lambda s: s.replace("x", "_"))
    summarizer = RecordingSummarizer()
    await ltm.compress(turns(1, width=5), summarizer)
    assert "x" not in summarizer.calls[0][0]


class GenerateClient:
    """JarvisCore's LLM client shape: ``async generate(prompt=, temperature=, max_tokens=)``."""

    def __init__(self, content: Any = "summary from generate") -> None:
        self.content = content
        self.calls: list[dict[str, Any]] = []

    async def generate(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"content": self.content, "tokens": {"input": 10, "output": 5, "total": 15}}


async def test_compress_takes_jarviscores_generate_client(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    # A JarvisCore caller passes its LLM client; before, compress called
    # llm.summarize(...) on it: AttributeError.
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    client = GenerateClient()
    summary = await ltm.compress(turns(3), client, previous="earlier")
    assert summary == "summary from generate"
    [call] = client.calls
    assert set(call) == {"prompt", "temperature", "max_tokens"}
    assert "earlier" in call["prompt"] and "[turn 3]" in call["prompt"]
    assert call["temperature"] == 0.3  # what JarvisCore's compress asks for


async def test_compress_calls_the_generate_of_a_magicmock_client(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    # JarvisCore's own compress test passes a MagicMock with an AsyncMock generate:
    # the mock also has a summarize() (every attribute exists), which must not win.
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    llm = MagicMock()
    llm.generate = AsyncMock(return_value={"content": "Summary text.", "tokens": {"total": 50}})
    summary = await ltm.compress([{"turn": 1, "thought": "analysing"}], llm)
    assert summary == "Summary text."
    llm.generate.assert_awaited_once()
    assert llm.generate.call_args.kwargs.get("temperature") == 0.3
    llm.summarize.assert_not_called()


async def test_compress_with_jarviscores_max_tokens_bounds_calls_and_summary(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    client = GenerateClient("y" * 5000)
    summary = await ltm.compress(turns(3), client, 100)  # positional, as JarvisCore's
    assert len(summary) <= 400
    assert client.calls[0]["max_tokens"] <= 100
    with pytest.raises(InvalidPayloadError, match="max_tokens"):
        await ltm.compress(turns(1), client, max_tokens=0)


@pytest.mark.parametrize("llm", [object(), "gpt-4", None], ids=["object", "str", "none"])
async def test_compress_refuses_an_llm_of_neither_shape_naming_both(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str, llm: Any
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    with pytest.raises(InvalidPayloadError, match=r"summarize\(.*generate\(") as caught:
        await ltm.compress(turns(1), llm)
    assert type(llm).__name__ in str(caught.value)


async def test_compress_renders_and_redacts_in_slices_the_loop_runs_between(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slice of zero yields after every batch: the count depends on the batch
    # size, not on the machine's speed.
    monkeypatch.setattr(longterm, "RENDER_SLICE_SECONDS", 0.0)
    redacted: list[str] = []

    def redactor(text: str) -> str:
        redacted.append(text)
        return text.replace("x", "_")

    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=redactor)
    summarizer = RecordingSummarizer()
    ticks = 0
    done = asyncio.Event()

    async def ticking() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(ticking())
    await ltm.compress(turns(40, width=5), summarizer)
    done.set()
    await ticker
    batches = -(-40 // longterm._RENDER_BATCH)
    assert ticks >= batches
    # Every entry was redacted once, one line each, none left out.
    assert sum(text.count("\n") + 1 for text in redacted) == 40
    sent = summarizer.calls[-1][0]
    assert "x" not in sent and all(f"[turn {i}]" in sent for i in range(1, 41))


async def test_a_blob_without_summary_is_remembered_for_a_bounded_time(
    redis_client: Any, local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    """A workflow not yet compacted has no summary: every bundle used to look for
    the blob copy too. The absence is remembered for BLOB_ABSENT_SECONDS; a save
    through the same object ends it, another process's save shows by the bound."""
    ltm = make_ltm(redis_client, local_blob, keyspace, workflow_id)
    reads: list[str] = []
    read = local_blob.read

    async def counting_read(path: str) -> bytes:
        reads.append(path)
        return await read(path)

    local_blob.read = counting_read  # type: ignore[method-assign]
    assert await ltm.load_summary() is None
    assert await ltm.load_summary() is None
    assert reads == [keyspace.ltm_blob(workflow_id)]
    # Our own save: seen at once, even from the blob when Redis lost its copy.
    await ltm.save_summary("ours")
    await redis_client.delete(keyspace.ltm_summary(workflow_id))
    assert await ltm.load_summary() == "ours"
    # Another process's save that reached the blob but not Redis (it died between
    # the two writes): hidden at most for the bound.
    other_wf = workflow_id + "-b"
    ltm = make_ltm(redis_client, local_blob, keyspace, other_wf)
    assert await ltm.load_summary() is None
    await make_ltm(redis_client, local_blob, keyspace, other_wf).save_summary("theirs")
    await redis_client.delete(keyspace.ltm_summary(other_wf))
    assert await ltm.load_summary() is None
    ltm._blob_absent_until -= longterm.BLOB_ABSENT_SECONDS + 1  # the bound has passed
    assert await ltm.load_summary() == "theirs"
    # strict reads (compaction's base) never trust the remembered absence.
    other = make_ltm(redis_client, local_blob, keyspace, workflow_id + "-c")
    assert await other.load_summary() is None
    await make_ltm(redis_client, local_blob, keyspace, workflow_id + "-c").save_summary("x")
    await redis_client.delete(keyspace.ltm_summary(workflow_id + "-c"))
    record = await other.load_summary_record(strict=True)
    assert record is not None and record.text == "x"


# --- redaction in the summary worker -------------------------------------------------------


def _secret_entries() -> list[dict[str, Any]]:
    from tests.secret_corpus import SECRETS

    return [
        {"id": f"{i}-0", "turn_id": str(i), "thought": text, "action": f"step {i}", "result": "ok"}
        for i, (_, text, _) in enumerate(SECRETS, 1)
    ]


class _LineRecorder:
    """A summarizer that records the text it is given and keeps every line."""

    name = "recorder"

    def __init__(self, worker: Any = None) -> None:
        self.worker = worker
        self.texts: list[str] = []

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        self.texts.append(text)
        return text[:max_chars]


async def test_a_truncated_private_key_does_not_swallow_the_next_turns(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    """The PEM pattern runs to the end of its text when the END line was cut off: each
    rendered entry is redacted alone, or it ran on into the next turns' lines."""
    from jarvismem.redaction import build_redactor

    body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
    entries = [
        {"id": "1-0", "turn_id": "1", "thought": f"-----BEGIN RSA PRIVATE KEY----- {body}"},
        {"id": "2-0", "turn_id": "2", "thought": "checked the deploy", "action": "next"},
        {"id": "3-0", "turn_id": "3", "thought": "-----END RSA PRIVATE KEY----- seen"},
    ]
    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=build_redactor())
    recorder = _LineRecorder()
    await ltm.compress(entries, recorder, max_chars=10**5)
    [text] = recorder.texts
    assert body not in text
    assert text.split("\n") == [
        "[turn 1] [REDACTED]",
        "[turn 2] checked the deploy → next",
        "[turn 3] -----END RSA PRIVATE KEY----- seen",
    ]


async def test_an_unbounded_summarizer_gets_the_page_in_one_call_a_bounded_one_in_chunks(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    ltm = make_ltm(None, local_blob, keyspace, workflow_id)
    entries = turns(20, width=200)
    bounded = _LineRecorder()
    await ltm.compress(entries, bounded, chunk_chars=1000, max_chars=10**5)
    unbounded = _LineRecorder()
    unbounded.bounded_input = False  # type: ignore[attr-defined]
    await ltm.compress(entries, unbounded, chunk_chars=1000, max_chars=10**5)
    assert len(bounded.texts) > 2 and max(map(len, bounded.texts[:-1])) <= 1000
    assert len(unbounded.texts) == 1
    assert unbounded.texts[0].count("[turn ") == 20


# Every line kept: the summary shows exactly the lines the summarizer was given.
_ALL = 10**6


async def test_the_worker_redacts_and_summarizes_as_the_loop_does(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jarvismem.backends.llm import ExtractiveSummarizer
    from jarvismem.backends.llm.worker import SummaryWorker
    from jarvismem.redaction import PatternRedactor, build_redactor
    from tests.secret_corpus import SECRETS

    # A key name of the user's own (REDACTION_KEYS): the worker must redact with it.
    redactor = build_redactor(("password", "api_key", "zebra_pin"))
    entries = [
        *_secret_entries(),
        {"id": "99-0", "turn_id": "99", "thought": "zebra_pin=9876543210abc", "action": "a"},
    ]
    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=redactor)
    here = await ltm.compress(entries, ExtractiveSummarizer(), chunk_chars=100, max_chars=_ALL)
    worker = SummaryWorker()
    try:
        # Prove the work left this process: the redactor here refuses to run.
        def refuse(self: PatternRedactor, text: str) -> str:
            raise AssertionError("redacted in-process")

        monkeypatch.setattr(PatternRedactor, "__call__", refuse)
        offloaded = ExtractiveSummarizer(offload=True, worker=worker)
        there = await ltm.compress(entries, offloaded, chunk_chars=100, max_chars=_ALL)
        assert worker.starts == 1
    finally:
        worker.close()
    assert there == here
    assert here.count("[turn ") == len(entries)  # every line kept, none chunked away
    assert "9876543210abc" not in there
    redacted_here = [s for _, _, s in SECRETS if s not in here]
    assert len(redacted_here) > len(SECRETS) // 2  # the comparison is not vacuous


async def test_a_failing_worker_leaves_redaction_and_summary_to_the_loop(
    local_blob: LocalBlobStorage,
    keyspace: KeySpace,
    workflow_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import sys

    from jarvismem.backends.llm import ExtractiveSummarizer
    from jarvismem.backends.llm.worker import SummaryWorker
    from jarvismem.redaction import build_redactor
    from tests.secret_corpus import SECRETS

    redactor = build_redactor()
    entries = _secret_entries()
    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=redactor)
    here = await ltm.compress(entries, ExtractiveSummarizer(), max_chars=_ALL)
    broken = SummaryWorker(command=[sys.executable, "-c", "import sys; sys.exit(1)"])
    with caplog.at_level(logging.WARNING):
        fallback = ExtractiveSummarizer(offload=True, worker=broken)
        there = await ltm.compress(entries, fallback, max_chars=_ALL)
    assert "compacting in-process" in caplog.text
    assert there == here
    for _, _, secret in SECRETS:
        assert secret not in there


async def test_a_redactor_the_worker_cannot_rebuild_runs_on_the_loop(
    local_blob: LocalBlobStorage, keyspace: KeySpace, workflow_id: str
) -> None:
    from jarvismem.backends.llm import ExtractiveSummarizer
    from jarvismem.backends.llm.worker import SummaryWorker

    # A custom callable has no REDACTION_KEYS to rebuild it from: the lines are
    # redacted here before any text leaves for the worker.
    ltm = make_ltm(None, local_blob, keyspace, workflow_id, redactor=lambda s: s.replace("x", "_"))
    worker = SummaryWorker()
    try:
        summary = await ltm.compress(
            turns(20, width=5), ExtractiveSummarizer(offload=True, worker=worker), max_chars=_ALL
        )
    finally:
        worker.close()
    assert "x" not in summary and "_____" in summary
