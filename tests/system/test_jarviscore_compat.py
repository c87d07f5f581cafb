"""Side by side with the reference: the same calls through JarvisCore and through jarvismem.

One scenario runs through the real ``jarviscore-framework`` 3.0.0 (in its own venv,
``tests.reference_env``, as a subprocess) and through jarvismem's drop-in
``UnifiedMemory``, on the same real Redis (the reference's unprefixed keys of a
fresh workflow id, jarvismem's under the test's namespace) and on separate local
blob folders. What a caller sees is compared: the bundle's keys and value types,
the ledger tail's order and entries, the checkpoint round trip, the scratchpad
entries (``read_all``), the notes (``get_notes``), ``compress`` with a
``generate()`` client, and another step's and agent's bundle.

Where jarvismem differs on purpose, the difference is named in ``DELIBERATE`` with
its reason (the README's "Coming from JarvisCore" section says the same). The
test fails on a difference not listed there, and on a listed one that is no
longer seen (so the list stays true).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.memory import UnifiedMemory
from tests.conftest import REAL_REDIS_URL, MakeSettings, real_redis_available, require_backend
from tests.reference_env import run_reference

pytestmark = pytest.mark.integration

TURNS: list[dict[str, Any]] = [
    {
        "turn_id": "t1",
        "thought": "look up the API",
        "action": "http_get",
        "result": "200",
        "tokens": 5,
    },
    {"turn_id": "t2", "thought": "parse the body", "action": "json", "result": "42", "tokens": 0},
    {
        "turn_id": "t3",
        "thought": "try the token endpoint",
        "action": "post",
        "result": "ok",
        "tokens": 9,
    },
]
CHECKPOINT = json.dumps({"next_turn": 4, "plan": ["auth", "fetch"]})
FINDING = {"content": "API uses OAuth2. Token endpoint: /oauth/token"}
ATTEMPT = {"content": "Tried GET /v1/data: 404, wrong endpoint"}
SUMMARY = "The agent found the API uses OAuth2."
TAIL = 2

DELIBERATE: dict[str, str] = {
    "bundle.extra_keys": (
        "jarvismem's bundle adds 'spaces' (cognitive spaces) and 'degraded' (which tier "
        "failed or still has queued writes); every JarvisCore key is there with its type"
    ),
    "bundle.scratchpad": (
        "the bundle renders the scratchpad richer than get_notes(): the goal findings of "
        "every step and agent (carried forward), then this step's recent turns and notes, "
        "within a budget; get_notes() itself is JarvisCore's"
    ),
    "other_step.scratchpad": (
        "goal findings are carried into later steps' and other agents' bundles; JarvisCore "
        "leaves that to its kernel (promote_to_truth), its bundle shows the step's own only"
    ),
    "tail.entry_keys": (
        "ledger entries carry step_id and agent_id (which step and agent logged the turn) "
        "and name the stream id 'id', where JarvisCore uses '_id'"
    ),
    "tail.value_types": (
        "ledger values keep their types: a result logged as the string '200' reads back "
        "as '200'; JarvisCore json-decodes every string it can, so it reads back 200"
    ),
    "compress.prompt": (
        "jarvismem's rolling-summary prompt (previous summary + entries rendered one per "
        "line, redacted, map-reduced past a chunk size), not JarvisCore's JSON dump"
    ),
    "compress.max_tokens": (
        "jarvismem asks for the tokens its summary budget (SUMMARY_MAX_CHARS) needs, never "
        "more than a max_tokens the caller passes; JarvisCore always sends max_tokens=2000"
    ),
}

REFERENCE_DRIVER = r"""
import asyncio, json, sys
import redis
import redis.asyncio as aioredis
from jarviscore.memory.unified import UnifiedMemory
from jarviscore.storage.local import LocalBlobStorage
from jarviscore.storage.redis_store import RedisContextStore

arg = json.loads(sys.argv[1])


class TinyLLM:
    def __init__(self):
        self.calls = []

    async def generate(self, **kwargs):
        self.calls.append(kwargs)
        return {"content": arg["summary"], "tokens": {"input": 10, "output": 5, "total": 15}}


