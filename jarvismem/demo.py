"""The crash-recovery demo: a simulated agent kernel killed mid-turn and resumed.

The parent (:func:`run_demo`, behind ``jarvismem demo``) starts a child process
(``python -m jarvismem.demo child ...``) that runs a small kernel loop: each turn
it logs the turn, sometimes records a goal finding and updates its task agenda,
saves a checkpoint holding the next turn number, then acknowledges the turn with
a line on stdout. Compaction runs with low thresholds so a long-term summary
appears. After ``kill_after`` acknowledged turns the child starts the next turn,
logs it, and reports that it is in flight; the parent SIGKILLs it right there, so
that turn is in the ledger but not in the checkpoint. A fresh child rehydrates,
resumes from the checkpoint, re-runs that one unacknowledged turn (exactly-once
logging keeps a single copy) and finishes. The parent then checks that the
ledger holds turns 1..N exactly once.

With no ``REDIS_URL`` the parent hosts a Redis-protocol server on loopback
(:class:`LoopbackRedis`, fakeredis with Lua) for the children: it outlives the
killed child but is ephemeral, gone when the demo exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jarvismem.errors import LockNotAcquiredError
from jarvismem.settings import Settings, load_settings

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

STEP_ID = "research"
AGENT_ID = "kernel"
_TOPICS = (
    "tides",
    "lunar orbit",
    "gravity",
    "ocean basins",
    "resonance",
    "coastlines",
    "tidal locking",
    "currents",
    "harmonics",
    "estuaries",
    "moon phases",
    "storm surge",
)
_PLAN = ("gather sources", "extract facts", "cross-check findings", "write the report")

CHILD_ENV_OVERRIDES = {
    # Low thresholds so a long-term summary appears within a short demo.
    "COMPACTION_ENABLED": "true",
    "COMPACTION_EVERY_TURNS": "5",
    "COMPACTION_TOKEN_THRESHOLD": "100000",
    # A compactor killed with its child holds the lock until it expires: keep that short.
    "COMPACTION_LOCK_TTL": "2",
    "REDIS_CONNECT_RETRIES": "3",
}


# --- the loopback Redis host -----------------------------------------------------------------


class LoopbackRedis:
    """A fakeredis server (Lua included) on ``127.0.0.1:<free port>``, in a thread.

    Ephemeral: its data lives in this process's memory. Usable as a context
    manager; :attr:`url` is the ``redis://`` URL to give to other processes.
    """

    def __init__(self) -> None:
        import fakeredis

        self._server = fakeredis.TcpFakeServer(("127.0.0.1", 0))
        # The stock handler drops the connection after any error reply (e.g.
        # NOSCRIPT before a script is loaded); reply with the error instead, as
        # a real server does, so clients keep their connection.
        base = self._server.RequestHandlerClass

        class _Handler(base):  # type: ignore[valid-type,misc]
            def setup(self) -> None:
                super().setup()
                inner: Any = self.current_client  # type: ignore[has-type]
                self.current_client = _ErrorsAsReplies(inner)

        self._server.RequestHandlerClass = _Handler
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="jarvismem-loopback-redis", daemon=True
        )

    @property
    def port(self) -> int:
        """The TCP port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LoopbackRedis:
        """Serve in a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LoopbackRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ErrorsAsReplies:
    """Wraps a fakeredis connection so a command error becomes an error reply."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read_response(self) -> Any:
        from redis.exceptions import ResponseError

        try:
            return self._inner.read_response()
        except ResponseError as exc:
            return exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# --- the child: a simulated kernel loop ----------------------------------------------------


def _emit(event: str, **data: Any) -> None:
    """One protocol line on stdout for the parent."""
    sys.stdout.write(json.dumps({"event": event, **data}, default=str) + "\n")
    sys.stdout.flush()


def _turn_content(turn: int) -> tuple[str, str, str]:
    topic = _TOPICS[(turn - 1) % len(_TOPICS)]
    return (
        f"I still need to understand {topic}.",
        f"search(query={topic!r})",
        f"found {2 + turn % 3} facts about {topic}",
    )


