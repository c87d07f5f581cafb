"""Prompt building, preflight, budgets, and the policy helpers around a store."""

from __future__ import annotations

from typing import Any

import pytest

from jarvismem.errors import (
    NamespaceContextMissingError,
    RecallStoreMissingError,
    SessionIdRequiredError,
)
from jarvismem.recall import (
    InMemoryRecallStore,
    MemoryEntry,
    MemoryPolicy,
    RecallResult,
    WriteRequest,
    build_messages,
    capture_conversation,
    conversation_capture_text,
    preflight,
    recall_for_turn,
)
from jarvismem.recall.prompt import TRUNCATION_MARKER
from jarvismem.spaces import MemoryContainer


def result(content: str, score: float = 1.0) -> RecallResult:
    return RecallResult(entry=MemoryEntry(agent_id="a1", content=content), score=score)


def spaces_snapshot() -> dict[str, Any]:
    mem = MemoryContainer()
    mem.world_put("user", "Ada")
    first = mem.tasks_add("write the report")
    mem.tasks_add("send the report")
    mem.tasks_complete(first["id"])
    return mem.to_dict()


INSTRUCTIONS = "You are a helpful agent."


def test_instructions_mode_adds_a_relevant_memory_message() -> None:
    messages = build_messages(
        INSTRUCTIONS,
        "hi",
        recalled=[result("likes tea"), result("lives in Paris")],
        policy=MemoryPolicy(),
    )
    assert messages == [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "system", "content": "Relevant memory:\n- likes tea\n- lives in Paris"},
        {"role": "user", "content": "hi"},
    ]


def test_entry_newlines_stay_on_one_line() -> None:
    messages = build_messages(
        INSTRUCTIONS, "hi", recalled=[result("User: a\nAssistant: b")], policy=MemoryPolicy()
    )
    assert messages[1]["content"] == "Relevant memory:\n- User: a Assistant: b"


def test_no_recalled_entries_means_no_memory_message() -> None:
    messages = build_messages(INSTRUCTIONS, "hi", recalled=[], policy=MemoryPolicy())
    assert [m["role"] for m in messages] == ["system", "user"]


def test_context_mode_renders_a_structured_block_per_source() -> None:
    bundle = {"ltm_summary": "Earlier we planned a trip.", "scratchpad": "- note one"}
    messages = build_messages(
        INSTRUCTIONS,
        "hi",
        bundle={**bundle, "spaces": spaces_snapshot()},
        recalled=[result("likes tea", 0.5)],
        policy=MemoryPolicy(inject="context"),
    )
    assert len(messages) == 3
    block = messages[1]["content"]
    assert block.startswith("Memory context:")
    assert "Relevant memory:" not in block
    sections = [line for line in block.splitlines() if line.startswith("## ")]
    assert sections == [
        "## Recalled memory",
        "## Spaces",
        "## Long-term summary",
        "## Scratchpad notes",
    ]
    assert "- [0.500] likes tea" in block
    assert "Earlier we planned a trip." in block and "- note one" in block


def test_spaces_render_world_and_only_open_tasks() -> None:
    messages = build_messages(
        INSTRUCTIONS,
        "hi",
        bundle={"spaces": spaces_snapshot()},
        recalled=[],
        policy=MemoryPolicy(),
    )
    block = messages[1]["content"]
    assert '- user: "Ada"' in block
    assert "1. send the report" in block
    assert "write the report" not in block


def test_max_entries_caps_the_entries_used() -> None:
    recalled = [result(f"fact {i}") for i in range(4)]
    pre = preflight(INSTRUCTIONS, "hi", recalled=recalled, policy=MemoryPolicy(max_entries=2))
    assert [r.entry.content for r in pre.used_entries] == ["fact 0", "fact 1"]
    assert [r.entry.content for r in pre.dropped_entries] == ["fact 2", "fact 3"]


