"""Hybrid recall: BM25 and embeddings fused, with the embedding off the write path.

:class:`HybridRecallStore` wraps a lexical :class:`~jarvismem.recall.stores.RecallStore`
(the ``inner`` store keeps the entries and the BM25 index) and adds vectors
(:mod:`jarvismem.recall.vectors`) made by an
:class:`~jarvismem.backends.embeddings.protocol.Embedder`.

**Writing.** ``write()`` writes through ``inner``, records the entry as pending in
the vector store (durable in Redis: right after the lexical write), starts the
scope's background embedder and returns: no embedding on the hot path. The
background task embeds pending entries in batches of ``batch_size``; when the
embedder fails, the entries stay pending and the task retries after a backoff
(``retry_base`` doubling to ``retry_cap``); ``write()`` never fails because of the
embedder. Pending entries left by a crash or an outage are drained by the first
store to start (on its first write or recall) in any process.

**Recalling.** The query is embedded once. Candidates are the lexical matches
(the inner store's top ``candidates``, asked with ``min_score`` just above 0: matches
only, no fill) and the vector top ``candidates`` of positive cosine (the cosine of
every lexical candidate is used too, not only of the vector top); both keep to the
request's ``filter``. Each candidate (a *match*, by words or by meaning) scores

    score = lexical_weight  * bm25 / max bm25 among the candidates
          + semantic_weight * cosine / max cosine among the candidates
          + recency_weight  * (updated_at - oldest) / (newest - oldest)

(recency over the candidates), so a match scores above 0 and at most the sum of
the weights (2.55 by default). The score ranks the results of one recall: each
signal is relative to the best candidate of that recall, so a query unrelated to
everything still has a best match near the top of the scale. ``min_score``
applies to this score. Matches come highest score first (ties: newer, then smaller
id). When fewer than ``limit`` entries match and ``min_score`` is 0, the list is
filled up with the newest entries of the scope (passing the filter) that match
neither way, each with score 0: the recency fill of the lexical stores
(:mod:`jarvismem.recall.stores`), so recall returns ``limit`` results whenever the
scope holds that many. What differs from the lexical ranking rule: meaning brings
entries that share no word with the query, so a query without a shared word ranks
by meaning rather than falling back to the newest entries; and recency is part of
the score, so entries equally relevant by words and meaning score apart, the newer
higher (rather than tying).

The defaults (1.0, 1.5, 0.05; 50 candidates) were chosen on the LoCoMo dev set
and re-checked after the lexical changes (docs/recall.md): dividing each signal by
its best value makes the weights independent of the embedder's cosine scale and of
BM25's; a normalised-score sum beats reciprocal-rank fusion there (R@10 0.690
against 0.614 with all-MiniLM-L6-v2); semantic weights 1.0-1.75 all reach
0.690-0.693, 1.5 stayed; recency only breaks near-ties (questions there span the
whole history, 0.05 costs 0.002 of R@10; in an agent's memory the newer of two
close facts is the one to show). An entry not yet embedded ranks on its lexical score (and recency)
alone; when the embedder is down, or the query embedding takes longer than
``query_timeout``, the recall is the lexical one (with fused scores).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from jarvismem import defaults
from jarvismem.backends.embeddings.protocol import Embedder
from jarvismem.defaults import RECALL_NAMESPACE
from jarvismem.errors import InvalidPayloadError, JarvisMemError
from jarvismem.keys import KeySpace
from jarvismem.recall.models import (
    MemoryEntry,
    RecallRequest,
    RecallResult,
    RecallSource,
    WriteRequest,
)
from jarvismem.recall.stores import DeletableRecallStore, RecallStore, passes
from jarvismem.recall.vectors import InMemoryVectorStore, VectorHit, VectorStore
from jarvismem.resilience import Backoff

__all__ = [
    "DEFAULT_HYBRID",
    "DEFAULT_WEIGHTS",
    "FusionWeights",
    "HybridPolicy",
    "HybridRecallStore",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """Weights of the three signals of a hybrid score (each signal is in [0, 1])."""

    lexical: float = 1.0
    semantic: float = 1.5
    recency: float = 0.05

    def __post_init__(self) -> None:
        if min(self.lexical, self.semantic, self.recency) < 0:
            raise InvalidPayloadError("fusion weights must be >= 0")


DEFAULT_WEIGHTS = FusionWeights()


@dataclass(frozen=True, slots=True)
class HybridPolicy:
    """How a :class:`HybridRecallStore` ranks, embeds and waits.

    Attributes:
        weights: the fusion weights of the three signals.
        candidates: how many lexical and vector candidates each are fused.
        batch_size: most entries embedded per embedder call.
        retry_base, retry_cap: backoff of background embedding after a failure, s.
        query_timeout: longest wait for a query's embedding before recall answers
            lexically, s.
    """

    weights: FusionWeights = DEFAULT_WEIGHTS
    candidates: int = defaults.RECALL_HYBRID_CANDIDATES
    batch_size: int = defaults.EMBEDDINGS_BATCH
    retry_base: float = defaults.RECALL_EMBED_RETRY_BASE
    retry_cap: float = defaults.RECALL_EMBED_RETRY_CAP
    query_timeout: float = defaults.RECALL_QUERY_EMBED_TIMEOUT

    def __post_init__(self) -> None:
        # A bad bound would only show on the first write or recall.
        if self.candidates < 1 or self.batch_size < 1:
            raise InvalidPayloadError("candidates and batch_size must be >= 1")
        if self.query_timeout <= 0:
            raise InvalidPayloadError("query_timeout must be > 0")
        if self.retry_base < 0 or self.retry_cap < 0:
            raise InvalidPayloadError("retry_base and retry_cap must be >= 0")


DEFAULT_HYBRID = HybridPolicy()


class HybridRecallStore:
    """A recall store fusing ``inner``'s BM25 with vector similarity (module docstring).

    ``vectors``: where vectors and pending entries live (default: in memory; give a
    :class:`~jarvismem.recall.vectors.RedisVectorStore` for durability).
    ``policy``: weights, candidate count, batch size, retry backoff and query timeout.
    ``owns_embedder``: :meth:`aclose` closes the embedder too (its ``aclose()``, if any).
    ``background``: embed pending entries in background tasks, started by the first
    write or recall. False starts none (a read-only inspector, or a runtime made
    with ``background=False``): writes leave their entries pending for a process
    that embeds, and recall ranks with the vectors already stored, so it writes
    nothing. Close with :meth:`aclose` (stops the background embedding; pending
    entries stay recorded for the next start).
    """

    def __init__(
        self,
        inner: RecallStore,
        embedder: Embedder,
        *,
        vectors: VectorStore | None = None,
        policy: HybridPolicy = DEFAULT_HYBRID,
        owns_embedder: bool = False,
        background: bool = True,
    ) -> None:
        self.policy = policy
        self.background = background
        self.query_timeout = policy.query_timeout
        self.owns_embedder = owns_embedder
        self.inner = inner
        self.embedder = embedder
        self.vectors: VectorStore = vectors if vectors is not None else InMemoryVectorStore()
        self.weights = policy.weights
        self.candidates = policy.candidates
        self.batch_size = policy.batch_size
        self._backoff = Backoff(base=policy.retry_base, cap=policy.retry_cap, jitter="equal")
        self._drains: dict[str, asyncio.Task[None]] = {}
        self._wakeups: set[str] = set()
        self._started = False
        self._closed = False

    # --- writing ----------------------------------------------------------------------

    async def write(self, request: WriteRequest) -> MemoryEntry:
        """Write lexically through ``inner``, queue the embedding; returns the entry."""
        entry = await self.inner.write(request)
        scope = KeySpace.recall_scope(entry.namespace, entry.agent_id, entry.session_id)
        await self.vectors.mark_pending(scope, entry)
        if self.background:
            await self._start()
            self._schedule(scope)
        return entry

    async def delete(
        self,
        entry_id: str,
        *,
        agent_id: str,
        session_id: str | None = None,
        namespace: str = RECALL_NAMESPACE,
    ) -> bool:
        """Forget an entry (lexically and its vector); returns whether it existed.

        ``NotImplementedError`` when ``inner`` cannot delete.
        """
        if not isinstance(self.inner, DeletableRecallStore):
            raise NotImplementedError(f"{type(self.inner).__name__} cannot delete entries")
        existed = await self.inner.delete(
            entry_id, agent_id=agent_id, session_id=session_id, namespace=namespace
        )
        scope = KeySpace.recall_scope(namespace, agent_id, session_id)
        await self.vectors.delete(scope, entry_id)
        return existed

    async def list_entries(
        self, agent_id: str, session_id: str | None = None, namespace: str = RECALL_NAMESPACE
    ) -> list[MemoryEntry]:
        """Every entry of one scope, oldest first (``inner``'s)."""
        return await self.inner.list_entries(agent_id, session_id, namespace)

    # --- background embedding ---------------------------------------------------------

    async def _start(self) -> None:
        """Once: drain the scopes left pending by an earlier process (or this one)."""
        if self._started:
            return
        self._started = True
        try:
            scopes = await self.vectors.pending_scopes()
        except JarvisMemError as exc:
            log.warning("hybrid recall: cannot list pending scopes (%s); drained on writes", exc)
            return
        for scope in scopes:
            self._schedule(scope)

    def _schedule(self, scope: str) -> None:
        if self._closed:
            return
        task = self._drains.get(scope)
        if task is not None and not task.done():
            self._wakeups.add(scope)  # more came in: the running task looks again
            return
        task = asyncio.get_running_loop().create_task(
            self._drain(scope), name=f"jarvismem-embed:{scope}"
        )
        self._drains[scope] = task

    async def _drain(self, scope: str) -> None:
        failures = 0
        while not self._closed:
            self._wakeups.discard(scope)
            try:
                batch = await self.vectors.pending(scope, self.batch_size)
                if not batch:
                    if await self.vectors.settle_scope(scope) and scope not in self._wakeups:
                        break
                    continue
                vectors = await self.embedder.embed([e.content for e in batch])
                for entry, vector in zip(batch, vectors, strict=True):
                    await self.vectors.put(scope, entry, self.embedder.name, vector)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the embedder or the store: retry later, never lose
                delay = self._backoff.delay(failures)
                failures += 1
                log.warning(
                    "hybrid recall: embedding %s failed (%s: %s); entries stay pending, "
                    "retrying in %.1fs",
                    scope,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        self._drains.pop(scope, None)

    async def flush(self, timeout: float = 30.0) -> bool:
        """Wait until no background embedding runs (or ``timeout`` s); True if idle.

        Without ``background`` none runs: True at once, pending entries stay pending.
        """
        if self.background:
            await self._start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            tasks = [t for t in self._drains.values() if not t.done()]
            if not tasks:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.wait(tasks, timeout=left)

    async def aclose(self) -> None:
        """Stop the background embedding (pending entries stay recorded)."""
        self._closed = True
        tasks = list(self._drains.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._drains.clear()
        close = getattr(self.embedder, "aclose", None)
        if self.owns_embedder and close is not None:
            await close()

    # --- recalling ----------------------------------------------------------------------

    async def _embed_query(self, query: str) -> Sequence[float] | None:
        try:
            async with asyncio.timeout(self.query_timeout):
                [vector] = await self.embedder.embed([query])
            return vector
        except Exception as exc:  # recall stays lexical while the embedder is down or slow
            log.warning("hybrid recall: query embedding failed (%s); lexical only", exc)
            return None

    async def recall(self, request: RecallRequest) -> list[RecallResult]:
        """Matches by fused score, then the recency fill (module docstring, *Recalling*)."""
        if self.background:
            await self._start()
        wanted = max(self.candidates, request.limit)
        scope = KeySpace.recall_scope(request.namespace, request.agent_id, request.session_id)
        # min_score just above 0: the inner store's exact top ``wanted`` lexical matches
        # with their BM25 scores and no recency fill (its fill entries would otherwise
        # pass for candidates); the fill, when one is needed, is asked for below.
        query_vector, lexical = await asyncio.gather(
            self._embed_query(request.query),
            self.inner.recall(
                request.model_copy(update={"limit": wanted, "min_score": _MATCHES_ONLY})
            ),
        )
        # An inner store that ignores min_score or filter (a remote one) is held to them.
        lexical = [r for r in lexical if r.score > 0 and passes(r.entry, request.filter)]
        hits: list[VectorHit] = []
        if query_vector is not None:
            # The lexical candidates' similarities too: an entry found both ways must
            # get both signals even when it is outside the vector top ``wanted``.
            hits = await self.vectors.search(
                scope,
                query_vector,
                self.embedder.name,
                wanted,
                include=[r.entry.id for r in lexical],
                where=request.filter,
            )
        # Scores descend, so cutting at the limit, then dropping those under min_score,
        # keeps what dropping, then cutting would.
        fused = fuse(lexical, hits, request.limit, self.weights)
        results = [r for r in fused if r.score >= request.min_score]
        if len(results) < request.limit and request.min_score <= 0:
            found_by_words = {r.entry.id for r in lexical}
            meaning_only = {h.entry_id for h in hits if h.similarity > 0} - found_by_words
            results += await self._fill(request, results, len(meaning_only))
        return results

    async def _fill(
        self, request: RecallRequest, matches: list[RecallResult], meaning_only: int
    ) -> list[RecallResult]:
        """The newest entries that match neither way, score 0, up to ``request.limit``.

        They come from the inner store's own recency fill: asked for ``meaning_only``
        more than the limit, its fill holds enough entries that are not already
        matches by meaning (its lexical matches are all among ``matches`` here).
        """
        found = await self.inner.recall(
            request.model_copy(update={"limit": request.limit + meaning_only, "min_score": 0.0})
        )
        taken = {r.entry.id for r in matches}
        fill = [
            RecallResult(entry=r.entry, score=0.0, source="recency")
            for r in found
            if r.score == 0 and r.entry.id not in taken and passes(r.entry, request.filter)
        ]
        return fill[: request.limit - len(matches)]


_MATCHES_ONLY = 1e-9
"""The inner recall's ``min_score``: every lexical match scores above it, the fill (0) not."""


def fuse(
    lexical: Sequence[RecallResult],
    semantic: Sequence[VectorHit],
    limit: int,
    weights: FusionWeights = DEFAULT_WEIGHTS,
) -> list[RecallResult]:
    """The hybrid ranking of the module docstring over lexical results and vector hits.

    The matches only: lexical results scoring above 0 and vector hits of positive
    similarity; each scores above 0 (with weights above 0), highest first, ties
    to the newer entry, then the smaller id.
    """
    # Vector hits' entries are parsed only for the results returned: the entry of
    # an id found by words comes with the lexical result, the rest need ``updated_at``.
    entries: dict[str, MemoryEntry] = {}
    hits: dict[str, VectorHit] = {}
    updated: dict[str, int] = {}
    bm25: dict[str, float] = {}
    cosine: dict[str, float] = {}
    for result in lexical:
        if result.score > 0:
            entries[result.entry.id] = result.entry
            updated[result.entry.id] = result.entry.updated_at
            bm25[result.entry.id] = result.score
    for hit in semantic:
        if hit.similarity > 0:
            if hit.entry_id not in updated:
                hits[hit.entry_id] = hit
                updated[hit.entry_id] = hit.updated_at
            cosine[hit.entry_id] = hit.similarity
    if not updated:
        return []
    top_bm25 = max(bm25.values(), default=0.0)
    top_cosine = max(cosine.values(), default=0.0)
    oldest = min(updated.values())
    span = max(updated.values()) - oldest
    scores: dict[str, float] = {}
    for entry_id, updated_at in updated.items():
        score = 0.0
        if top_bm25 > 0:
            score += weights.lexical * bm25.get(entry_id, 0.0) / top_bm25
        if top_cosine > 0:
            score += weights.semantic * cosine.get(entry_id, 0.0) / top_cosine
        if span > 0:
            score += weights.recency * (updated_at - oldest) / span
        scores[entry_id] = score
    ordered = sorted(updated, key=lambda i: (-scores[i], -updated[i], i))[:limit]
    for entry_id in ordered:
        if entry_id not in entries:
            entries[entry_id] = hits[entry_id].entry
    return [
        RecallResult(entry=entries[i], score=scores[i], source=_source(i in bm25, i in cosine))
        for i in ordered[:limit]
    ]


def _source(lexical: bool, semantic: bool) -> RecallSource:
    if lexical and semantic:
        return "lexical+vector"
    return "lexical" if lexical else "vector"
