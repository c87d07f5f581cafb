"""A workflow id that names nothing: every per-workflow read command says so and writes nothing.

``tail``, ``bundle``, ``spaces``, ``export`` and ``compact`` run against the real
Redis server (one fresh namespace per test). A mistyped id must end in
"no workflow 'W' in namespace 'N'" with a did-you-mean from the workflow index,
exit 1, and leave no key and no file behind; a workflow that exists only in
blob storage, only in a local outbox, or only as a checkpoint still counts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import load_settings
from tests.cli.conftest import Cli, _make_cli, seed_turns
from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend
from tests.harness.redis_server import free_port

pytestmark = pytest.mark.integration

KNOWN = "alpha-run"
TYPO = "alpha-rum"

COMMANDS: dict[str, tuple[str, ...]] = {
    "tail": ("tail", "--workflow", TYPO),
    "bundle": ("bundle", "--workflow", TYPO, "--step", "s1", "--agent", "a1"),
    "spaces": ("spaces", "--workflow", TYPO, "--agent", "a1"),
    "export": ("export", "--workflow", TYPO, "-o", "out.jsonl"),
    "compact": ("compact", "--workflow", TYPO),
}


@pytest.fixture
def real_cli(tmp_path: Path) -> Cli:
    """The CLI against the real Redis server, in a namespace of its own."""
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    return _make_cli(REAL_REDIS_URL, tmp_path)


@pytest.fixture
async def real_rt(real_cli: Cli) -> AsyncIterator[MemoryRuntime]:
    """A runtime on the same namespace (to seed and to SCAN), its keys removed after."""
    rt = await MemoryRuntime.from_env(real_cli.runtime_settings())
    yield rt
    assert rt.redis is not None
    keys = [k async for k in rt.redis.scan_iter(match=f"jm:{real_cli.namespace}:*")]
    if keys:
        await rt.redis.delete(*keys)
    await rt.close()


async def _keys(rt: MemoryRuntime, namespace: str) -> set[str]:
    assert rt.redis is not None
    return {
        k.decode() if isinstance(k, bytes) else k
        async for k in rt.redis.scan_iter(match=f"jm:{namespace}:*", count=1000)
    }


def _outbox_files(cli: Cli, workflow: str) -> list[Path]:
    """The local outbox files (any kind, any sidecar) named after ``workflow``."""
    return [p for p in Path(cli.env["OUTBOX_PATH"]).rglob("*") if p.name.startswith(workflow)]


@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_a_mistyped_workflow_is_refused_with_a_suggestion_and_writes_nothing(
    real_cli: Cli, real_rt: MemoryRuntime, command: str
) -> None:
    await seed_turns(real_rt, KNOWN, range(1, 3))
    before = await _keys(real_rt, real_cli.namespace)
    proc = await real_cli.arun(*COMMANDS[command])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"jarvismem: error: no workflow '{TYPO}' in namespace '{real_cli.namespace}' "
        f"(did you mean '{KNOWN}'?)"
    ]
    assert await _keys(real_rt, real_cli.namespace) == before
    assert not (real_cli.cwd / "out.jsonl").exists()
    assert not _outbox_files(real_cli, TYPO)


@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_an_unknown_workflow_in_an_empty_namespace_has_no_suggestion(
    real_cli: Cli, real_rt: MemoryRuntime, command: str
) -> None:
    proc = await real_cli.arun(*COMMANDS[command])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [
        f"jarvismem: error: no workflow '{TYPO}' in namespace '{real_cli.namespace}'"
    ]
    assert await _keys(real_rt, real_cli.namespace) == set()
    assert not (real_cli.cwd / "out.jsonl").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_json_mode_prints_a_json_error_object(
    real_cli: Cli, real_rt: MemoryRuntime, command: str
) -> None:
    await seed_turns(real_rt, KNOWN, range(1, 2))
    proc = await real_cli.arun(*COMMANDS[command], "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout) == {
        "error": "workflow_not_found",
        "message": f"no workflow '{TYPO}' in namespace '{real_cli.namespace}' "
        f"(did you mean '{KNOWN}'?)",
        "workflow_id": TYPO,
        "namespace": real_cli.namespace,
        "did_you_mean": [KNOWN],
    }
    assert not (real_cli.cwd / "out.jsonl").exists()


async def test_a_workflow_with_only_blobs_counts_as_existing(
    real_cli: Cli, real_rt: MemoryRuntime
) -> None:
    await seed_turns(real_rt, KNOWN, range(1, 3))
    assert real_rt.redis is not None and real_rt.blob is not None
    assert await real_rt.blob.list(real_rt.keyspace.workflow_blob_prefix(KNOWN))
    # Its Redis keys gone (expired, or another Redis): the blobs still hold it.
    await real_rt.redis.delete(*await _keys(real_rt, real_cli.namespace))
    proc = await real_cli.arun("tail", "--workflow", KNOWN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"(ledger of {KNOWN} is empty)\n"


async def test_a_workflow_with_only_queued_writes_counts_as_existing(
    real_cli: Cli, real_rt: MemoryRuntime
) -> None:
    # Written while its Redis was down: the turn waits in this machine's outbox.
    down = load_settings(
        _env_file=None,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        storage_backend="none",
        outbox_path=real_cli.env["OUTBOX_PATH"],
        jarvismem_namespace=real_cli.namespace,
    )
    degraded = await MemoryRuntime.from_env(down, warn_degraded=False)
    try:
        await degraded.memory("queued-only", "s1", "a1").log_turn(1, "t", "a", "r")
    finally:
        await degraded.close()
    assert _outbox_files(real_cli, "queued-only")
    proc = await real_cli.arun(
        "bundle", "--workflow", "queued-only", "--step", "s1", "--agent", "a1"
    )
    assert proc.returncode == 0, proc.stderr


async def test_a_workflow_with_only_a_checkpoint_counts_as_existing(
    real_cli: Cli, real_rt: MemoryRuntime
) -> None:
    await real_rt.memory("ckpt-only", "s1", "a1").save_checkpoint('{"state": 1}')
    proc = await real_cli.arun("bundle", "--workflow", "ckpt-only", "--step", "s1", "--agent", "a1")
    assert proc.returncode == 0, proc.stderr
    assert '"state"' not in proc.stderr and "state" in proc.stdout
