"""The parent's handle on one demo child process: spawn it, read its events, end it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from jarvismem.demo.protocol import decode_event

__all__ = ["ERROR_PREFIX", "ChildProcess", "DemoFailure", "WorkflowInUse", "spawn_child"]

STDERR_LINES_KEPT = 50
"""Lines of a child's stderr kept to explain a failure (the last ones)."""

ERROR_PREFIX = "child: error: "
"""How a child's last stderr line names why it failed (:func:`jarvismem.demo.child.main`)."""


class DemoFailure(Exception):
    """A child did not behave as the demo expects.

    ``str()`` is one line: what happened and, when the child said why, its
    reason. ``stderr_tail``: the child's last stderr lines (a traceback, log
    lines), for ``-v``; never part of the message.
    """

    def __init__(self, message: str, stderr_tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.stderr_tail = list(stderr_tail or [])


class WorkflowInUse(DemoFailure):
    """The ``--workflow`` given already holds data: the demo needs a fresh one."""


class ChildProcess:
    """A running child process and its protocol lines.

    Its stderr is drained in the background (a full pipe would block the
    child) and its tail kept for failure messages.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []
        assert proc.stderr is not None
        self._drain = asyncio.ensure_future(self._read_stderr(proc.stderr))

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            self.stderr.append(raw.decode("utf-8", "replace").rstrip())
            del self.stderr[:-STDERR_LINES_KEPT]

    async def next_event(self, wait: float) -> dict[str, Any]:
        """The child's next protocol event; :class:`DemoFailure` after ``wait`` s of silence
        or when the child exits."""
        assert self.proc.stdout is not None
        while True:
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), wait)
            except TimeoutError:
                raise self.failure(f"no output for {wait:g}s") from None
            if not raw:
                await self.proc.wait()
                await self._drain
                raise self.failure(f"child exited with {self.proc.returncode}")
            event = decode_event(raw)
            if event is not None:
                return event

    def failure(self, what: str) -> DemoFailure:
        """A :class:`DemoFailure` saying ``what``, and the child's reason if it gave one."""
        tail = list(self.stderr)
        reasons = [line[len(ERROR_PREFIX) :] for line in tail if line.startswith(ERROR_PREFIX)]
        message = what + (f": {reasons[-1]}" if reasons else "")
        return DemoFailure(message, tail)

    def kill(self) -> None:
        """SIGKILL the child: no cleanup, no flush (a no-op once it has exited)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)

    async def finish(self, wait: float) -> int:
        """Wait up to ``wait`` s for the child to exit; returns its exit status."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), wait)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, 2)
        return code


async def spawn_child(args: list[str], env: dict[str, str]) -> ChildProcess:
    """Start ``python -m jarvismem.demo child ARGS`` with ``env``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jarvismem.demo",
        "child",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    return ChildProcess(proc)
