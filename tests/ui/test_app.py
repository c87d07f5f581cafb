"""The inspector in a real browser: Debian's headless Chromium over real HTTP and real Redis.

Set ``JARVISMEM_UI_SCREENSHOTS=docs/img`` to save the pages shown (scripts/ui-screenshots).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jarvismem.runtime import MemoryRuntime
from tests.harness.redis_server import RedisServerProcess
from tests.ui.conftest import Serve, screenshot

pytestmark = pytest.mark.integration


async def until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll a browser-side condition without blocking the loop that serves the page."""
    deadline = time.monotonic() + timeout
    while True:
        if await asyncio.to_thread(check):
            return
        if time.monotonic() > deadline:
            raise AssertionError("the page did not show it in time")
        await asyncio.sleep(0.2)


def _rows(driver: Any, selector: str = "#timeline tbody tr.entry") -> list[str]:
    from selenium.webdriver.common.by import By

    return [row.text for row in driver.find_elements(By.CSS_SELECTOR, selector)]


async def _open(driver: Any, url: str) -> None:
    await asyncio.to_thread(driver.get, url)


async def test_follow_a_workflow_into_its_timeline_filter_and_watch_the_tail(
    real_runtime: Any, serve: Serve, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    rt = real_runtime
    for i in range(1, 10):
        agent = "planner" if i % 3 == 0 else "coder"
        await rt.memory("wf-browse", f"step-{i // 5}", agent).log_turn(
            i, f"thought {i} of {agent}", {"tool": "search", "q": f"q{i}"}, f"result {i}", 20
        )
    await rt.memory("wf-browse", "step-1", "planner").save_checkpoint('{"plan": ["a", "b"]}')
    await rt.memory("wf-other", "s", "a").log_turn(1, "elsewhere", "x", "y", 1)
    await rt.workflow("wf-browse").compactor.compact()
    await rt.memory("wf-browse", "step-2", "coder").log_turn(10, "after the summary", "x", "y", 1)

    async with serve(rt) as base:
        await _open(browser, base + "/")
        names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "a.wf")]
        assert set(names) == {"wf-browse", "wf-other"}
        screenshot(browser, "workflows")

        await asyncio.to_thread(browser.find_element(By.LINK_TEXT, "wf-browse").click)
        await until(lambda: len(_rows(browser)) == 10)
        assert browser.current_url == base + "/w/wf-browse"
        rows = _rows(browser)
        assert "thought 1 of coder" in rows[0] and "after the summary" in rows[-1]
        assert "summarized" in rows[0] and rows[-1].endswith("raw")
        screenshot(browser, "timeline")

        # The newest page, read backward from the end: the same ten turns, oldest first.
        await asyncio.to_thread(browser.find_element(By.ID, "newest").click)
        await until(lambda: "before=%2B" in browser.current_url)
        assert _rows(browser) == rows
        assert not browser.find_elements(By.ID, "older")
        await _open(browser, base + "/w/wf-browse")

        field = browser.find_element(By.ID, "f-agent")
        await asyncio.to_thread(field.send_keys, "planner")
        await asyncio.to_thread(browser.find_element(By.ID, "apply").click)
        await until(lambda: "agent=planner" in browser.current_url)
        await until(lambda: len(_rows(browser)) == 3)
        assert all("planner" in row for row in _rows(browser))

        # Logged after the page was opened: the live tail shows the planner's turn only.
        kernel = rt.memory("wf-browse", "step-2", "planner")
        await rt.memory("wf-browse", "step-2", "coder").log_turn(11, "coder again", "x", "y", 1)
        await kernel.log_turn(12, "a brand new planner thought", "x", "y", 1)
        await until(lambda: any("a brand new planner thought" in r for r in _rows(browser)))
        assert not any("coder again" in r for r in _rows(browser))
        assert len(_rows(browser)) == 4
        screenshot(browser, "timeline-live")

        await _open(browser, base + "/w/wf-browse/step/step-1?agent=planner")
        assert '"plan"' in browser.find_element(By.ID, "checkpoint").text
        assert "recent_turns" in browser.find_element(By.ID, "bundle").text
        screenshot(browser, "step")
        await _open(browser, base + "/w/wf-browse/summary")
        assert browser.find_element(By.ID, "summary-text").text.strip()
        screenshot(browser, "summary")


async def test_a_turn_queued_during_a_redis_outage_shows_as_queued(
    make_settings: Any, serve: Serve, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    server = RedisServerProcess(tmp_path / "private-redis", persistence=False)
    server.start()
    try:
        settings = make_settings(redis_url=server.url)
        kernel = await MemoryRuntime.from_env(settings)
        viewer = await MemoryRuntime.from_env(settings, background=False)
        try:
            mem = kernel.memory("wf-outage", "s1", "a1")
            await mem.log_turn(1, "before the outage", "x", "y", 1)
            server.kill()
            await mem.log_turn(2, "logged while Redis was down", "x", "y", 1)
            async with serve(viewer) as base:
                await _open(browser, base + "/health")
                counts = [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".queued-count")]
                assert counts and int(counts[0]) >= 1, counts
                screenshot(browser, "health-outage")
                await _open(browser, base + "/w/wf-outage")
                queued = _rows(browser, "#timeline tbody tr.queued")
                assert len(queued) == 1 and "logged while Redis was down" in queued[0]
                assert "queued in the local outbox" in queued[0]
                assert browser.find_element(By.ID, "unavailable").is_displayed()
                screenshot(browser, "timeline-outage")
        finally:
            await viewer.close()
            await kernel.close()
    finally:
        server.kill()


async def test_a_recall_query_shows_ranked_hits_with_scores(
    real_runtime: Any, serve: Serve, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    mem = real_runtime.memory("wf-recall", "s1", "a1")
    await mem.log_turn(1, "start", "x", "y", 1)
    await mem.remember("Deploys go through the staging cluster first", metadata={"kind": "fact"})
    await mem.remember("The user prefers concise answers in French", metadata={"kind": "pref"})
    await mem.remember("Invoices are due on the first Monday of the month")
    async with serve(real_runtime) as base:
        await _open(browser, base + "/w/wf-recall/recall/a1")
        box = browser.find_element(By.ID, "query")
        await asyncio.to_thread(box.send_keys, "how do deploys reach staging")
        await asyncio.to_thread(browser.find_element(By.ID, "run").click)
        await until(lambda: len(_rows(browser, "#hits tbody tr.hit")) >= 1)
        hits = _rows(browser, "#hits tbody tr.hit")
        assert "staging cluster" in hits[0]
        score = float(hits[0].split()[1])
        assert score > 0 and "lexical" in hits[0]
        assert all("recency" in hit for hit in hits[1:]), hits
        injected = browser.find_element(By.ID, "preflight").text
        assert "staging cluster" in injected and "how do deploys reach staging" in injected
        screenshot(browser, "recall")
