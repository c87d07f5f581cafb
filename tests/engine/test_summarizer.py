"""The runtime's own summarizer: made on first use, kept or made per use."""

from __future__ import annotations

from typing import Any

from jarvismem.backends.llm import LLMSummarizer
from jarvismem.engine.summarizer import OnDemandSummarizer
from jarvismem.settings import Settings


def _llm(settings: Settings, fake_llm: Any) -> Settings:
    return settings.model_copy(update={"llm_base_url": fake_llm.url, "llm_model": "m1"})


async def test_nothing_is_made_before_the_first_use(settings: Settings, fake_llm: Any) -> None:
    summarizer = OnDemandSummarizer(_llm(settings, fake_llm), keep=True)
    assert summarizer.made is None and summarizer.name == "llm:m1"
    await summarizer.aclose()
    assert not fake_llm.completion_requests()


async def test_a_kept_summarizer_is_made_once_and_closed_by_aclose(
    settings: Settings, fake_llm: Any
) -> None:
    summarizer = OnDemandSummarizer(_llm(settings, fake_llm), keep=True)
    assert await summarizer.summarize("the invoice was paid")
    made = summarizer.made
    assert isinstance(made, LLMSummarizer)
    await summarizer.summarize("the refund was sent", previous_summary="paid")
    assert summarizer.made is made and len(fake_llm.completion_requests()) == 2
    await summarizer.aclose()
    assert summarizer.made is None and made.client._http.is_closed


async def test_a_summarizer_made_per_use_is_closed_after_it(
    settings: Settings, fake_llm: Any
) -> None:
    summarizer = OnDemandSummarizer(_llm(settings, fake_llm), keep=False)
    async with summarizer.using() as made:
        assert isinstance(made, LLMSummarizer)
    assert made.client._http.is_closed and summarizer.made is None
    assert await summarizer.summarize("the invoice was paid")
    assert summarizer.name == "llm:m1"


def test_without_an_llm_it_is_the_extractive_summarizer(settings: Settings) -> None:
    assert OnDemandSummarizer(settings, keep=True).name == "extractive"


async def test_a_runtimes_compaction_redacts_the_rendered_entries_in_the_worker(
    fake_redis: Any, local_blob: Any, make_runtime: Any, monkeypatch: Any
) -> None:
    # The extractive summarizer's worker process redacts the rendered ledger entries
    # and summarizes them in one call (jarvismem.tiers.longterm.LongTermMemory.compress),
    # so the event loop does neither: the runtime's summarizer must lend its worker
    # and say it takes the page whole.
    from jarvismem.backends.llm.worker import SummaryWorker

    rt = make_runtime(redis=fake_redis, blob=local_blob)
    mem = rt.memory("wf-offload", "s1", "a1")
    for i in range(1, 13):
        await mem.log_turn(i, f"thought {i} password=hunter2{i}", "act", "result", 10)
    run = SummaryWorker.run
    calls: list[str] = []

    async def record(self: SummaryWorker, call: Any, *args: Any) -> Any:
        calls.append(f"{call.__name__} redact={args[3] is not None}")
        return await run(self, call, *args)

    monkeypatch.setattr(SummaryWorker, "run", record)
    result = await rt.workflow("wf-offload").compactor.compact()
    assert result.compacted and result.entries == 12
    assert calls == ["summarize redact=True"]
    summary = (await rt.workflow("wf-offload").ltm.read_base()).record
    assert summary is not None and "hunter2" not in summary.text
