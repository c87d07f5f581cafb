"""A child process that runs the extractive summarizer off the kernel's event loop.

Compaction with the extractive summarizer is pure CPU (tokenizing, tf-idf, ranking:
about 100 µs per ledger turn). On the kernel's event loop it took a third of the
loop's time even in slices; in a worker thread it would fight the loop for the GIL.
So it runs in one child process per agent process, started on first use as a
fresh interpreter running :mod:`~jarvismem.backends.llm.worker_child` (never by
``fork``: a fork of a process with threads may inherit a held lock; and not by
``multiprocessing``, whose spawn would re-run the top level of a user's unguarded
``__main__``; docs/performance.md has the A/B against ``ProcessPoolExecutor``).

The wire is the child's stdin and stdout: each frame a 4-byte big-endian length and a
JSON body. A request is ``{"op": "summarize", "texts": [...], "redact": [...] | null,
"previous": ..., "max_chars": ...}``: the summary of the texts joined by newlines,
each text first redacted with ``redactor_for(redact)`` when given (a compaction sends
its rendered, not yet redacted ledger lines in batches, so the other large piece of
its CPU work runs there too, in the same round trip); a reply is ``{"ok": result}`` or
``{"error": "..."}``. The child writes ``{"ready": pid}`` once
it has imported the summarizer. It exits when its stdin closes (the parent exited,
crashed, or closed it), so it never outlives its agent.

:class:`SummaryWorker` is the parent's side. Its calls block (they are run with
``asyncio.to_thread``: the waiting thread holds no GIL) and are serialised by a lock,
so any event loop or thread of the process can use the one worker. Every read and
write has a deadline; a worker that is dead, stopped, slow past its deadline or that
answers nonsense is killed and :class:`WorkerUnavailable` raised, and the caller
summarizes on its own loop instead: a compaction is never lost to the worker. A
worker that failed to start is not tried again for :data:`RESTART_BACKOFF` seconds.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "CALL_TIMEOUT",
    "CHILD_BOOT",
    "HEADER",
    "MAX_FRAME",
    "RESTART_BACKOFF",
    "START_TIMEOUT",
    "SummaryWorker",
    "WorkerUnavailable",
    "default_worker",
    "frame",
]

HEADER = struct.Struct(">I")
"""A frame's length prefix."""

MAX_FRAME = 256 * 1024 * 1024
"""Largest frame either side accepts: a bound on what a corrupt length can make it allocate."""

START_TIMEOUT = 30.0
"""Seconds a new worker has to load the summarizer and say it is ready (~0.1 s on an
idle machine, a few on a loaded one)."""

CALL_TIMEOUT = 10.0
"""Seconds a summary may take in the worker, plus one per 100 KB of input."""

RESTART_BACKOFF = 30.0
"""Seconds after a failed start before the worker is started again."""


CHILD_BOOT = """
import sys, types
from pathlib import Path
root = Path(sys.argv[1]) / "jarvismem"
for name, folder in (("jarvismem", root), ("jarvismem.backends", root / "backends"),
                     ("jarvismem.backends.llm", root / "backends" / "llm")):
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package
from jarvismem.backends.llm.worker_child import main
main()
"""
"""What the worker's interpreter runs (``python -c CHILD_BOOT <package root>``).

``python -m jarvismem.backends.llm.worker_child`` would run jarvismem's and its
subpackages' ``__init__`` modules, which import all of jarvismem (pydantic, redis,
httpx): ~65 MB of memory for a process that only summarizes. Registering the three
parent packages as bare packages first loads the child's modules alone (~25 MB, and
it starts in ~0.1 s instead of ~0.8 s)."""


T = TypeVar("T")


class WorkerUnavailable(Exception):
    """The worker could not give a summary: the caller summarizes in-process."""


class _WorkerGone(WorkerUnavailable):
    """The worker's pipe closed: it died (before or during the call)."""


def _package_root() -> str:
    # The directory holding the jarvismem package, so the child loads the same code
    # as the parent even when the parent found it through a sys.path entry the child
    # would not have (a test runner's rootdir, an editable checkout).
    return str(Path(__file__).resolve().parents[3])