async def run_child(
    workflow_id: str,
    turns: int,
    *,
    stall_after: int | None,
    env_file: str | None,
    think_seconds: float = 0.1,
) -> int:
    """Run the kernel loop for ``workflow_id`` up to turn ``turns``.

    Resumes from the checkpoint when there is one. ``stall_after``: after
    acknowledging that turn, start the next one, log it, report it in flight
    and wait to be killed (the parent's crash window). ``think_seconds``: the
    simulated model call of each turn. Returns an exit code.
    """
    from jarvismem.runtime import MemoryRuntime

    settings = load_settings(_env_file=env_file)
    rt = await MemoryRuntime.from_env(settings)
    async with rt:
        mem = rt.memory(workflow_id, STEP_ID, AGENT_ID)
        bundle = await mem.rehydrate_bundle(ledger_tail=5)
        state = json.loads(bundle["checkpoint"]) if bundle["checkpoint"] else None
        start = int(state["next_turn"]) if state else 1
        _emit(
            "start",
            pid=os.getpid(),
            resumed=state is not None,
            next_turn=start,
            bundle=bundle if state is not None else None,
        )
        spaces = mem.spaces
        if state is None and spaces is not None:
            for task in _PLAN:
                await spaces.tasks_add(task)
            await spaces.world_put("subject", "how tides work")
        assert mem.episodic is not None and mem.working is not None
        for turn in range(start, turns + 1):
            thought, action, result = _turn_content(turn)
            await asyncio.sleep(think_seconds)  # the simulated model call
            earlier = await mem.episodic.find_turn(STEP_ID, AGENT_ID, turn)
            await mem.log_turn(turn, thought, action, result, tokens=40 + turn)
            if earlier is not None:
                now = await mem.episodic.find_turn(STEP_ID, AGENT_ID, turn)
                _emit("rerun", turn=turn, ledger_id=earlier, kept_id=now)
            if stall_after is not None and turn == stall_after + 1:
                _emit("inflight", turn=turn)
                await asyncio.sleep(3600)  # the parent kills us here
            if turn % 3 == 0:
                await mem.working.write("finding", f"turn {turn}: {result}", scope="goal")
                if spaces is not None:
                    nxt = await spaces.tasks_next()
                    if nxt is not None:
                        await spaces.tasks_complete(nxt["id"])
            if spaces is not None:
                await spaces.world_put("last_topic", _TOPICS[(turn - 1) % len(_TOPICS)])
            await mem.save_checkpoint(json.dumps({"next_turn": turn + 1, "done": turn}))
            _emit("ack", turn=turn)
        summary = await _compact(mem, settings)
        _emit("done", compaction=summary)
    return 0


async def _compact(mem: Any, settings: Settings) -> dict[str, Any]:
    """Compact now, waiting out a background compaction that holds the lock."""
    deadline = time.monotonic() + settings.compaction_lock_ttl + 5
    while True:
        try:
            result: dict[str, Any] = await mem.compact_now()
            return result
        except LockNotAcquiredError:
            if time.monotonic() > deadline:
                return {"compacted": False, "reason": "compactor lock still held"}
            await asyncio.sleep(0.1)


# --- the parent ------------------------------------------------------------------------------


Say = Callable[[str], None]


class DemoFailure(Exception):
    """A child did not behave as the demo expects (its stderr tail is attached)."""


