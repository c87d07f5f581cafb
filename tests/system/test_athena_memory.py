"""End to end: a kernel loop's conversation becomes Athena mid-term memory that a later
session recalls, and that another namespace never sees.

Each "session" is a runtime of its own, built from settings as a user's process builds
it (``MemoryRuntime.from_env``), against real Redis, a local blob folder and the fake
Athena server, which forms chains the way the server does (from user messages only,
per tenant and user). Between the sessions the server's clock moves three hours on, so
its short-term window has expired: whatever the second session gets back about the
first can only come from mid-term memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import STM_TTL_SECONDS, FakeAthenaServer
from tests.conftest import REAL_REDIS_URL, MakeSettings

pytestmark = pytest.mark.integration

AGENT = "concierge"
INSTRUCTIONS = "You are a travel concierge."
PASSPORT_TALK = [
    ("My passport expires in March, how do I renew my passport?", "Use form DS-82 by mail."),
    ("Which photos does the passport renewal need?", "Two 2x2 inch photos, white background."),
    ("How long does passport renewal take?", "Six to eight weeks, two with expedite."),
]
GARDEN_TALK = [
    ("When should I prune tomato plants in the garden?", "Prune suckers weekly."),
    ("Which tomato varieties suit a small garden?", "Cherry tomatoes in containers."),
]


def _settings(
    make_settings: MakeSettings, tmp_path: Path, athena: FakeAthenaServer, ns: str
) -> Settings:
    # Both namespaces share ATHENA_TENANT_ID and ATHENA_USER_ID: only the namespace
    # tells them apart, which is the isolation under test.
    return make_settings(
        jarvismem_namespace=ns,
        redis_url=REAL_REDIS_URL,
        storage_base_path=str(tmp_path / ns / "blobs"),
        outbox_path=str(tmp_path / ns / "outbox"),
        athena_url=athena.url,
        athena_tenant_id="acme",
        athena_user_id="travel",
    )


async def _kernel_session(settings: Settings, workflow: str, talk: list[tuple[str, str]]) -> None:
    """One process's kernel loop: preflight, log the turn with the user's message, capture."""
    async with await MemoryRuntime.from_env(settings) as runtime:
        mem = runtime.memory(workflow, "chat", AGENT)
        for turn, (user, reply) in enumerate(talk, start=1):
            await mem.preflight(INSTRUCTIONS, user)
            await mem.log_turn(
                turn, "answer from the guide", "guide.lookup()", "answered", user_message=user
            )
            await mem.capture(user, reply, turn_id=turn)
        athena = await runtime.athena_memory(AGENT)
        assert athena is not None
        await athena.flush(timeout=10.0)
        assert len(athena.outbox) == 0  # everything delivered before the process ends


async def _recall(settings: Settings, workflow: str, query: str) -> dict[str, Any]:
    async with await MemoryRuntime.from_env(settings) as runtime:
        mem = runtime.memory(workflow, "chat", AGENT)
        bundle = await mem.rehydrate_bundle(query=query)
        assert bundle["degraded"] == {}
        athena = await runtime.athena_memory(AGENT)
        assert athena is not None
        hits = await athena.search(query)
        return {"bundle": bundle, "hits": hits}


async def test_a_conversation_becomes_mid_term_memory_for_the_next_session_and_no_other_namespace(
    make_settings: MakeSettings, tmp_path: Path, athena_server: FakeAthenaServer
) -> None:
    ns = make_settings().jarvismem_namespace
    first = _settings(make_settings, tmp_path, athena_server, ns)
    other = _settings(make_settings, tmp_path, athena_server, ns + "x")

    # Session 1 of namespace 1, and a session of namespace 2 on another topic (it writes
    # too, so it has a session of its own and its reads really ask the server).
    await _kernel_session(first, "wf-trip", PASSPORT_TALK)
    await _kernel_session(other, "wf-garden", GARDEN_TALK)
    athena_server.advance(STM_TTL_SECONDS + 3600)  # the short-term window has expired

    # Session 2 of namespace 1: another workflow, a new process, nothing local to go on.
    seen = await _recall(first, "wf-next-trip", "passport renewal photos")
    ctx = seen["bundle"]["athena_context"]
    assert ctx is not None and ctx["short_term"] == []  # expired: what follows is mid-term
    summaries = " ".join(chain["summary"] for chain in ctx["mid_term"])
    # The conversation, not only the agent's own events (the fake bounds a summary's length).
    assert PASSPORT_TALK[0][0] in summaries and PASSPORT_TALK[0][1] in summaries
    assert summaries.count(PASSPORT_TALK[0][0]) == 1  # log_turn and capture sent it once
    assert "tomato" not in summaries
    assert seen["bundle"]["recent_turns"] == []  # the new workflow's ledger is empty
    hit_text = " ".join(hit["content"] for hit in seen["hits"])
    assert "DS-82" in hit_text and "tomato" not in hit_text

    # Namespace 2, same tenant and Athena user setting: none of namespace 1's memory.
    theirs = await _recall(other, "wf-garden-2", "passport renewal photos")
    their_ctx = theirs["bundle"]["athena_context"]
    assert their_ctx is not None
    their_text = " ".join(chain["summary"] for chain in their_ctx["mid_term"])
    their_text += " ".join(hit["content"] for hit in theirs["hits"])
    assert "tomato" in their_text  # its own conversation did form memory
    assert "passport" not in their_text.lower() and "DS-82" not in their_text