def _deadline_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WorkerUnavailable("the summary worker did not answer in time")
    return left


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        _, ready, _ = select.select([], [fd], [], _deadline_left(deadline))
        if not ready:
            continue
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            continue
        except OSError as exc:  # BrokenPipeError: the worker is gone
            raise _WorkerGone(f"the summary worker's pipe failed: {exc}") from exc
        view = view[sent:]


def _read_exact(fd: int, size: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    left = size
    while left:
        ready, _, _ = select.select([fd], [], [], _deadline_left(deadline))
        if not ready:
            continue
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            continue
        except OSError as exc:
            raise _WorkerGone(f"the summary worker's pipe failed: {exc}") from exc
        if not chunk:
            raise _WorkerGone("the summary worker exited")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_frame(fd: int, deadline: float) -> Any:
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if size > MAX_FRAME:
        raise WorkerUnavailable(f"the summary worker sent a frame of {size} bytes")
    try:
        return json.loads(_read_exact(fd, size, deadline))
    except ValueError as exc:
        raise WorkerUnavailable(f"the summary worker sent a bad frame: {exc}") from exc


def frame(body: Any) -> bytes:
    """``body`` as one frame: its JSON's length (4 bytes, big-endian), then the JSON."""
    data = json.dumps(body, ensure_ascii=False).encode()
    return HEADER.pack(len(data)) + data


class SummaryWorker:
    """The parent's handle on one summary worker process (started on first call).

    ``command``: the argv that starts the child (default: this interpreter running
    :data:`CHILD_BOOT`); ``start_timeout``: seconds the child has to say it is ready;
    ``call_timeout``: the base deadline of one request, seconds (plus one per 100 KB
    of text); ``restart_backoff``: seconds before a failed start is tried again.
    """

    def __init__(
        self,
        *,
        command: list[str] | None = None,
        start_timeout: float = START_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        restart_backoff: float = RESTART_BACKOFF,
    ) -> None:
        self._command = command
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.restart_backoff = restart_backoff
        self._lock = threading.Lock()
        # One asyncio lock per event loop (see run); weak: a closed loop goes.
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._loop_locks_guard = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()
        self._retry_at = 0.0
        self.starts = 0
        """Workers started so far (a restart after a crash counts)."""

    @property
    def pid(self) -> int | None:
        """The running worker's process id, or None when none runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def available(self) -> bool:
        """False while a failed start's back-off lasts (callers skip the worker then)."""
        return time.monotonic() >= self._retry_at

    def start(self) -> int:
        """Start the worker now if it is not running (blocking); returns its pid.

        Optional: the first summary starts it otherwise (the interpreter's start and
        its imports, under a second, then delay that summary). Raises
        :class:`WorkerUnavailable` when it cannot start.
        """
        with self._lock:
            return self._running().pid

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` (:meth:`summarize` or :meth:`redact`) in a thread, in turn.

        The worker answers one request at a time. Callers of one event loop wait
        for their turn here, on the loop, rather than each in a thread of the
        loop's default executor: eight workflows compacting at once would otherwise
        hold most of its threads (5 or 6 on two cores) waiting, and the blob writes
        and outbox loads that need them would queue behind a summary.
        """
        loop = asyncio.get_running_loop()
        with self._loop_locks_guard:
            turn = self._loop_locks.get(loop)
            if turn is None:
                turn = self._loop_locks[loop] = asyncio.Lock()
        async with turn:
            return await asyncio.to_thread(call, *args)

    def summarize(
        self,
        texts: list[str],
        previous_summary: str | None,
        max_chars: int,
        redact: tuple[str, ...] | None = None,
    ) -> str:
        """The extractive summary of ``texts`` joined by newlines, computed in the worker.

        ``redact``: each text is first redacted there with ``redactor_for(redact)``
        (a :class:`~jarvismem.redaction.PatternRedactor`'s ``names``), one text at a
        time, as the caller would redact them. Blocking. Raises
        :class:`WorkerUnavailable` when the worker cannot answer; the caller then
        does the same work itself.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of str")
        reply = self._call(
            {
                "op": "summarize",
                "texts": texts,
                "redact": None if redact is None else list(redact),
                "previous": previous_summary,
                "max_chars": max_chars,
            },
            sum(map(len, texts)) + len(previous_summary or ""),
        )
        if not isinstance(reply, str):
            self._discard()
            raise WorkerUnavailable(f"the summary worker sent an unexpected reply: {reply!r:.200}")
        return reply

    def close(self) -> None:
        """Stop the worker: close its stdin (it exits), kill it if it does not."""
        with self._lock:
            self._kill(graceful=True)

    # --- internals -------------------------------------------------------------------

    def _discard(self) -> None:
        with self._lock:
            self._kill()

    def _call(self, body: dict[str, Any], size: int) -> Any:
        """Send one request, return the ``ok`` value of its reply."""
        deadline_s = self.call_timeout + size / 100_000
        request = frame(body)
        with self._lock:
            # A worker that died since the last call (killed, OOM) is seen only when
            # its pipe closes: one new worker gets the request again (a summary is a
            # pure function of it). A stall is not retried: it already took its time.
            for attempt in (1, 2):
                proc = self._running()
                assert proc.stdin is not None and proc.stdout is not None
                deadline = time.monotonic() + deadline_s
                try:
                    _write_all(proc.stdin.fileno(), request, deadline)
                    reply = _read_frame(proc.stdout.fileno(), deadline)
                    break
                except _WorkerGone:
                    self._kill()
                    if attempt == 2:
                        raise
                except WorkerUnavailable:
                    self._kill()
                    raise
            if isinstance(reply, dict) and "ok" in reply:
                return reply["ok"]
            if isinstance(reply, dict) and isinstance(reply.get("error"), str):
                # The work itself raised: the in-process retry raises the same.
                raise WorkerUnavailable(f"the summary worker failed: {reply['error']}")
            self._kill()
            raise WorkerUnavailable(f"the summary worker sent an unexpected reply: {reply!r:.200}")

    def _running(self) -> subprocess.Popen[bytes]:
        if self._owner != os.getpid():
            self._forget()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        if proc is not None:
            self._kill()
        if not self.available():
            raise WorkerUnavailable("the summary worker failed to start recently")
        try:
            return self._start()
        except WorkerUnavailable:
            self._retry_at = time.monotonic() + self.restart_backoff
            raise

    def _start(self) -> subprocess.Popen[bytes]:
        command = self._command or [sys.executable, "-c", CHILD_BOOT, _package_root()]
        if not command[0]:
            raise WorkerUnavailable("no Python interpreter to start the summary worker with")
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
                # Its own session: a Ctrl-C meant for the agent does not kill the
                # worker mid-summary with a traceback; it exits when stdin closes.
                start_new_session=True,
            )
        except OSError as exc:
            raise WorkerUnavailable(f"the summary worker could not start: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stdout.fileno(), False)
        self._proc = proc
        self._owner = os.getpid()
        self.starts += 1
        try:
            hello = _read_frame(proc.stdout.fileno(), time.monotonic() + self.start_timeout)
        except WorkerUnavailable:
            self._kill()
            raise
        if not (isinstance(hello, dict) and hello.get("ready") == proc.pid):
            self._kill()
            raise WorkerUnavailable(f"the summary worker did not start: {hello!r:.200}")
        return proc

    def _kill(self, *, graceful: bool = False) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        if graceful:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a kill not reaped in 5 s
            pass
        if proc.stdout is not None:
            proc.stdout.close()

    def _forget(self) -> None:
        # In a forked child: the worker and its pipes belong to the parent. Close our
        # copies of the pipe ends (so the parent's worker still sees EOF when the
        # parent goes) without signalling or reaping the parent's worker. Nothing is
        # buffered in them (frames go out with os.write), so closing writes nothing.
        proc, self._proc = self._proc, None
        self._owner = os.getpid()
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _after_fork(self) -> None:
        # A thread of the parent may have held the lock when it forked.
        self._lock = threading.Lock()
        self._loop_locks_guard = threading.Lock()
        self._loop_locks = weakref.WeakKeyDictionary()
        self._forget()


_default: SummaryWorker | None = None
# Kept: default_worker() may be called from several threads at once, and
# without the lock two could each make a worker (and start two children).
_default_lock = threading.Lock()


def default_worker() -> SummaryWorker:
    """The process's one summary worker (not started until its first summary)."""
    global _default
    with _default_lock:
        if _default is None:
            worker = SummaryWorker()
            os.register_at_fork(after_in_child=worker._after_fork)
            atexit.register(worker.close)
            _default = worker
        return _default
