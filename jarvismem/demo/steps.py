"""The demo's stages, run in order by :func:`jarvismem.demo.run.run_demo`.

:func:`prepare` picks the stores and describes them; :func:`run_until_killed`
runs a first child and SIGKILLs it mid-turn; :func:`resume` runs a fresh child
that rehydrates and finishes; :func:`verify` checks the ledger from outside.
Each stage tells a human what happens through ``say``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvismem.backends.redis_embedded import EmbeddedServer, ensure_started
from jarvismem.demo.child import AGENT_ID, STEP_ID
from jarvismem.demo.process import ChildProcess, WorkflowInUse, spawn_child
from jarvismem.demo.verify import LedgerCheck, check_ledger, read_existing, read_ledger
from jarvismem.errors import ConfigError
from jarvismem.redaction import mask_url
from jarvismem.render import render_bundle
from jarvismem.settings import MEMORY_URL, Settings

__all__ = [
    "CHILD_ENV_OVERRIDES",
    "DemoSetup",
    "KilledRun",
    "ResumedRun",
    "Say",
    "describe_blob",
    "prepare",
    "resume",
    "run_until_killed",
    "verify",
]

Say = Callable[[str], None]

# demo/steps.py -> demo -> jarvismem -> the folder holding the package.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

CHILD_ENV_OVERRIDES = {
    # Low thresholds so a long-term summary appears within a short demo.
    "COMPACTION_ENABLED": "true",
    "COMPACTION_EVERY_TURNS": "5",
    "COMPACTION_TOKEN_THRESHOLD": "100000",
    # A compactor killed with its child holds the lock until it expires: keep that short.
    "COMPACTION_LOCK_TTL": "2",
    "REDIS_CONNECT_RETRIES": "3",
}


@dataclass
class DemoSetup:
    """Where the children keep their memory and how to start them.

    ``settings``: the parent's settings pointed at the children's stores (for
    the verification); ``env``: the children's environment; ``child_args``:
    the arguments every child gets; ``redis_where``: the Redis URL, password
    masked; ``embedded``: Redis is the embedded server (``REDIS_URL`` unset), the one a
    user's own kernel loop gets.
    """

    workflow_id: str
    turns: int
    kill_after: int
    settings: Settings
    env: dict[str, str]
    child_args: list[str]
    redis_where: str
    embedded: bool
    blob: str


@dataclass
class KilledRun:
    """The first child: what it acknowledged, the turn it died in, how it ended."""

    pid: int
    exit_status: int
    acknowledged: list[int]
    inflight_turn: int


@dataclass
class ResumedRun:
    """The fresh child: where the checkpoint put it, what it re-ran and acknowledged."""

    next_turn: int | None
    reruns: list[int]
    acknowledged: list[int]
    bundle: dict[str, Any] | None
    compaction: dict[str, Any]


def describe_blob(settings: Settings, local_path: str, *, temporary: bool) -> str:
    """The blob store the children use, for humans."""
    if settings.storage_backend == "azure":
        return f"Azure container {settings.azure_storage_container}"
    if settings.storage_backend == "local":
        return f"local folder {local_path}" + (" (temporary)" if temporary else "")
    return "none"


def _child_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CHILD_ENV_OVERRIDES)
    env["JARVISMEM_NAMESPACE"] = settings.jarvismem_namespace
    # The children import this very package, wherever the parent runs from.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


async def prepare(
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    *,
    env_file: str | None,
    turns: int,
    kill_after: int,
    use_tmp: bool,
    workflow_id: str | None,
    say: Say,
) -> DemoSetup:
    """Pick the children's stores, describe them, and register their cleanup on ``stack``.

    Without ``REDIS_URL`` the children use the embedded server, exactly as a
    user's own loop would: the one of ``EMBEDDED_REDIS_PATH`` (left running), or
    with ``use_tmp`` one in the temporary folder (stopped by ``stack``).
    ``use_tmp`` puts local blobs and the outbox in a temporary folder (removed
    by ``stack``).
    """
    if settings.redis_url == MEMORY_URL:
        raise ConfigError(
            "REDIS_URL=memory:// is one process's in-process stand-in: the demo's kernels run "
            "in separate processes and could not share it. Unset REDIS_URL (the embedded "
            "server) or set it to a Redis server"
        )
    workflow_id_given = workflow_id is not None
    workflow_id = workflow_id or f"demo-{uuid.uuid4().hex[:8]}"
    env = _child_env(settings)
    overrides: dict[str, Any] = {}
    tmp_dir: str | None = None
    if use_tmp:
        tmp_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="jarvismem-demo-")
        stack.push_async_callback(asyncio.to_thread, shutil.rmtree, tmp_dir, True)
    say("== Setup ==")
    if settings.redis_url:
        redis_where = mask_url(settings.redis_url)
        say(f"Redis: {redis_where} (from your settings)")
    else:
        if tmp_dir is not None:
            folder = Path(tmp_dir) / "redis"
            env["EMBEDDED_REDIS_PATH"] = str(folder)
            overrides["embedded_redis_path"] = folder
        server = await ensure_started(settings.model_copy(update=overrides))
        redis_where = server.url
        if tmp_dir is not None:
            # Registered after the folder's removal, so it runs first (the stack is LIFO).
            stack.push_async_callback(_stop_temporary, server)
        say(_describe_embedded(server, temporary=tmp_dir is not None))
    if workflow_id_given:
        await _refuse_used_workflow(
            settings.model_copy(update=overrides) if overrides else settings, workflow_id
        )
    if tmp_dir is not None:
        blobs, outbox = Path(tmp_dir) / "blobs", Path(tmp_dir) / "outbox"
        env["STORAGE_BASE_PATH"] = overrides["storage_base_path"] = str(blobs)
        env["OUTBOX_PATH"] = overrides["outbox_path"] = str(outbox)
    blob = describe_blob(
        settings,
        overrides.get("storage_base_path", settings.storage_base_path),
        temporary=tmp_dir is not None,
    )
    say(f"Blob storage: {blob}")
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
    return DemoSetup(
        workflow_id=workflow_id,
        turns=turns,
        kill_after=kill_after,
        settings=settings.model_copy(update=overrides) if overrides else settings,
        env=env,
        child_args=[
            *("--workflow", workflow_id, "--turns", str(turns)),
            *("--env-file", env_file or os.devnull),
        ],
        redis_where=redis_where,
        embedded=not settings.redis_url,
        blob=blob,
    )


def _describe_embedded(server: EmbeddedServer, *, temporary: bool) -> str:
    if temporary:
        return (
            f"Redis: none configured, so the embedded Redis server, persistent (AOF), in a "
            f"temporary folder {server.folder} (stopped and removed when the demo ends). "
            "A kernel of yours gets the same server with nothing configured."
        )
    return (
        f"Redis: none configured, so the embedded Redis server, persistent (AOF), data in "
        f"{server.folder}. It outlives every kernel and keeps running after the demo: "
        "stop it with `jarvismem server stop`."
    )


async def _stop_temporary(server: EmbeddedServer) -> None:
    await server.stop(force=True)


async def _refuse_used_workflow(settings: Settings, workflow_id: str) -> None:
    """Raise :class:`WorkflowInUse` when ``workflow_id`` already holds ledger entries.

    A demo on a used workflow would prove nothing (a finished one has no turn
    left to kill) and would write into someone's data.
    """
    length, state = await read_existing(settings, workflow_id)
    if not length and state is None:
        return
    fresh = "pass a new --workflow, or leave --workflow out for a fresh demo-<random> one"
    done = state.get("done") if state is not None else None
    if isinstance(done, int):
        raise WorkflowInUse(
            f"workflow {workflow_id} already ran the demo (its checkpoint says turn {done} "
            f"is done; {length} ledger entries): {fresh}"
        )
    raise WorkflowInUse(
        f"workflow {workflow_id} already holds {length} ledger entries; the demo needs "
        f"an empty workflow: {fresh}"
    )


@contextlib.asynccontextmanager
async def _child(setup: DemoSetup, *extra: str) -> AsyncIterator[ChildProcess]:
    """A running child, killed if the stage ends before it does (a failure)."""
    child = await spawn_child([*setup.child_args, *extra], setup.env)
    try:
        yield child
    finally:
        child.kill()


async def run_until_killed(setup: DemoSetup, say: Say, child_wait: float) -> KilledRun:
    """Stage 1: a child runs ``kill_after`` turns, starts the next, and is SIGKILLed in it."""
    say("")
    say("== Stage 1: the kernel runs ==")
    async with _child(setup, "--stall-after", str(setup.kill_after)) as child:
        acked: list[int] = []
        inflight: int | None = None
        while inflight is None:
            event = await child.next_event(child_wait)
            if event["event"] == "start":
                if event.get("resumed"):
                    # Someone else's checkpoint appeared since prepare(): not a fresh run.
                    raise WorkflowInUse(
                        f"workflow {setup.workflow_id} already has a checkpoint (next turn "
                        f"{event['next_turn']}): pass a new --workflow"
                    )
                say(f"child pid {event['pid']} started at turn {event['next_turn']}")
            elif event["event"] == "ack":
                acked.append(int(event["turn"]))
                say(f"  turn {event['turn']:>2} acknowledged (logged, checkpoint saved)")
            elif event["event"] == "inflight":
                inflight = int(event["turn"])
        child.kill()
        killed_code = await child.finish(child_wait)
    say(f"  turn {inflight:>2} in flight: logged to the ledger, checkpoint NOT saved")
    say(f"SIGKILL sent to pid {child.pid} (exit status {killed_code}): no cleanup, no flush")
    return KilledRun(child.pid, killed_code, acked, inflight)


async def resume(setup: DemoSetup, say: Say, child_wait: float) -> ResumedRun:
    """Stage 2: a fresh child rehydrates, re-runs the unacknowledged turn and finishes."""
    say("")
    say("== Stage 2: a fresh process rehydrates ==")
    run = ResumedRun(next_turn=None, reruns=[], acknowledged=[], bundle=None, compaction={})
    async with _child(setup) as child:
        while True:
            event = await child.next_event(child_wait)
            kind = event["event"]
            if kind == "start":
                run.bundle = event.get("bundle")
                run.next_turn = int(event["next_turn"])
                say(
                    f"child pid {event['pid']} called rehydrate_bundle(); the checkpoint says "
                    f"next turn = {run.next_turn}"
                )
                if run.bundle is not None:
                    say("")
                    say(render_bundle(run.bundle))
                    say("")
            elif kind == "rerun":
                run.reruns.append(int(event["turn"]))
                say(
                    f"  turn {event['turn']:>2} re-run (it was never acknowledged); the ledger "
                    f"already had it as {event['ledger_id']}, log_turn kept that one copy"
                )
            elif kind == "ack":
                run.acknowledged.append(int(event["turn"]))
                say(f"  turn {event['turn']:>2} acknowledged")
            elif kind == "done":
                run.compaction = event.get("compaction") or {}
                break
        code = await child.finish(child_wait)
    if code != 0:
        raise child.failure(f"resumed child exited with {code}")
    compaction = run.compaction
    if compaction.get("compacted"):
        say(
            f"long-term compaction: {compaction.get('entries')} entries folded into a "
            f"{compaction.get('chars')}-char summary"
        )
    else:
        say(f"long-term compaction: {compaction.get('reason') or 'nothing new to fold'}")
    return run


async def verify(setup: DemoSetup, say: Say) -> LedgerCheck:
    """Stage 3: read the ledger from outside the children and check every turn is there once."""
    say("")
    say("== Verification ==")
    history, summary = await read_ledger(setup.settings, setup.workflow_id)
    check = check_ledger(history, setup.turns, summary)
    for line in check.lines:
        say(line)
    say("PASS: every turn 1..N is in the ledger exactly once" if check.ok else "FAIL")
    return check