async def main():
    store = RedisContextStore(client=redis.Redis.from_url(arg["redis_url"], decode_responses=True))
    blob = LocalBlobStorage(arg["blob_dir"])
    mem = UnifiedMemory(arg["wf"], "s1", "researcher", redis_store=store, blob_storage=blob)
    for turn in arg["turns"]:
        await mem.log_turn(**turn)
    await mem.working.write("finding", arg["finding"], scope="goal")
    await mem.working.write("attempt", arg["attempt"])
    await mem.save_checkpoint(arg["checkpoint"])
    llm = TinyLLM()
    summary = await mem.ltm.compress(await mem.episodic.full_history(), llm)
    await mem.ltm.save_summary(summary)
    other = UnifiedMemory(arg["wf"], "s2", "writer", redis_store=store, blob_storage=blob)
    print(json.dumps({
        "read_all": await mem.working.read_all(),
        "notes": await mem.working.get_notes(),
        "checkpoint": await mem.load_checkpoint(),
        "summary": summary,
        "generate_calls": llm.calls,
        "bundle": await mem.rehydrate_bundle(ledger_tail=arg["tail"]),
        "other_bundle": await other.rehydrate_bundle(ledger_tail=arg["tail"]),
    }))


asyncio.run(main())
"""


class TinyLLM:
    """The ``generate()`` client shape JarvisCore's callers pass to ``compress``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def generate(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"content": SUMMARY, "tokens": {"input": 10, "output": 5, "total": 15}}


async def run_jarvismem(client: Any, blob_dir: Path, workflow_id: str, settings: Any) -> Any:
    """The driver's calls, through jarvismem's drop-in constructor."""
    blob = LocalBlobStorage(blob_dir)
    mem = UnifiedMemory(workflow_id, "s1", "researcher", client, blob, settings=settings)
    other = UnifiedMemory(workflow_id, "s2", "writer", client, blob, settings=settings)
    try:
        assert mem.working is not None and mem.ltm is not None and mem.episodic is not None
        for turn in TURNS:
            await mem.log_turn(**turn)
        await mem.working.write("finding", FINDING, scope="goal")
        await mem.working.write("attempt", ATTEMPT)
        await mem.save_checkpoint(CHECKPOINT)
        llm = TinyLLM()
        summary = await mem.ltm.compress(await mem.episodic.full_history(), llm)
        await mem.ltm.save_summary(summary)
        # What a caller sees, as JSON (the reference's answer crosses a pipe as JSON too).
        return json.loads(
            json.dumps(
                {
                    "read_all": await mem.working.read_all(),
                    "notes": await mem.working.get_notes(),
                    "checkpoint": await mem.load_checkpoint(),
                    "summary": summary,
                    "generate_calls": llm.calls,
                    "bundle": dict(await mem.rehydrate_bundle(ledger_tail=TAIL)),
                    "other_bundle": dict(await other.rehydrate_bundle(ledger_tail=TAIL)),
                }
            )
        )
    finally:
        await other.close()
        await mem.close()
        await blob.close()