def test_disabled_policy_uses_no_entries() -> None:
    recalled = [result("fact")]
    pre = preflight(INSTRUCTIONS, "hi", recalled=recalled, policy=MemoryPolicy(enabled=False))
    assert pre.used_entries == [] and pre.dropped_entries == recalled
    assert len(pre.messages) == 2


def test_preflight_counts_every_character() -> None:
    pre = preflight(INSTRUCTIONS, "hello", recalled=[result("x")], policy=MemoryPolicy())
    assert pre.chars == sum(len(m["content"]) for m in pre.messages)
    assert pre.messages == build_messages(
        INSTRUCTIONS, "hello", recalled=[result("x")], policy=MemoryPolicy()
    )


def test_budget_cuts_lowest_priority_first() -> None:
    bundle = {"ltm_summary": "S" * 100, "scratchpad": "N" * 100}
    pre = preflight(
        INSTRUCTIONS,
        "hi",
        bundle=bundle,
        recalled=[result("fact")],
        policy=MemoryPolicy(inject="context"),
        budget_chars=150,
    )
    block = pre.messages[1]["content"]
    assert "S" * 100 in block  # the summary is kept whole
    assert "N" * 30 + TRUNCATION_MARKER in block  # notes cut, with the marker
    assert "N" * 50 not in block
    assert [r.entry.content for r in pre.used_entries] == ["fact"]


def test_budget_drops_a_section_with_no_room_left() -> None:
    bundle = {"ltm_summary": "S" * 100, "scratchpad": "N" * 100}
    pre = preflight(
        INSTRUCTIONS, "hi", bundle=bundle, recalled=[], policy=MemoryPolicy(), budget_chars=90
    )
    block = pre.messages[1]["content"]
    assert "## Scratchpad notes" not in block
    assert block.count("S") == 90 - len(TRUNCATION_MARKER)


def test_budget_drops_lowest_ranked_entries_last() -> None:
    recalled = [result("a" * 40), result("b" * 40), result("c" * 40)]
    pre = preflight(
        INSTRUCTIONS,
        "hi",
        bundle={"scratchpad": "N" * 50},
        recalled=recalled,
        policy=MemoryPolicy(),
        budget_chars=85,
    )
    assert [r.entry.content[0] for r in pre.used_entries] == ["a", "b"]
    assert [r.entry.content[0] for r in pre.dropped_entries] == ["c"]
    assert all("N" not in m["content"] for m in pre.messages)


def test_a_lone_entry_longer_than_the_budget_is_cut() -> None:
    pre = preflight(
        INSTRUCTIONS, "hi", recalled=[result("z" * 500)], policy=MemoryPolicy(), budget_chars=100
    )
    line = pre.messages[1]["content"].splitlines()[1]
    assert line == "- " + "z" * (100 - len(TRUNCATION_MARKER)) + TRUNCATION_MARKER


def test_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        preflight(INSTRUCTIONS, "hi", recalled=[], policy=MemoryPolicy(), budget_chars=-1)


# --- capture and recall helpers --------------------------------------------------------


def test_conversation_capture_text() -> None:
    assert conversation_capture_text(" hi ", "hello!\n") == "User: hi\nAssistant: hello!"


async def test_capture_writes_when_policy_says_conversation() -> None:
    store = InMemoryRecallStore()
    policy = MemoryPolicy(capture="conversation", metadata={"app": "demo"})
    entry = await capture_conversation(store, policy, agent_id="a1", user="hi", assistant="hey")
    assert entry is not None
    assert entry.content == "User: hi\nAssistant: hey"
    # "source" is what the seed's troubleshooting filters captured turns on.
    assert entry.metadata == {"app": "demo", "kind": "conversation", "source": "conversation"}
    assert await store.list_entries("a1") == [entry]


@pytest.mark.parametrize(
    "policy",
    [
        MemoryPolicy(capture="manual"),
        MemoryPolicy(capture="off"),
        MemoryPolicy(enabled=False, capture="conversation"),
    ],
)
async def test_capture_is_skipped_otherwise(policy: MemoryPolicy) -> None:
    store = InMemoryRecallStore()
    assert await capture_conversation(store, policy, agent_id="a1", user="u", assistant="a") is None
    assert await store.list_entries("a1") == []


