"""A conformance suite for :class:`~jarvismem.recall.stores.RecallStore` implementations.

Subclass :class:`RecallStoreConformance` with a ``recall_store`` fixture (pytest), or
``await run_recall_conformance(store)`` without pytest. Every check writes under fresh
agent ids, and class attributes switch off what a backend honestly cannot do (its own
ranking model, no scope below the agent, no update in place). Usage:
docs/architecture.md, "Checking your own backends".
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

    fills_to_limit: ClassVar[bool] = True
    """Recency fill: matches first, then the newest entries that do not match, with
    score 0, up to ``limit`` (the ranking rule of :mod:`jarvismem.recall.stores`)."""
    falls_back_to_newest: ClassVar[bool] = True
    """A query matching nothing returns the scope's newest ``limit`` entries,
    newest first, with score 0 (the fill alone)."""
    ties_by_recency: ClassVar[bool] = True
    """Equal scores go to the most recently written entry first."""
    filters_and_min_score: ClassVar[bool] = True
    """``RecallRequest.filter`` (metadata equality) and ``min_score`` are honoured."""
    lexical: ClassVar[bool] = True
    """Words are matched lexically with stemming ("painted" finds "painting"), and
    an entry's ``occurred_at`` day is searchable ("May 2023")."""
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

    async def test_recall_returns_the_limit_whenever_the_scope_holds_that_many(
        self, recall_store: RecallStore
    ) -> None:
        if not self.fills_to_limit:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        for query in ("falcon deadline", "coffee", "quantum", "the of and"):
            for limit in (1, 3, len(CORPUS), len(CORPUS) + 5):
                found = await recall_store.recall(
                    RecallRequest(agent_id=agent, query=query, limit=limit)
                )
                assert len(found) == min(limit, len(CORPUS)), (query, limit, found)
                assert len({r.entry.id for r in found}) == len(found), (query, limit)

    async def test_matches_come_first_then_the_newest_others_fill_up_to_the_limit(
        self, recall_store: RecallStore
    ) -> None:
        if not self.fills_to_limit:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        found = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon deadline", limit=4)
        )
        # The one match, then the newest entries that do not match, newest first.
        assert [r.entry.content for r in found] == [CORPUS[1], CORPUS[5], CORPUS[4], CORPUS[3]]
        assert found[0].score > 0
        assert [r.score for r in found[1:]] == [0.0, 0.0, 0.0], found
        everything = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon deadline", limit=50)
        )
        assert len(everything) == len(CORPUS)
        assert [r.entry.content for r in everything[1:]] == [
            c for c in reversed(CORPUS) if c != CORPUS[1]
        ]

    async def test_a_result_that_names_its_source_names_the_right_one(
        self, recall_store: RecallStore
    ) -> None:
        # ``source`` is optional (None: the store does not say); when given, a match is
        # never called the fill and the fill (score 0) is never called a match.
        agent = unique_name()
        await self._corpus(recall_store, agent)
        found = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon deadline", limit=len(CORPUS))
        )
        for result in found:
            if result.source is not None:
                assert (result.source == "recency") == (result.score == 0), result

    async def test_the_fill_never_repeats_a_match_and_takes_upserts_as_newest(
        self, recall_store: RecallStore
    ) -> None:
        if not (self.fills_to_limit and self.upserts_in_place):
            return
        agent = unique_name()
        entries = await self._corpus(recall_store, agent)
        # CORPUS[1] becomes the newest entry and the only match.
        await recall_store.write(
            WriteRequest(agent_id=agent, id=entries[1].id, content="falcon deadline moved")
        )
        await recall_store.write(WriteRequest(agent_id=agent, id=entries[0].id, content="teal"))
        found = await recall_store.recall(RecallRequest(agent_id=agent, query="falcon", limit=3))
        assert [r.entry.content for r in found] == ["falcon deadline moved", "teal", CORPUS[5]]
        assert [r.entry.id for r in found].count(entries[1].id) == 1

    # --- min_score and filter ----------------------------------------------------------

    async def test_min_score_above_zero_leaves_out_the_fill_and_weaker_matches(
        self, recall_store: RecallStore
    ) -> None:
        if not self.filters_and_min_score:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        strict = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon deadline", limit=4, min_score=1e-9)
        )
        assert [r.entry.content for r in strict] == [CORPUS[1]], strict
        # Two matches of different strength: a threshold between them keeps the stronger.
        both = await recall_store.recall(
            RecallRequest(agent_id=agent, query="user database production", limit=6)
        )
        matches = [r for r in both if r.score > 0]
        assert len(matches) == 3, both
        between = (matches[0].score + matches[-1].score) / 2
        kept = await recall_store.recall(
            RecallRequest(
                agent_id=agent, query="user database production", limit=6, min_score=between
            )
        )
        assert kept and all(r.score >= between for r in kept), kept
        assert len(kept) < len(matches)
        assert [r.entry.id for r in kept] == [r.entry.id for r in matches[: len(kept)]]
        none = await recall_store.recall(
            RecallRequest(agent_id=agent, query="falcon", min_score=1e9)
        )
        assert none == []

    async def test_a_filter_keeps_only_entries_holding_every_pair_matches_and_fill_alike(
        self, recall_store: RecallStore
    ) -> None:
        if not self.filters_and_min_score:
            return
        agent = unique_name()
        labels = [
            {"who": "ann", "kind": "fact"},
            {"who": "bob", "kind": "fact"},
            {"who": "ann", "kind": "chat"},
            {"who": "bob", "kind": "chat"},
            {"who": "ann"},
        ]
        texts = ["ann likes kayaks", "bob likes kayaks", "ann said hi", "bob said hi", "ann naps"]
        await self.seed(
            recall_store,
            [
                WriteRequest(agent_id=agent, content=t, metadata=m)
                for t, m in zip(texts, labels, strict=True)
            ],
        )

        async def recall(query: str, wanted: dict[str, str], limit: int = 10) -> list[str]:
            found = await recall_store.recall(
                RecallRequest(agent_id=agent, query=query, limit=limit, filter=wanted)
            )
            return [r.entry.content for r in found]

        # The match of the other speaker is left out; the fill keeps to the filter too.
        assert await recall("kayaks", {"who": "ann"}) == [
            "ann likes kayaks",
            "ann naps",
            "ann said hi",
        ]
        assert await recall("kayaks", {"who": "bob", "kind": "fact"}) == ["bob likes kayaks"]
        assert await recall("hello", {"kind": "chat"}) == ["bob said hi", "ann said hi"]
        assert await recall("kayaks", {"who": "carol"}) == []
        assert await recall("kayaks", {"who": "ann"}, limit=1) == ["ann likes kayaks"]

    async def test_a_filter_reaches_past_many_better_matches_that_fail_it(
        self, recall_store: RecallStore
    ) -> None:
        if not self.filters_and_min_score:
            return
        agent = unique_name()
        await self.seed(
            recall_store,
            [
                *(
                    WriteRequest(agent_id=agent, content="otter otter otter", metadata={"n": "x"})
                    for _ in range(80)
                ),
                WriteRequest(
                    agent_id=agent, content="one otter among many words here", metadata={"n": "y"}
                ),
            ],
        )
        found = await recall_store.recall(
            RecallRequest(agent_id=agent, query="otter", limit=2, filter={"n": "y"})
        )
        assert [r.entry.content for r in found] == ["one otter among many words here"]
        assert found[0].score > 0

    # --- ties ------------------------------------------------------------------------------

    async def test_equal_scores_go_to_the_newest_entry_even_at_the_limit(
        self, recall_store: RecallStore
    ) -> None:
        if not self.ties_by_recency:
            return
        agent = unique_name()
        written = [
            await recall_store.write(WriteRequest(agent_id=agent, content="identical words here"))
            for _ in range(4)
        ]
        found = await recall_store.recall(RecallRequest(agent_id=agent, query="words", limit=4))
        assert [r.entry.id for r in found] == [e.id for e in reversed(written)]
        assert len({r.score for r in found}) == 1 and found[0].score > 0
        # At the cut, the newest of the tied entries wins.
        first = await recall_store.recall(RecallRequest(agent_id=agent, query="words", limit=1))
        assert [r.entry.id for r in first] == [written[-1].id]

    # --- lexical matching: stems and dates ---------------------------------------------

    async def test_inflected_words_find_each_other(self, recall_store: RecallStore) -> None:
        if not self.lexical:
            return
        agent = unique_name()
        await self._corpus(recall_store, agent)
        await self.seed(
            recall_store,
            [WriteRequest(agent_id=agent, content="Melanie was painting a sunrise")],
        )
        for query in ("paintings", "who painted", "sunrises"):
            found = await recall_store.recall(RecallRequest(agent_id=agent, query=query, limit=1))
            assert [r.entry.content for r in found] == ["Melanie was painting a sunrise"], query
            assert found[0].score > 0, query

    async def test_the_day_an_entry_happened_is_searchable(self, recall_store: RecallStore) -> None:
        if not self.lexical:
            return
        agent = unique_name()
        await self.seed(
            recall_store,
            [
                # ISO 8601 is accepted at the edge, as from JSON.
                WriteRequest.model_validate(
                    {
                        "agent_id": agent,
                        "content": "went to a support group",
                        "occurred_at": "2023-05-07",
                    }
                ),
                WriteRequest.model_validate(
                    {
                        "agent_id": agent,
                        "content": "went to a pottery class",
                        "occurred_at": "2023-06-20T10:00:00Z",
                    }
                ),
                WriteRequest(agent_id=agent, content="went to the beach"),
            ],
        )
        for query, expected in (
            ("where did she go in May 2023", "went to a support group"),
            ("what happened on 7 May, 2023", "went to a support group"),
            ("what did she do on June 20th", "went to a pottery class"),
        ):
            found = await recall_store.recall(RecallRequest(agent_id=agent, query=query, limit=1))
            assert [r.entry.content for r in found] == [expected], query
            assert found[0].score > 0, query

    async def test_occurred_at_defaults_to_creation_and_an_upsert_keeps_it(
        self, recall_store: RecallStore
    ) -> None:
        agent = unique_name()
        plain = await recall_store.write(WriteRequest(agent_id=agent, content="no date given"))
        assert plain.occurred_at == plain.created_at
        dated = await recall_store.write(
            WriteRequest(agent_id=agent, content="dated fact", occurred_at=1_683_504_000_000)
        )
        assert dated.occurred_at == 1_683_504_000_000
        if not self.upserts_in_place:
            return
        edited = await recall_store.write(
            WriteRequest(agent_id=agent, id=dated.id, content="dated fact, edited")
        )
        assert edited.occurred_at == dated.occurred_at
        listed = {e.id: e.occurred_at for e in await recall_store.list_entries(agent)}
        assert listed == {plain.id: plain.created_at, dated.id: dated.occurred_at}

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
        bad += [
            {"agent_id": agent, "content": "x", "occurred_at": "yesterday"},
            {"agent_id": agent, "content": "x", "occurred_at": True},
            {"agent_id": agent, "content": "x", "occurred_at": -1},
        ]
        for fields in bad:
            with raises(ValidationError, f"WriteRequest({fields})"):
                WriteRequest(**fields)
        for fields in (
            {"agent_id": agent, "query": " "},
            {"agent_id": agent, "query": "x", "limit": 0},
            {"agent_id": agent, "query": "x", "min_score": -1},
            {"agent_id": agent, "query": "x", "filter": {"k": 1}},
            {"agent_id": agent, "query": "x", "filter": {"": "v"}},
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