class _Child:
    """A running child process and its protocol lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []
        assert proc.stderr is not None
        self._drain = asyncio.ensure_future(self._read_stderr(proc.stderr))

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            self.stderr.append(raw.decode("utf-8", "replace").rstrip())
            del self.stderr[:-50]

    async def next_event(self, wait: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), wait)
            except TimeoutError:
                raise DemoFailure(self._failure(f"no output for {wait:g}s")) from None
            if not raw:
                await self.proc.wait()
                await self._drain
                raise DemoFailure(self._failure(f"child exited with {self.proc.returncode}"))
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # not a protocol line (a stray print): ignore it
            if isinstance(event, dict) and "event" in event:
                return event

    def _failure(self, what: str) -> str:
        tail = "\n".join(self.stderr[-10:])
        return f"{what}" + (f"; child stderr:\n{tail}" if tail else "")

    async def finish(self, wait: float) -> int:
        try:
            code = await asyncio.wait_for(self.proc.wait(), wait)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, 2)
        return code


async def _spawn(args: list[str], env: dict[str, str]) -> _Child:
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
    return _Child(proc)


async def run_demo(
    settings: Settings,
    *,
    env_file: str | None,
    turns: int = 12,
    kill_after: int = 8,
    use_tmp: bool = False,
    workflow_id: str | None = None,
    say: Say = print,
    child_wait: float = 40.0,
) -> dict[str, Any]:
    """Run the whole demo; returns the summary (``ok`` says whether verification passed).

    ``settings``: the parent's settings (their REDIS_URL/blob/Athena/LLM are
    used when present); ``env_file``: the file the children read too;
    ``turns``: N; ``kill_after``: K acknowledged turns before the kill
    (1 <= K < N); ``use_tmp``: local blobs and outbox in a temporary folder;
    ``say``: where stage descriptions go; ``child_wait``: most seconds to wait
    for a child's next line.
    """
    if not 1 <= kill_after < turns:
        raise ValueError("kill_after must be between 1 and turns - 1")
    started = time.monotonic()
    workflow_id = workflow_id or f"demo-{uuid.uuid4().hex[:8]}"
    tmp_dir = (
        await asyncio.to_thread(tempfile.mkdtemp, prefix="jarvismem-demo-") if use_tmp else None
    )
    loopback: LoopbackRedis | None = None
    env = dict(os.environ)
    env.update(CHILD_ENV_OVERRIDES)
    env["JARVISMEM_NAMESPACE"] = settings.jarvismem_namespace
    package_root = _PACKAGE_ROOT
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    overrides: dict[str, Any] = {}
    try:
        say("== Setup ==")
        if settings.redis_url:
            from jarvismem.redaction import mask_url

            redis_where = mask_url(settings.redis_url)
            say(f"Redis: {redis_where} (from your settings)")
        else:
            loopback = LoopbackRedis().start()
            env["REDIS_URL"] = overrides["redis_url"] = loopback.url
            redis_where = loopback.url
            say(
                f"Redis: none configured, so this demo hosts an embedded Redis-protocol server "
                f"on {loopback.url}. It outlives the killed child but is EPHEMERAL: "
                "everything in it is gone when the demo exits. Set REDIS_URL to keep it."
            )
        if tmp_dir is not None:
            blobs, outbox = Path(tmp_dir) / "blobs", Path(tmp_dir) / "outbox"
            env["STORAGE_BASE_PATH"] = overrides["storage_base_path"] = str(blobs)
            env["OUTBOX_PATH"] = overrides["outbox_path"] = str(outbox)
        blob_desc = (
            f"Azure container {settings.azure_storage_container}"
            if settings.storage_backend == "azure"
            else f"local folder {overrides.get('storage_base_path', settings.storage_base_path)}"
            + (" (temporary)" if tmp_dir else "")
            if settings.storage_backend == "local"
            else "none"
        )
        say(f"Blob storage: {blob_desc}")
        say("Athena: " + (settings.athena_url or "not configured (tier 4 off)"))
        say(
            "LLM: "
            + (
                f"{settings.llm_model} at {settings.llm_base_url}"
                if settings.llm_base_url
                else "not configured (extractive summarizer)"
            )
        )
        say(
            f"Workflow {workflow_id}, step {STEP_ID}, agent {AGENT_ID}: {turns} turns, "
            f"killed after {kill_after} acknowledged; compaction every "
            f"{CHILD_ENV_OVERRIDES['COMPACTION_EVERY_TURNS']} turns"
        )
        env_args = ["--env-file", env_file or os.devnull]
        base = ["--workflow", workflow_id, "--turns", str(turns), *env_args]

        # Stage 1: run until killed mid-turn.
        say("")
        say("== Stage 1: the kernel runs ==")
        first = await _spawn([*base, "--stall-after", str(kill_after)], env)
        acked: list[int] = []
        inflight: int | None = None
        while inflight is None:
            event = await first.next_event(child_wait)
            if event["event"] == "start":
                say(f"child pid {event['pid']} started at turn {event['next_turn']}")
            elif event["event"] == "ack":
                acked.append(int(event["turn"]))
                say(f"  turn {event['turn']:>2} acknowledged (logged, checkpoint saved)")
            elif event["event"] == "inflight":
                inflight = int(event["turn"])
        first.proc.send_signal(signal.SIGKILL)
        killed_code = await first.finish(child_wait)
        say(f"  turn {inflight:>2} in flight: logged to the ledger, checkpoint NOT saved")
        say(
            f"SIGKILL sent to pid {first.proc.pid} (exit status {killed_code}): "
            f"no cleanup, no flush"
        )

        # Stage 2: a fresh child rehydrates and resumes.
        say("")
        say("== Stage 2: a fresh process rehydrates ==")
        second = await _spawn(base, env)
        reruns: list[dict[str, Any]] = []
        resumed_acks: list[int] = []
        bundle: dict[str, Any] | None = None
        compaction: dict[str, Any] | None = None
        resumed_from: int | None = None
        while compaction is None:
            event = await second.next_event(child_wait)
            kind = event["event"]
            if kind == "start":
                bundle = event.get("bundle")
                resumed_from = int(event["next_turn"])
                say(
                    f"child pid {event['pid']} called rehydrate_bundle(); the checkpoint says "
                    f"next turn = {resumed_from}"
                )
                if bundle is not None:
                    from jarvismem.cli._render import render_bundle

                    say("")
                    say(render_bundle(bundle))
                    say("")
            elif kind == "rerun":
                reruns.append(event)
                say(
                    f"  turn {event['turn']:>2} re-run (it was never acknowledged); the ledger "
                    f"already had it as {event['ledger_id']}, log_turn kept that one copy"
                )
            elif kind == "ack":
                resumed_acks.append(int(event["turn"]))
                say(f"  turn {event['turn']:>2} acknowledged")
            elif kind == "done":
                compaction = event.get("compaction") or {}
        code = await second.finish(child_wait)
        if code != 0:
            raise DemoFailure(f"resumed child exited with {code}")
        if compaction.get("compacted"):
            say(
                f"long-term compaction: {compaction.get('entries')} entries folded into a "
                f"{compaction.get('chars')}-char summary"
            )
        else:
            say(f"long-term compaction: {compaction.get('reason') or 'nothing new to fold'}")

        # Stage 3: verify from the outside.
        say("")
        say("== Verification ==")
        check = await _verify(settings, overrides, workflow_id, turns)
        for line in check["lines"]:
            say(line)
        ok = bool(check["ok"])
        say("PASS: every turn 1..N is in the ledger exactly once" if ok else "FAIL")
        return {
            "ok": ok,
            "workflow_id": workflow_id,
            "namespace": settings.jarvismem_namespace,
            "turns": turns,
            "redis": {
                "url": redis_where,
                "embedded_loopback": loopback is not None,
                "ephemeral": loopback is not None,
            },
            "blob": blob_desc,
            "killed_child": {
                "pid": first.proc.pid,
                "signal": "SIGKILL",
                "exit_status": killed_code,
                "acknowledged": acked,
                "inflight_turn": inflight,
            },
            "resumed": {
                "next_turn": resumed_from,
                "reruns": [r["turn"] for r in reruns],
                "acknowledged": resumed_acks,
            },
            "bundle": bundle,
            "compaction": compaction,
            "ledger": check["ledger"],
            "summary": check["summary"],
            "elapsed_s": round(time.monotonic() - started, 2),
        }
    finally:
        if loopback is not None:
            loopback.stop()
        if tmp_dir is not None:
            await asyncio.to_thread(shutil.rmtree, tmp_dir, True)


async def _verify(
    settings: Settings, overrides: dict[str, Any], workflow_id: str, turns: int
) -> dict[str, Any]:
    from jarvismem.runtime import MemoryRuntime

    s = settings.model_copy(update=overrides) if overrides else settings
    rt = await MemoryRuntime.from_env(s)
    async with rt:
        state = rt.workflow(workflow_id)
        assert state.ledger is not None
        history = await state.ledger.full_history()
        record = await state.ltm.load_summary_record() if state.ltm is not None else None
    counts: dict[str, int] = {}
    for entry in history:
        key = str(entry.get("turn_id"))
        counts[key] = counts.get(key, 0) + 1
    expected = [str(t) for t in range(1, turns + 1)]
    duplicates = sorted((k for k, n in counts.items() if n > 1), key=_turn_order)
    missing = [t for t in expected if t not in counts]
    extra = sorted((k for k in counts if k not in expected), key=_turn_order)
    ok = not duplicates and not missing and not extra and len(history) == turns
    lines = [
        f"ledger entries: {len(history)} (expected {turns})",
        f"turn ids: {', '.join(sorted(counts, key=_turn_order))}",
        f"duplicates: {', '.join(duplicates) or 'none'}; missing: {', '.join(missing) or 'none'}",
        "long-term summary: "
        + (
            f"{len(record.text)} chars covering {record.turns} entries "
            f"({record.from_id} .. {record.to_id})"
            if record
            else "none"
        ),
    ]
    return {
        "ok": ok,
        "lines": lines,
        "ledger": {
            "entries": len(history),
            "turn_ids": sorted(counts, key=_turn_order),
            "duplicates": duplicates,
            "missing": missing,
            "unexpected": extra,
        },
        "summary": None
        if record is None
        else {
            "chars": len(record.text),
            "turns": record.turns,
            "from_id": record.from_id,
            "to_id": record.to_id,
        },
    }


def _turn_order(turn: str) -> tuple[int, str]:
    return (int(turn), "") if turn.isdigit() else (1 << 30, turn)


# --- python -m jarvismem.demo child ... ------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process (``python -m jarvismem.demo child ...``)."""
    parser = argparse.ArgumentParser(prog="python -m jarvismem.demo")
    sub = parser.add_subparsers(dest="role", required=True)
    child = sub.add_parser("child", help="run the simulated kernel loop (used by the demo)")
    child.add_argument("--workflow", required=True)
    child.add_argument("--turns", type=int, default=12)
    child.add_argument("--stall-after", type=int, default=None)
    child.add_argument("--env-file", default=None)
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="child: %(levelname)s: %(name)s: %(message)s",
    )
    env_file = None if args.env_file in (None, os.devnull) else args.env_file
    return asyncio.run(
        run_child(args.workflow, args.turns, stall_after=args.stall_after, env_file=env_file)
    )


if __name__ == "__main__":
    sys.exit(main())