async def test_capture_without_store_is_a_clear_error() -> None:
    with pytest.raises(RecallStoreMissingError):
        await capture_conversation(
            None, MemoryPolicy(capture="conversation"), agent_id="a1", user="u", assistant="a"
        )


async def test_capture_in_session_scope_needs_a_session() -> None:
    policy = MemoryPolicy(capture="conversation", scope="session")
    with pytest.raises(SessionIdRequiredError):
        await capture_conversation(
            InMemoryRecallStore(), policy, agent_id="a1", user="u", assistant="a"
        )


async def test_recall_for_turn_uses_policy_scope_and_limit() -> None:
    store = InMemoryRecallStore()
    for i in range(4):
        await store.write(
            WriteRequest(agent_id="a1", namespace="acme", session_id="s1", content=f"tea fact {i}")
        )
    await store.write(WriteRequest(agent_id="a1", content="tea fact agent wide"))
    policy = MemoryPolicy(scope="session", namespace_from="tenant", max_entries=2)
    found = await recall_for_turn(
        store, policy, agent_id="a1", query="tea", session_id="s1", context={"tenant": "acme"}
    )
    assert len(found) == 2
    assert all(r.entry.namespace == "acme" and r.entry.session_id == "s1" for r in found)


async def test_recall_for_turn_disabled_returns_nothing_without_a_store() -> None:
    assert await recall_for_turn(None, MemoryPolicy(enabled=False), agent_id="a1", query="q") == []


async def test_recall_for_turn_without_store_is_a_clear_error() -> None:
    with pytest.raises(RecallStoreMissingError):
        await recall_for_turn(None, MemoryPolicy(), agent_id="a1", query="q")


async def test_recall_for_turn_missing_namespace_context() -> None:
    with pytest.raises(NamespaceContextMissingError):
        await recall_for_turn(
            InMemoryRecallStore(), MemoryPolicy(namespace_from="tenant"), agent_id="a1", query="q"
        )


# --- the seed design's headline turn -------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def lexical_store(request: pytest.FixtureRequest, keyspace: Any, fake_redis: Any) -> Any:
    from jarvismem.recall import RedisRecallStore

    if request.param == "memory":
        return InMemoryRecallStore()
    return RedisRecallStore(fake_redis, keyspace)


async def test_a_fact_written_before_is_injected_into_a_hello_turn(lexical_store: Any) -> None:
    # Write "User prefers the name Alex.", then a turn "hello": the fact shares
    # no word with the greeting, and must reach the prompt all the same.
    policy = MemoryPolicy.parse(True)
    await lexical_store.write(
        policy.write_request(agent_id="a1", content="User prefers the name Alex.")
    )
    recalled = await recall_for_turn(lexical_store, policy, agent_id="a1", query="hello")
    pre = preflight("You are helpful.", "hello", recalled=recalled, policy=policy)
    assert [r.entry.content for r in pre.used_entries] == ["User prefers the name Alex."]
    assert pre.used_entries[0].entry.metadata["source"] == "manual"
    memory = [m["content"] for m in pre.messages if m["role"] == "system"][1]
    assert memory == "Relevant memory:\n- User prefers the name Alex."
    assert pre.messages[-1] == {"role": "user", "content": "hello"}


async def test_memory_false_injects_and_captures_nothing(lexical_store: Any) -> None:
    on = MemoryPolicy.parse({"capture": "conversation"})
    await lexical_store.write(on.write_request(agent_id="a1", content="User prefers Alex."))
    off = MemoryPolicy.parse(False, capture="conversation")
    assert await recall_for_turn(lexical_store, off, agent_id="a1", query="hello") == []
    assert (
        await capture_conversation(lexical_store, off, agent_id="a1", user="hi", assistant="hey")
        is None
    )
    assert len(await lexical_store.list_entries("a1")) == 1
