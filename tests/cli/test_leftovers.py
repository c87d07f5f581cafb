"""``jarvismem outbox replay``: a leftover queued under another address lands exactly once.

A process that reached the server as ``localhost`` queues turns while it is
down; the server comes back and every later process is configured with
``127.0.0.1``, so its outboxes have another name and nothing replays the
leftover by itself. ``status`` warns and prints the command; the command
replays it once (twice, or two at a time, change nothing), refuses another
server without ``--force``, and rejects ids outside the outbox folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.redis_connect import create_redis
from jarvismem.runtime import Lifecycle, MemoryRuntime
from tests.cli.conftest import clean_env
from tests.conftest import Factory
from tests.harness.redis_server import RedisServerProcess

pytestmark = pytest.mark.integration

QUEUED = 5


class Leftover:
    """Runs the CLI against the test's private server, outbox folder and namespace."""

    def __init__(self, tmp_path: Path, namespace: str, port: int) -> None:
        self.env = clean_env(tmp_path)
        self.env["STORAGE_BACKEND"] = "none"
        self.env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
        self.cwd = tmp_path
        self.namespace = namespace
        self.url = f"redis://127.0.0.1:{port}/0"

    def run(self, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "jarvismem", "--env-file", os.devnull]
        argv += ["--namespace", self.namespace, "--redis-url", url or self.url, *args]
        return subprocess.run(
            argv, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=120
        )

    async def arun(self, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.run, *args, url=url)


@pytest.fixture
async def leftover(
    tmp_path: Path,
    workflow_id: str,
    redis_server: RedisServerProcess,
    make_settings: Factory,
    make_runtime: Factory,
) -> tuple[Leftover, str]:
    """Turn 1 logged live and turns 2..6 queued by a ``localhost`` process; server back up.

    Returns the CLI runner and the leftover's path as ``status`` lists it.
    """
    settings = make_settings(
        redis_url=f"redis://localhost:{redis_server.port}/0",
        storage_backend="none",
        tier_timeout_episodic=0.5,
        redis_connect_retries=0,
    )
    rt: MemoryRuntime = make_runtime(
        settings=settings, redis=create_redis(settings), lifecycle=Lifecycle(owns_clients=True)
    )
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")
    redis_server.kill()
    for turn in range(2, 2 + QUEUED):
        await mem.log_turn(turn, "t", "a", "r")
    writer = rt.workflow(workflow_id).redis_writer
    assert writer is not None and writer.health()["pending"] == QUEUED
    root = await asyncio.to_thread(Path(settings.outbox_path).resolve)
    path = writer.outbox.path.relative_to(root)
    await rt.close()  # that process is gone; its outbox stays
    redis_server.start()
    cli = Leftover(tmp_path, settings.jarvismem_namespace, redis_server.port)
    cli.env["OUTBOX_PATH"] = str(settings.outbox_path)
    return cli, str(path)


async def ledger_turns(cli: Leftover, workflow_id: str) -> list[str]:
    done = await cli.arun("tail", "--workflow", workflow_id, "-n", "100", "--json")
    assert done.returncode == 0, done.stderr
    return [entry["turn_id"] for entry in json.loads(done.stdout)]


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_status_warns_and_replay_lands_every_record_exactly_once(
    leftover: tuple[Leftover, str], workflow_id: str
) -> None:
    cli, path = leftover
    status = await cli.arun("status", "--json")
    health = json.loads(status.stdout)
    [listed] = health["leftover_outboxes"]
    assert listed["path"] == path and listed["pending"] == QUEUED
    assert listed["address"].startswith("redis:localhost:")
    assert listed["replay"] == f"jarvismem outbox replay {path}"
    assert any(listed["replay"] in w for w in health["warnings"])
    human = await cli.arun("status")
    assert f"replay them with: jarvismem outbox replay {path}" in human.stderr

    first = outcome(await cli.arun("outbox", "replay", path, "--json"))
    assert (first["status"], first["replayed"]) == ("replayed", QUEUED)
    assert first["match"] == "same server"
    assert await ledger_turns(cli, workflow_id) == ["1", "2", "3", "4", "5", "6"]
    second = outcome(await cli.arun("outbox", "replay", path, "--json"))
    assert (second["status"], second["replayed"]) == ("nothing to replay", 0)
    assert await ledger_turns(cli, workflow_id) == ["1", "2", "3", "4", "5", "6"]
    # Nothing left behind: the folder is gone and status is quiet about it.
    assert not (Path(cli.env["OUTBOX_PATH"]) / path).parent.exists()
    health = json.loads((await cli.arun("status", "--json")).stdout)
    assert health["leftover_outboxes"] == [] and health["local_outboxes"] == []


