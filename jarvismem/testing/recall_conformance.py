"""A conformance suite for :class:`~jarvismem.recall.stores.RecallStore` implementations.

Check your own store with pytest (``pytest-asyncio`` installed) by subclassing
the suite and providing a ``recall_store`` fixture::

    import pytest
    from jarvismem.testing.recall_conformance import RecallStoreConformance

    class TestMyRecallStore(RecallStoreConformance):
        @pytest.fixture
        async def recall_store(self):
            return MyRecallStore(...)

or without pytest: ``await run_recall_conformance(store)`` raises
``AssertionError`` naming the first check that failed.

Every check writes under fresh random agent ids, so the checks can share one
store. Class attributes describe what a backend honestly cannot do (a remote
service may rank with its own model, may not scope below the agent, may not
update in place); a subclass switches the matching checks off, and
:meth:`RecallStoreConformance.seed` can be overridden for a backend that builds
its search index itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError

from jarvismem.recall.models import MemoryEntry, RecallRequest, WriteRequest
from jarvismem.recall.stores import RecallStore
from jarvismem.testing._conformance import PYTEST_MARKS, raises, run_checks, unique_name

CORPUS: tuple[str, ...] = (
    "The user's favourite colour is teal",
    "Project Falcon has its deadline on March 14",
    "The staging database runs PostgreSQL 15 on port 5433",
    "Alice prefers concise answers without emojis",
    "The office coffee machine is broken on Fridays",
    "Deploys to production need approval from Bob",
)
"""A small fixed corpus with little shared vocabulary."""

QUERIES: tuple[tuple[str, int], ...] = (
    ("what colour does the user like", 0),
    ("falcon deadline", 1),
    ("which port does the staging database use", 2),
    ("how should answers to Alice look", 3),
    ("coffee machine broken", 4),
    ("who approves production deploys", 5),
)
"""``(query, index in CORPUS of the entry that must come first)``."""


class RecallStoreConformance:
    """The recall store contract, one behaviour per ``test_`` method.

    Each method takes the ``recall_store`` under test; subclasses supply it as a
    pytest fixture.
    """

    pytestmark = PYTEST_MARKS

    ranks_only_matches: ClassVar[bool] = True
    """Lexical ranking: when some entries share words with the query, only those
    come back (no unrelated entry pads them out)."""
    falls_back_to_newest: ClassVar[bool] = True
    """A query matching nothing returns the scope's newest ``limit`` entries,
    newest first, with score 0 (the ranking rule of :mod:`jarvismem.recall.stores`)."""
    recall_is_scoped: ClassVar[bool] = True
    """Recall sees only the request's (namespace, agent, session) scope."""
    upserts_in_place: ClassVar[bool] = True
    """After an upsert, recall finds the new content and no longer the old."""

    async def seed(self, store: RecallStore, requests: list[WriteRequest]) -> list[MemoryEntry]:
        """Write a corpus. Override when the backend's index is built elsewhere."""
        return [await store.write(r) for r in requests]

    async def _corpus(self, store: RecallStore, agent: str, **scope: Any) -> list[MemoryEntry]:
        return await self.seed(
            store, [WriteRequest(agent_id=agent, content=c, **scope) for c in CORPUS]
        )

    # --- writing and listing ---------------------------------------------------------

    async def test_write_returns_the_stored_entry(self, recall_store: RecallStore) -> None:
        agent = unique_name()
        entry = await recall_store.write(
            WriteRequest(agent_id=agent, content="  remember the milk ", metadata={"k": "v"})
        )
        assert entry.id.startswith("mem_"), entry.id
        assert entry.content == "remember the milk"
        assert entry.metadata == {"k": "v"}
        assert (entry.agent_id, entry.session_id, entry.namespace) == (agent, None, "default")
        assert entry.created_at <= entry.updated_at

    async def test_list_entries_returns_writes_oldest_first(
        self, recall_store: RecallStore
    ) -> None:
        agent = unique_name()
        written = [
            await recall_store.write(WriteRequest(agent_id=agent, content=f"fact number {i}"))
            for i in range(3)
        ]
        listed = await recall_store.list_entries(agent)
        assert [e.id for e in listed] == [e.id for e in written]
        assert [e.content for e in listed] == [e.content for e in written]

    async def test_write_with_an_id_is_an_upsert(self, recall_store: RecallStore) -> None:
        agent = unique_name()
        first = await recall_store.write(
            WriteRequest(agent_id=agent, id="mem_fixed1", content="the sky is green")
        )
        second = await recall_store.write(
            WriteRequest(agent_id=agent, id="mem_fixed1", content="the sky is blue")
        )
        assert second.id == first.id == "mem_fixed1"
        assert second.created_at == first.created_at
        listed = await recall_store.list_entries(agent)
        assert [(e.id, e.content) for e in listed] == [("mem_fixed1", "the sky is blue")]

    async def test_upsert_changes_what_recall_finds(self, recall_store: RecallStore) -> None:
        if not self.upserts_in_place:
            return
        agent = unique_name()
        await recall_store.write(WriteRequest(agent_id=agent, id="mem_up", content="zebra stripes"))
        await recall_store.write(WriteRequest(agent_id=agent, id="mem_up", content="giraffe neck"))
        found = await recall_store.recall(RecallRequest(agent_id=agent, query="giraffe"))
        assert [r.entry.content for r in found] == ["giraffe neck"]
        assert found[0].score > 0, found
        # The old words match nothing any more: at most the newest-entries
        # fallback (score 0), never a match on the replaced content.
        stale = await recall_store.recall(RecallRequest(agent_id=agent, query="zebra"))
        assert all(r.score == 0 and r.entry.content == "giraffe neck" for r in stale), stale

    # --- ranking ------------------------------------------------------------------------

    async def test_recall_puts_the_relevant_entry_first(self, recall_store: RecallStore) -> None:
        agent = unique_name()
        await self._corpus(recall_store, agent)
        for query, expected in QUERIES:
            found = await recall_store.recall(RecallRequest(agent_id=agent, query=query, limit=3))
            assert found, f"nothing recalled for {query!r}"
            assert found[0].entry.content == CORPUS[expected], (query, found[0].entry.content)

    async def test_recall_scores_are_non_negative_and_descending(
        self, recall_store: RecallStore
    ) -> None:
        agent = unique_name()
        await self._corpus(recall_store, agent)
        found = await recall_store.recall(
            RecallRequest(agent_id=agent, query="the user database on production", limit=6)
        )
        scores = [r.score for r in found]
        assert all(s >= 0 for s in scores), scores
        assert scores == sorted(scores, reverse=True), scores

    async def test_recall_respects_the_limit(self, recall_store: RecallStore) -> None:
        agent = unique_name()
        await self.seed(
            recall_store,
            [WriteRequest(agent_id=agent, content=f"note {i} about budgets") for i in range(6)],
        )
        for limit in (1, 2, 4):
            found = await recall_store.recall(
                RecallRequest(agent_id=agent, query="budgets", limit=limit)
            )
            assert len(found) == limit, (limit, len(found))

    async def test_matches_are_not_padded_with_unrelated_entries(
        self, recall_store: RecallStore
    ) -> None:
        if not self.ranks_only_matches:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        found = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon deadline", limit=6)
        )
        assert [r.entry.content for r in found] == [CORPUS[1]], found
        assert found[0].score > 0

    async def test_recall_of_unrelated_words_returns_the_newest_entries(
        self, recall_store: RecallStore
    ) -> None:
        if not self.falls_back_to_newest:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        for query in ("quantum", "the of and"):  # no shared word; stopwords only
            found = await recall_store.recall(RecallRequest(agent_id=agent, query=query, limit=3))
            assert [r.entry.content for r in found] == list(reversed(CORPUS[-3:])), (query, found)
            assert [r.score for r in found] == [0.0, 0.0, 0.0], (query, found)
        everything = await recall_store.recall(
            RecallRequest(agent_id=agent, query="quantum", limit=50)
        )
        assert [r.entry.content for r in everything] == list(reversed(CORPUS))

    async def test_a_greeting_recalls_the_fact_written_before(
        self, recall_store: RecallStore
    ) -> None:
        # The seed design's headline turn: a fact, then a turn that never names it.
        if not self.falls_back_to_newest:
            return
        agent = unique_name()
        await self.seed(
            recall_store, [WriteRequest(agent_id=agent, content="User prefers the name Alex.")]
        )
        found = await recall_store.recall(RecallRequest(agent_id=agent, query="hello", limit=5))
        assert [r.entry.content for r in found] == ["User prefers the name Alex."], found

    async def test_the_fallback_takes_upserts_as_newest_and_stays_in_scope(
        self, recall_store: RecallStore
    ) -> None:
        if not (self.falls_back_to_newest and self.recall_is_scoped and self.upserts_in_place):
            return
        agent = unique_name()
        first = await recall_store.write(WriteRequest(agent_id=agent, content="alpha fact"))
        await recall_store.write(WriteRequest(agent_id=agent, content="beta fact"))
        await recall_store.write(
            WriteRequest(agent_id=agent, session_id="s1", content="session gamma")
        )
        await recall_store.write(
            WriteRequest(agent_id=agent, namespace="other-ns", content="foreign delta")
        )
        await recall_store.write(WriteRequest(agent_id=agent, id=first.id, content="alpha again"))
        found = await recall_store.recall(RecallRequest(agent_id=agent, query="hello", limit=5))
        assert [r.entry.content for r in found] == ["alpha again", "beta fact"], found
        session = await recall_store.recall(
            RecallRequest(agent_id=agent, session_id="s1", query="hello")
        )
        assert [r.entry.content for r in session] == ["session gamma"], session

    async def test_recall_of_an_empty_scope_is_empty(self, recall_store: RecallStore) -> None:
        if not self.recall_is_scoped:
            return
        nobody = RecallRequest(agent_id=unique_name(), query="anything")
        assert await recall_store.recall(nobody) == []

    # --- scopes ---------------------------------------------------------------------------

    async def test_session_entries_are_separate_from_agent_entries(
        self, recall_store: RecallStore
    ) -> None:
        agent = unique_name()
        await recall_store.write(WriteRequest(agent_id=agent, content="agent wide walrus"))
        await recall_store.write(
            WriteRequest(agent_id=agent, session_id="s1", content="session one walrus")
        )
        assert [e.content for e in await recall_store.list_entries(agent)] == ["agent wide walrus"]
        assert [e.content for e in await recall_store.list_entries(agent, "s1")] == [
            "session one walrus"
        ]
        assert await recall_store.list_entries(agent, "s2") == []
        if self.recall_is_scoped:
            found = await recall_store.recall(
                RecallRequest(agent_id=agent, session_id="s1", query="walrus")
            )
            assert [r.entry.content for r in found] == ["session one walrus"]
            other = await recall_store.recall(
                RecallRequest(agent_id=agent, session_id="s2", query="walrus")
            )
            assert other == []

    async def test_namespaces_are_separate(self, recall_store: RecallStore) -> None:
        agent = unique_name()
        await recall_store.write(
            WriteRequest(agent_id=agent, namespace="tenant-a", content="alpha penguin")
        )
        await recall_store.write(
            WriteRequest(agent_id=agent, namespace="tenant-b", content="beta penguin")
        )
        assert [e.content for e in await recall_store.list_entries(agent, None, "tenant-a")] == [
            "alpha penguin"
        ]
        assert await recall_store.list_entries(agent) == []
        if self.recall_is_scoped:
            found = await recall_store.recall(
                RecallRequest(agent_id=agent, namespace="tenant-b", query="penguin")
            )
            assert [r.entry.content for r in found] == ["beta penguin"]

    async def test_agents_are_separate(self, recall_store: RecallStore) -> None:
        one, two = unique_name(), unique_name()
        await recall_store.write(WriteRequest(agent_id=one, content="private otter"))
        assert await recall_store.list_entries(two) == []
        if self.recall_is_scoped:
            assert await recall_store.recall(RecallRequest(agent_id=two, query="otter")) == []

    # --- validation -------------------------------------------------------------------------

    async def test_bad_requests_are_refused_before_reaching_the_store(
        self, recall_store: RecallStore
    ) -> None:
        agent = unique_name()
        bad: list[dict[str, Any]] = [
            {"agent_id": agent, "content": "   "},
            {"agent_id": "../x", "content": "x"},
            {"agent_id": agent, "session_id": "a:b", "content": "x"},
            {"agent_id": agent, "namespace": "", "content": "x"},
            {"agent_id": agent, "id": "has space", "content": "x"},
        ]
        for fields in bad:
            with raises(ValidationError, f"WriteRequest({fields})"):
                WriteRequest(**fields)
        for fields in (
            {"agent_id": agent, "query": " "},
            {"agent_id": agent, "query": "x", "limit": 0},
        ):
            with raises(ValidationError, f"RecallRequest({fields})"):
                RecallRequest(**fields)
        assert await recall_store.list_entries(agent) == []


async def run_recall_conformance(
    store: RecallStore, suite: RecallStoreConformance | None = None
) -> None:
    """Run every check of the suite against ``store``.

    ``suite``: an instance of a :class:`RecallStoreConformance` subclass with
    the backend's flags and ``seed`` (default: the full contract). Raises
    ``AssertionError`` naming the first failing check.
    """
    await run_checks(suite or RecallStoreConformance(), store)
