"""cli/manage.py: ``jarvismem workflows`` and ``jarvismem delete`` end to end through
``python -m jarvismem``. Fixtures: tests/cli/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess

from jarvismem.runtime import MemoryRuntime
from tests.cli.conftest import Cli, seed_turns


async def _keys(rt: MemoryRuntime, workflow: str) -> list[str]:
    assert rt.redis is not None
    return [k async for k in rt.redis.scan_iter(match=rt.keyspace.workflow_pattern(workflow))]


async def test_workflows_lists_turns_and_last_activity(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    await seed_turns(runtime, "alpha", range(1, 4))
    # Last activity is the ledger's last stream id, in milliseconds: in the same
    # millisecond as alpha's last turn, beta would tie with it and sort by name.
    await asyncio.sleep(0.005)
    await seed_turns(runtime, "beta", range(1, 2))
    proc = await any_cli.arun("workflows", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["workflow_id"], r["turns"]) for r in rows] == [("beta", 1), ("alpha", 3)]
    assert all(isinstance(r["last_activity"], float) for r in rows)
    text = await any_cli.arun("workflows")
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["WORKFLOW", "TURNS", "ENTRIES", "LAST", "ACTIVITY", "STORED", "IN"]
    assert lines[2].split()[:3] == ["alpha", "3", "3"]
    assert lines[2].endswith("redis+blob")


async def test_workflows_on_an_empty_namespace(cli: Cli) -> None:
    proc = await cli.arun("workflows")
    assert proc.returncode == 0 and proc.stdout.strip() == "(no workflows)"
    assert json.loads((await cli.arun("workflows", "--json")).stdout) == []


async def test_delete_dry_run_lists_and_keeps_then_yes_deletes(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    await seed_turns(runtime, "gone", range(1, 3))
    await seed_turns(runtime, "kept", range(1, 2))
    before = await _keys(runtime, "gone")
    dry = await any_cli.arun("delete", "--workflow", "gone", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete workflow gone: ")
    assert runtime.keyspace.ledger("gone") in dry.stdout
    assert await _keys(runtime, "gone") == before
    done = await any_cli.arun("delete", "--workflow", "gone", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["indexed"] and not report["raced"] and report["blobs"]
    assert await _keys(runtime, "gone") == []
    rows = json.loads((await any_cli.arun("workflows", "--json")).stdout)
    assert [r["workflow_id"] for r in rows] == ["kept"]


async def test_delete_without_a_terminal_or_yes_refuses(
    any_cli: Cli, runtime: MemoryRuntime
) -> None:
    await seed_turns(runtime, "wf", range(1, 2))
    proc = await any_cli.arun("delete", "--workflow", "wf")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "jarvismem: error: refusing to delete workflow wf without confirmation: stdin is not "
        "a terminal; pass --yes (or --dry-run to see what would go)"
    ]
    assert await _keys(runtime, "wf")


def _on_a_terminal(cli: Cli, answer: bytes, *args: str) -> tuple[int, str]:
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            cli.argv(*args),
            env=cli.env,
            cwd=cli.cwd,
            stdin=child,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        os.write(main, answer)
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(main)
        os.close(child)
    return proc.returncode, out.decode()


async def test_delete_asks_on_a_terminal(any_cli: Cli, runtime: MemoryRuntime) -> None:
    await seed_turns(runtime, "wf", range(1, 2))
    code, out = await asyncio.to_thread(
        _on_a_terminal, any_cli, b"n\n", "delete", "--workflow", "wf"
    )
    assert code == 2 and "delete workflow wf (" in out and "[y/N]" in out
    assert "not deleted" in out and await _keys(runtime, "wf")
    code, out = await asyncio.to_thread(
        _on_a_terminal, any_cli, b"y\n", "delete", "--workflow", "wf"
    )
    assert code == 0, out
    assert "deleted workflow wf:" in out and await _keys(runtime, "wf") == []


async def test_delete_of_an_unknown_workflow_says_so(cli: Cli) -> None:
    proc = await cli.arun("delete", "--workflow", "never-was", "--yes")
    assert proc.returncode == 0
    assert proc.stdout.strip() == "nothing stored for workflow never-was: nothing to delete"


def test_delete_refuses_an_unsafe_id_in_one_line(cli: Cli) -> None:
    proc = cli.run("delete", "--workflow", "../etc", "--yes")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("jarvismem: error: workflow_id '../etc' is not allowed")


async def test_workflows_on_the_in_process_stand_in_lists_what_the_blob_store_holds(
    cli: Cli,
) -> None:
    # A kernel process that ran on the in-process stand-in left its scratchpads behind.
    settings = cli.runtime_settings().model_copy(update={"redis_url": "memory://"})
    rt = await MemoryRuntime.from_env(settings)
    try:
        await seed_turns(rt, "earlier", range(1, 3))
    finally:
        await rt.close()
    env = dict(cli.env, REDIS_URL="memory://")
    proc = await asyncio.to_thread(cli.run, "workflows", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["workflow_id"], r["turns"], r["blobs"]) for r in rows] == [("earlier", None, True)]
    text = await asyncio.to_thread(cli.run, "workflows", env=env)
    assert text.stdout.splitlines()[1].split()[:3] == ["earlier", "-", "-"]