async def test_two_replays_at_once_land_every_record_exactly_once(
    leftover: tuple[Leftover, str], workflow_id: str
) -> None:
    cli, path = leftover
    results = await asyncio.gather(
        cli.arun("outbox", "replay", path, "--json"),
        cli.arun("outbox", "replay", path, "--json"),
    )
    outcomes = [outcome(done) for done in results]
    assert sum(o["replayed"] for o in outcomes) == QUEUED
    assert await ledger_turns(cli, workflow_id) == ["1", "2", "3", "4", "5", "6"]


async def test_a_replay_whose_outbox_a_peer_drained_meanwhile_finds_nothing_to_replay(
    leftover: tuple[Leftover, str],
    make_settings: Factory,
    make_runtime: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The peer finishes between this replay's "is the file there" and its read of the
    # destination file: it removed the outbox, then destination.json. That is a
    # finished replay, not an outbox that never recorded its server (seen as a
    # refusal with two replays at once on a loaded machine).
    from jarvismem.cli import _leftovers

    cli, path = leftover
    settings = make_settings(
        redis_url=cli.url,
        storage_backend="none",
        outbox_path=cli.env["OUTBOX_PATH"],
        jarvismem_namespace=cli.namespace,
    )
    rt: MemoryRuntime = make_runtime(settings=settings, redis=create_redis(settings))
    outbox = Path(cli.env["OUTBOX_PATH"]) / path
    real = _leftovers.read_destination

    def peer_finished_first(folder: Path) -> Any:
        outbox.unlink()
        (folder / "destination.json").unlink()
        return real(folder)

    monkeypatch.setattr(_leftovers, "read_destination", peer_finished_first)
    done = await _leftovers.replay_leftover(rt, path)
    assert (done["status"], done["replayed"]) == ("nothing to replay", 0)


async def test_another_server_is_refused_without_force(
    leftover: tuple[Leftover, str], workflow_id: str, redis_server: RedisServerProcess
) -> None:
    cli, path = leftover
    # Same server, but reached through another port (a proxy, a sidecar): not provably it.
    folder = Path(cli.env["OUTBOX_PATH"]) / Path(path).parent
    info = json.loads((folder / "destination.json").read_text())
    info["address"] = info["address"].replace(str(redis_server.port), "1")
    (folder / "destination.json").write_text(json.dumps(info))
    refused = await cli.arun("outbox", "replay", path)
    assert refused.returncode == 2
    assert "--force" in refused.stderr
    assert await ledger_turns(cli, workflow_id) == ["1"]
    forced = outcome(await cli.arun("outbox", "replay", path, "--force", "--json"))
    assert (forced["replayed"], forced["match"]) == (QUEUED, "forced")
    assert await ledger_turns(cli, workflow_id) == ["1", "2", "3", "4", "5", "6"]


async def test_an_outbox_recording_no_destination_needs_force(
    leftover: tuple[Leftover, str], workflow_id: str
) -> None:
    cli, path = leftover
    (Path(cli.env["OUTBOX_PATH"]) / Path(path).parent / "destination.json").unlink()
    refused = await cli.arun("outbox", "replay", path)
    assert refused.returncode == 2 and "does not record" in refused.stderr
    assert await ledger_turns(cli, workflow_id) == ["1"]


@pytest.mark.parametrize(
    "bad",
    ["../../etc/passwd", "/etc/passwd", "nope.jsonl", "ns/redis-zz/wf.jsonl", "x/y/../../../z"],
)
async def test_bad_ids_get_a_clear_error_and_never_leave_the_outbox_folder(
    leftover: tuple[Leftover, str], workflow_id: str, bad: str
) -> None:
    cli, _path = leftover
    done = await cli.arun("outbox", "replay", bad)
    assert done.returncode == 2
    assert "jarvismem: error:" in done.stderr
    assert "outbox" in done.stderr
    assert await ledger_turns(cli, workflow_id) == ["1"]
