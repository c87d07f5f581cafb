"""``jarvismem context`` and ``jarvismem search`` (Athena) through the real entry point."""

from __future__ import annotations

import json

from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.cli.conftest import Cli


def test_context_without_athena_url_is_a_clear_error(cli: Cli) -> None:
    for cmd in (("context", "--agent", "a1"), ("search", "--agent", "a1", "--query", "q")):
        proc = cli.run(*cmd)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1] == (
            "jarvismem: error: Athena is not configured: set ATHENA_URL (see .env.example)"
        )


def test_context_and_search_use_the_agents_cached_session(cli: Cli) -> None:
    with FakeAthenaServer() as athena:
        env = dict(cli.env, ATHENA_URL=athena.url)
        first = cli.run("context", "--agent", "a1", "--json", env=env)
        assert first.returncode == 0, first.stderr
        ctx = json.loads(first.stdout)
        assert ctx["agent_id"] == "a1" and ctx["short_term"] == []
        search = cli.run("search", "--agent", "a1", "--query", "tides", "--json", env=env)
        assert search.returncode == 0, search.stderr
        assert json.loads(search.stdout)["results"] == []
        human = cli.run("context", "--agent", "a1", env=env)
        assert "short-term events (0)" in human.stdout
        # Three commands, one session: the id is cached in Redis between processes.
        assert athena.sessions_created == 1
