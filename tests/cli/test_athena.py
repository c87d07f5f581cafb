"""``jarvismem context`` and ``jarvismem search`` (Athena) through the real entry point."""

from __future__ import annotations

import asyncio
import json

from jarvismem.runtime import MemoryRuntime
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.cli.conftest import Cli


def test_context_without_athena_url_is_a_clear_error(cli: Cli) -> None:
    for cmd in (("context", "--agent", "a1"), ("search", "--agent", "a1", "--query", "q")):
        proc = cli.run(*cmd)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1] == (
            "jarvismem: error: Athena is not configured: set ATHENA_URL (see .env.example)"
        )


def test_reading_an_agent_that_never_wrote_creates_no_session(cli: Cli) -> None:
    with FakeAthenaServer() as athena:
        env = dict(cli.env, ATHENA_URL=athena.url)
        first = cli.run("context", "--agent", "nobody", "--json", env=env)
        assert first.returncode == 0, first.stderr
        ctx = json.loads(first.stdout)
        assert ctx["agent_id"] == "nobody" and ctx["short_term"] == []
        assert ctx["mid_term"] == [] and ctx["session_id"] == ""
        search = cli.run("search", "--agent", "nobody", "--query", "tides", "--json", env=env)
        assert search.returncode == 0, search.stderr
        assert json.loads(search.stdout)["results"] == []
        human = cli.run("context", "--agent", "nobody", env=env)
        assert "short-term events (0)" in human.stdout
        # Reads are reads: nothing is left behind on the server.
        assert athena.sessions_created == 0
        assert athena.requests_to("POST", "/api/v1/sessions") == []


async def test_context_and_search_use_the_agents_cached_session(cli: Cli) -> None:
    with FakeAthenaServer() as athena:
        settings = cli.runtime_settings().model_copy(update={"athena_url": athena.url})
        rt = await MemoryRuntime.from_env(settings)
        try:
            memory = await rt.athena_memory("a1")
            assert memory is not None
            await memory.record_observation("the tide turns at noon")
            await memory.flush(timeout=5.0)
        finally:
            await rt.close()
        assert athena.sessions_created == 1
        env = dict(cli.env, ATHENA_URL=athena.url)
        first = await asyncio.to_thread(cli.run, "context", "--agent", "a1", "--json", env=env)
        assert first.returncode == 0, first.stderr
        ctx = json.loads(first.stdout)
        assert [e["content"] for e in ctx["short_term"]] == ["the tide turns at noon"]
        search = await asyncio.to_thread(
            cli.run, "search", "--agent", "a1", "--query", "tides", "--json", env=env
        )
        assert search.returncode == 0, search.stderr
        # The session written with is the one read from, across processes.
        assert athena.sessions_created == 1
