"""Auto-pipelining: one client's script calls coalesced into pipelined round trips.

Many agents in one event loop each await their own ledger append. Sent one by
one, sixty-four appends cost sixty-four commands' worth of client work and
round trips; coalesced, they cost one pipeline. :class:`AutoPipeline` does
that without asking the callers to cooperate:

* **A lone command is never delayed.** With nothing in flight, a call is sent
  at once, as a plain command, in the caller's own step: a single agent pays
  exactly one round trip and no extra loop iteration.
* **Commands issued while a round trip is in flight are coalesced.** They
  wait in a queue; when the round trip returns, the queue is sent as one
  non-transactional pipeline on the next loop iteration, so every command
  issued in the iteration that resumes the waiting agents joins it. A batch
  holds at most ``max_batch`` commands (the rest go in the next round trip).
* **Order.** At most one round trip is in flight per client and loop, and the
  queue is sent in arrival order: Redis runs the commands in the order they
  were issued, so appends to one stream keep their submission order, and a
  caller that awaits each command keeps the order of its own commands.
* **Each caller gets its own result or its own error.** A command-level error
  (a script error, a key of the wrong type) fails only its caller; a
  connection-level error fails every caller of the batch, each with its own
  translated :class:`~jarvismem.errors.BackendUnavailableError` (the ledger's
  durable writer then queues each turn in the outbox, as for any outage). A
  script the server lost (``NOSCRIPT``, after a restart or ``SCRIPT FLUSH``)
  is loaded again and only the commands that met it are resent.

* **Durability.** With ``REDIS_DURABILITY=replicated`` (see
  :mod:`jarvismem.backends.redis_durability`) every round trip ends with one
  ``WAIT``: the pipeline runs on one connection, so that one ``WAIT`` covers
  every append of the batch, at no extra round trip. A shortfall fails each
  append that ran with :class:`~jarvismem.errors.BackendUnavailableError` (the
  durable writer queues it; the exactly-once index makes its replay safe).

Redis Cluster clients are not coalesced (a pipeline there would have to be
split by node); their calls go straight through, one command each (with its
``WAIT`` pinned to the key's node when replicated). The embedded fakeredis
stand-in is coalesced like a real server.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from jarvismem.backends.redis import is_redis_failure, translate_redis_error
from jarvismem.backends.redis_durability import (
    durability_of,
    run_script,
    wait_args,
    wait_shortfall,
)
from jarvismem.errors import BackendUnavailableError

MAX_BATCH = 512
"""Most commands in one pipelined round trip (bounds one reply's parse on the loop)."""

# script, keys + args (flat), number of keys, what (for error messages), future.
_Pending = tuple[Any, tuple[Any, ...], int, str, "asyncio.Future[Any]"]


class AutoPipeline:
    """Coalesces one client's script calls in one event loop; see the module doc.

    ``round_trips`` and ``commands`` count what was sent (tests assert on them,
    never on time).
    """

    def __init__(self, redis: Any, *, max_batch: int = MAX_BATCH) -> None:
        self._redis = redis
        self._loop = asyncio.get_running_loop()
        self._max_batch = max(1, max_batch)
        self._queue: list[_Pending] = []
        self._busy = False
        self.round_trips = 0
        self.commands = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this pipeline belongs to."""
        return self._loop

    async def evalsha(self, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
        """Run the registered ``script`` (a redis-py ``Script``) with ``keys``/``args``.

        Returns the script's reply. Raises jarvismem's errors only:
        :class:`~jarvismem.errors.BackendUnavailableError` for an outage
        (the command may or may not have run) and
        :class:`~jarvismem.errors.BackendRejectedError` for a refusal, both
        naming ``what``.
        """
        flat = (*keys, *args)
        if self._busy:
            future: asyncio.Future[Any] = self._loop.create_future()
            self._queue.append((script, flat, len(keys), what, future))
            return await future
        self._busy = True
        try:
            return await self._lone(script, flat, len(keys), what)
        finally:
            self._release()

    async def _lone(self, script: Any, flat: tuple[Any, ...], nkeys: int, what: str) -> Any:
        """One plain EVALSHA (nothing else in flight), loading the script if it was lost."""
        if durability_of(self._redis) is not None:
            # The append and its WAIT on one connection: a two-command pipeline.
            item = (script, flat, nkeys, what, self._loop.create_future())
            try:
                reply = (await self._send([item]))[0]
            except Exception as exc:
                if not is_redis_failure(exc):
                    raise
                raise _translate(exc, what) from exc
            if isinstance(reply, BaseException):
                raise _translate(reply, what) from reply
            return reply
        self.round_trips += 1
        self.commands += 1
        try:
            try:
                return await self._redis.execute_command("EVALSHA", script.sha, nkeys, *flat)
            except NoScriptError:
                await self._redis.script_load(script.script)
                self.round_trips += 1
                return await self._redis.execute_command("EVALSHA", script.sha, nkeys, *flat)
        except Exception as exc:
            if not is_redis_failure(exc):
                raise
            raise _translate(exc, what) from exc

    def _release(self) -> None:
        if self._queue:
            # Still busy: the queue goes out as one pipeline on the next
            # iteration, with whatever the resumed callers add meanwhile.
            self._loop.create_task(self._drain(), name="jarvismem-auto-pipeline")
        else:
            self._busy = False

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: len(batch)]
                live = [item for item in batch if not item[4].done()]
                if not live:
                    continue
                try:
                    replies = await self._send(live)
                except BaseException as exc:
                    # The connection failed (or the loop is shutting down): every
                    # caller of the batch gets its own error.
                    for _, _, _, what, future in live:
                        if not future.done():
                            future.set_exception(_translate(exc, what))
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, _, _, what, future), reply in zip(live, replies, strict=True):
                    if future.done():
                        continue  # its caller gave up (a timeout); the command may have run
                    if isinstance(reply, BaseException):
                        future.set_exception(_translate(reply, what))
                    else:
                        future.set_result(reply)
        finally:
            self._busy = False
            if self._queue:  # arrived during a cancellation: do not strand them
                self._busy = True
                self._loop.create_task(self._drain(), name="jarvismem-auto-pipeline")

    async def _send(self, items: list[_Pending]) -> list[Any]:
        """One pipeline of EVALSHAs; reloads a lost script once and resends what met it."""
        replies = await self._pipeline(items)
        again = [i for i, reply in enumerate(replies) if _is_noscript(reply)]
        if again:
            for source in {items[i][0].script for i in again}:
                await self._redis.script_load(source)
            resent = await self._pipeline([items[i] for i in again])
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, items: list[_Pending]) -> list[Any]:
        """One round trip; with ``replicated``, a shortfall replaces each landed reply."""
        durability = durability_of(self._redis)
        self.round_trips += 1
        self.commands += len(items)
        async with self._redis.pipeline(transaction=False) as pipe:
            for script, flat, nkeys, _, _ in items:
                pipe.execute_command("EVALSHA", script.sha, nkeys, *flat)
            if durability is not None:
                # One WAIT after the batch: same connection, it covers every append before it.
                pipe.execute_command(*wait_args(durability))
            replies = list(await pipe.execute(raise_on_error=False))
        if durability is None:
            return replies
        acked = replies.pop()
        landed = [i for i, reply in enumerate(replies) if not isinstance(reply, BaseException)]
        if landed:
            short = wait_shortfall(self._redis, acked, items[landed[0]][3])
            if short is not None:
                for i in landed:
                    replies[i] = BackendUnavailableError(
                        f"{items[i][3]}: {str(short).partition(': ')[2]}"
                    )
        return replies


class _Direct:
    """The pass-through for Redis Cluster clients: one plain command per call."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._loop = asyncio.get_running_loop()
        self.round_trips = 0
        self.commands = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def evalsha(self, script: Any, keys: list[Any], args: list[Any], what: str) -> Any:
        self.round_trips += 1
        self.commands += 1
        try:
            # The Script object routes by its first key and reloads a lost script;
            # with replicated durability, the WAIT goes to that key's node.
            return await run_script(self._redis, script, keys, args, what)
        except Exception as exc:
            if not is_redis_failure(exc):
                raise
            raise _translate(exc, what) from exc


def _is_noscript(reply: object) -> bool:
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, RedisError) and str(reply).startswith("NOSCRIPT")
    )


def _translate(exc: BaseException, what: str) -> Exception:
    """jarvismem's error for ``exc`` (each caller gets a new object: tracebacks are per raise)."""
    if isinstance(exc, BackendUnavailableError):
        return BackendUnavailableError(str(exc))
    if isinstance(exc, asyncio.CancelledError):
        return BackendUnavailableError(f"{what}: cancelled before Redis answered")
    return translate_redis_error(exc, what)


_pipelines: weakref.WeakKeyDictionary[Any, AutoPipeline | _Direct] = weakref.WeakKeyDictionary()


def auto_pipeline(redis: Any) -> AutoPipeline | _Direct:
    """The auto-pipeline of ``redis`` in the running loop (a new loop gets a new one).

    A Redis Cluster client gets a pass-through that sends each call on its own.
    """
    found = _pipelines.get(redis)
    if found is None or found.loop is not asyncio.get_running_loop():
        found = _Direct(redis) if hasattr(redis, "nodes_manager") else AutoPipeline(redis)
        _pipelines[redis] = found
    return found