def _without_ts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with their time stamps replaced by their type (the times differ)."""
    return [{k: (type(v).__name__ if k == "ts" else v) for k, v in e.items()} for e in entries]


def _types(bundle: dict[str, Any]) -> dict[str, str]:
    return {key: type(value).__name__ for key, value in bundle.items()}


def compare(ref: dict[str, Any], ours: dict[str, Any]) -> set[str]:
    """The names of the differences a caller would see; asserts what must be equal."""
    seen: set[str] = set()

    # Scratchpad entries and notes: JarvisCore's shapes exactly.
    assert _without_ts(ours["read_all"]) == _without_ts(ref["read_all"])
    assert ours["notes"] == ref["notes"]
    # Checkpoint round trip.
    assert ours["checkpoint"] == ref["checkpoint"] == CHECKPOINT
    # compress with a generate() client: same answer, same keyword names, same temperature.
    assert ours["summary"] == ref["summary"] == SUMMARY
    assert [sorted(c) for c in ours["generate_calls"]] == [sorted(c) for c in ref["generate_calls"]]
    for mine, theirs in zip(ours["generate_calls"], ref["generate_calls"], strict=True):
        assert mine["temperature"] == theirs["temperature"]
        if mine["prompt"] != theirs["prompt"]:
            seen.add("compress.prompt")
        if mine["max_tokens"] != theirs["max_tokens"]:
            seen.add("compress.max_tokens")
        assert TURNS[2]["thought"] in mine["prompt"] and TURNS[2]["thought"] in theirs["prompt"]

    for name, theirs, mine in (
        ("bundle", ref["bundle"], ours["bundle"]),
        ("other_step", ref["other_bundle"], ours["other_bundle"]),
    ):
        # Every JarvisCore key, with a value of the same type.
        assert set(theirs) <= set(mine)
        if set(mine) - set(theirs):
            seen.add("bundle.extra_keys")
        assert {k: _types(mine)[k] for k in theirs} == _types(theirs), name
        assert mine["ltm_summary"] == theirs["ltm_summary"] == SUMMARY
        assert mine["checkpoint"] == theirs["checkpoint"]
        assert mine["athena_context"] is theirs["athena_context"] is None
        # The ledger tail: the same turns, oldest first.
        assert [t["turn_id"] for t in mine["recent_turns"]] == ["t2", "t3"]
        assert [t["turn_id"] for t in theirs["recent_turns"]] == ["t2", "t3"]
        for m, t in zip(mine["recent_turns"], theirs["recent_turns"], strict=True):
            if set(m) != set(t):
                seen.add("tail.entry_keys")
            for key in ("thought", "action", "result", "tokens"):
                if m[key] != t[key]:
                    assert str(m[key]) == str(t[key]), key
                    seen.add("tail.value_types")
        if mine["scratchpad"] != theirs["scratchpad"]:
            seen.add(f"{name}.scratchpad")
    return seen


def test_jarvismem_shows_a_caller_what_jarviscore_shows(
    tmp_path: Path, make_settings: MakeSettings
) -> None:
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    workflow_id = "compat-" + uuid.uuid4().hex[:10]
    sync = redis.Redis.from_url(REAL_REDIS_URL)
    try:
        ref = run_reference(
            REFERENCE_DRIVER,
            {
                "redis_url": REAL_REDIS_URL,
                "blob_dir": str(tmp_path / "reference-blobs"),
                "wf": workflow_id,
                "turns": TURNS,
                "finding": FINDING,
                "attempt": ATTEMPT,
                "checkpoint": CHECKPOINT,
                "summary": SUMMARY,
                "tail": TAIL,
            },
            cwd=tmp_path,
        )

        async def ours() -> Any:
            client = aioredis.Redis.from_url(REAL_REDIS_URL)
            try:
                return await run_jarvismem(
                    client,
                    tmp_path / "jarvismem-blobs",
                    workflow_id,
                    make_settings(redis_url=REAL_REDIS_URL),
                )
            finally:
                await client.aclose()

        mine = asyncio.run(ours())
    finally:
        # The reference's keys are unprefixed: delete exactly this workflow's.
        keys = [f"ledgers:{workflow_id}", f"ltm:{workflow_id}"]
        keys += [k.decode() for k in sync.scan_iter(match=f"checkpoint:{workflow_id}:*")]
        sync.delete(*keys)
        sync.close()

    seen = compare(ref, mine)
    unexplained = seen - set(DELIBERATE)
    assert not unexplained, f"differences from JarvisCore not listed as deliberate: {unexplained}"
    stale = set(DELIBERATE) - seen
    assert not stale, f"listed as deliberate but no longer different: {stale}"
    # The carried finding is what makes the other step's scratchpad differ.
    assert ref["other_bundle"]["scratchpad"] == ""
    assert FINDING["content"] in mine["other_bundle"]["scratchpad"]
