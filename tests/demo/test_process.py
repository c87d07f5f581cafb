"""A demo child process seen from the parent: events, silence, exit, kill."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from jarvismem.demo.process import ERROR_PREFIX, ChildProcess, DemoFailure

Spawn = Callable[[str], AbstractAsyncContextManager[ChildProcess]]


@pytest.fixture
def spawn() -> Spawn:
    """Run a Python snippet as a child with piped stdout/stderr; killed at the end."""

    @asynccontextmanager
    async def run(code: str) -> AsyncIterator[ChildProcess]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        child = ChildProcess(proc)
        try:
            yield child
        finally:
            child.kill()
            await child.finish(10)

    return run


async def test_next_event_skips_lines_that_are_not_events(spawn: Spawn) -> None:
    code = (
        "import sys\n"
        "print('a stray print')\n"
        "print('[1]')\n"
        'print(\'{"event": "ack", "turn": 1}\')\n'
    )
    async with spawn(code) as child:
        assert await child.next_event(10) == {"event": "ack", "turn": 1}


async def test_an_exit_is_a_one_line_failure_with_the_stderr_tail_kept_apart(
    spawn: Spawn,
) -> None:
    code = "import sys\nfor i in range(60): print(f'err {i}', file=sys.stderr)\nsys.exit(3)\n"
    async with spawn(code) as child:
        with pytest.raises(DemoFailure) as failure:
            await child.next_event(10)
    assert str(failure.value) == "child exited with 3"
    assert failure.value.stderr_tail == [f"err {i}" for i in range(10, 60)]
    assert len(child.stderr) == 50


async def test_a_failure_carries_the_reason_the_child_gave_not_its_traceback(
    spawn: Spawn,
) -> None:
    code = (
        "import sys\n"
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('  File \"x.py\", line 1, in <module>', file=sys.stderr)\n"
        f"print({ERROR_PREFIX!r} + 'BackendUnavailableError: Redis down', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    async with spawn(code) as child:
        with pytest.raises(DemoFailure) as failure:
            await child.next_event(10)
    assert str(failure.value) == "child exited with 1: BackendUnavailableError: Redis down"
    assert "Traceback" in failure.value.stderr_tail[0]


async def test_silence_is_a_failure(spawn: Spawn) -> None:
    async with spawn("import time\ntime.sleep(30)\n") as child:
        with pytest.raises(DemoFailure, match=r"^no output for 0.2s$"):
            await child.next_event(0.2)


async def test_kill_is_a_sigkill(spawn: Spawn) -> None:
    async with spawn(
        'import time\nprint(\'{"event": "inflight"}\', flush=True)\ntime.sleep(30)\n'
    ) as child:
        assert (await child.next_event(10))["event"] == "inflight"
        child.kill()
        assert await child.finish(10) == -9
        child.kill()  # already gone: a no-op
