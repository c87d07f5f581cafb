"""The retrievers the recall benchmark compares, one per row of its table.

Each retriever is built once per conversation (every turn written) and then
asked each question; it answers with the dia_ids of the turns it ranks best,
best first. Rows:

* a jarvismem recall store (``memory`` = :class:`InMemoryRecallStore`, ``redis`` =
  :class:`RedisRecallStore` on a real server) in ``lexical`` mode (the store as it
  is) or ``hybrid`` mode (the store wrapped in ``HybridRecallStore`` with an
  embedder made by ``create_embedder``; imported lazily, as they may not exist);
* the textbook baseline: ``rank-bm25``'s ``BM25Okapi`` over the same texts with a
  plain tokenizer (lowercase runs of word characters), no stopwords, no stemming.
"""

from __future__ import annotations

import importlib
import re
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from benchmarks.recall_data import Conversation, Turn
from jarvismem.keys import KeySpace
from jarvismem.recall import InMemoryRecallStore, RecallRequest, RedisRecallStore, WriteRequest

BASELINE = "bm25"
"""The ``store`` name of the textbook BM25 row."""

_PLAIN_TOKEN_RE = re.compile(r"\w+")


class Unavailable(Exception):
    """A row cannot run here; the message is the row's note."""


@dataclass
class Built:
    """What building one conversation's index cost."""

    seconds: float  # wall time of all the writes, one after the other
    entries: int
    memory_bytes: int
    memory_how: str


class Retriever(Protocol):
    """One row's way of indexing a conversation and answering its questions."""

    async def build(self, conversation: Conversation) -> Built:
        """Index every turn of ``conversation`` (replacing any previous one)."""
        ...

    async def search(self, question: str, limit: int) -> list[str]:
        """The dia_ids of the ``limit`` best turns for ``question``, best first."""
        ...

    async def close(self) -> None:
        """Forget everything the retriever stored (keys, clients)."""
        ...


def plain_tokens(text: str) -> list[str]:
    """The baseline's tokenizer: lowercase runs of letters, digits and ``_``."""
    return _PLAIN_TOKEN_RE.findall(text.lower())


class Bm25Baseline:
    """``rank_bm25.BM25Okapi`` (k1 1.5, b 0.75, its defaults) over the turns' contents."""

    def __init__(self) -> None:
        try:
            self._bm25 = importlib.import_module("rank_bm25")
            self._np = importlib.import_module("numpy")
        except ImportError:
            raise Unavailable(
                "textbook BM25 row not run: rank-bm25 is not installed (pip install -e '.[bench]')"
            ) from None
        self._index: Any = None
        self._ids: list[str] = []

    def _make(self, turns: tuple[Turn, ...]) -> Any:
        return self._bm25.BM25Okapi([plain_tokens(t.content) for t in turns])

    async def build(self, conversation: Conversation) -> Built:
        """Tokenize and index every turn (timed), then once more under tracemalloc."""
        start = time.perf_counter()
        self._index = self._make(conversation.turns)
        seconds = time.perf_counter() - start
        self._ids = [t.dia_id for t in conversation.turns]
        size = _traced(lambda: self._make(conversation.turns))
        return Built(seconds, len(self._ids), size, "tracemalloc")

    async def search(self, question: str, limit: int) -> list[str]:
        """The ``limit`` best-scored turns; ties keep dialogue order."""
        scores = self._index.get_scores(plain_tokens(question))
        order = self._np.argsort(-scores, kind="stable")[:limit]
        return [self._ids[i] for i in order]

    async def close(self) -> None:
        """Nothing is held outside this object."""
        self._index = None


class TimedEmbedder:
    """An embedder passed through, the wall time of each of its calls recorded:
    the hybrid rows report the query embedding apart from the rest of a recall."""

    def __init__(self, embedder: Any) -> None:
        self.inner = embedder
        self.name = embedder.name
        self.dimensions = embedder.dimensions
        self.seconds: list[float] = []

    async def embed(self, texts: Any) -> Any:
        """The inner embedder's vectors; the call's duration appended to ``seconds``."""
        start = time.perf_counter()
        try:
            return await self.inner.embed(texts)
        finally:
            self.seconds.append(time.perf_counter() - start)

    async def aclose(self) -> None:
        """Close the inner embedder when it can be closed."""
        await _close(self.inner)


class StoreRetriever:
    """A jarvismem recall store (optionally wrapped for hybrid retrieval).

    ``make``: a new store; one serves the whole row, each conversation in a scope
    of its own (a new agent id). ``measure``: the bytes the row's namespace holds
    on the server; None = measure in-process, with tracemalloc, on a second store
    written the same way and thrown away. ``cleanup``: delete what the row wrote
    (run before each conversation, so the server holds one at a time, and at the
    end).
    """

    def __init__(
        self,
        make: Callable[[], Awaitable[Any]],
        namespace: str,
        measure: Callable[[str], Awaitable[int]] | None = None,
        cleanup: Callable[[str], Awaitable[None]] | None = None,
        embedder: TimedEmbedder | None = None,
    ) -> None:
        self._make = make
        self._embedder = embedder
        self.query_embed_seconds: list[float] = []
        self._namespace = namespace
        self._measure = measure
        self._cleanup = cleanup
        self._store: Any = None
        self._agent = ""

    @property
    def namespace(self) -> str:
        """The recall namespace (and, for Redis, the key space) this row writes in."""
        return self._namespace

    def _requests(self, conversation: Conversation, agent: str) -> list[WriteRequest]:
        return [
            write_request(turn, agent=agent, namespace=self._namespace)
            for turn in conversation.turns
        ]

    async def build(self, conversation: Conversation) -> Built:
        """Write every turn with ``store.write`` (timed), then measure the index."""
        if self._cleanup is not None:
            await self._cleanup(self._namespace)
        if self._store is None:
            self._store = await self._make()
        self._agent = f"{conversation.sample_id}-{uuid.uuid4().hex[:8]}"
        requests = self._requests(conversation, self._agent)
        start = time.perf_counter()
        await _write_all(self._store, requests)
        seconds = time.perf_counter() - start
        if self._measure is not None:
            return Built(
                seconds, len(requests), await self._measure(self._namespace), "MEMORY USAGE"
            )
        # tracemalloc slows every allocation: the timed build above ran without it,
        # the traced one writes the same turns into a store that is then dropped.
        probe = await self._make()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await _write_all(probe, requests)
            size = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        del probe
        return Built(seconds, len(requests), size, "tracemalloc")

    async def search(self, question: str, limit: int) -> list[str]:
        """``store.recall`` in the conversation's scope; results mapped to dia_ids.

        A hybrid store's query embedding (the embedder calls made during the
        recall: the writes' embedding was flushed before) is timed apart.
        """
        calls = len(self._embedder.seconds) if self._embedder is not None else 0
        results = await self._store.recall(
            RecallRequest(
                agent_id=self._agent, namespace=self._namespace, query=question, limit=limit
            )
        )
        if self._embedder is not None:
            self.query_embed_seconds += self._embedder.seconds[calls:]
        return [r.entry.metadata.get("dia_id", "") for r in results]

    async def close(self) -> None:
        """Close the store (when it can be closed) and delete whatever it wrote."""
        if self._store is not None:
            await _close(self._store)
            self._store = None
        if self._cleanup is not None:
            await self._cleanup(self._namespace)


def write_request(turn: Turn, *, agent: str, namespace: str) -> WriteRequest:
    """The ``WriteRequest`` of one turn: content, metadata and, when the model has
    the field, ``occurred_at`` = the session's date."""
    fields: dict[str, Any] = {
        "agent_id": agent,
        "namespace": namespace,
        "content": turn.content,
        "metadata": turn.metadata(),
    }
    if occurred_at_supported():
        fields["occurred_at"] = turn.occurred_at
        try:
            return WriteRequest.model_validate(fields)
        except ValidationError:
            # The field may be epoch milliseconds like created_at rather than a datetime.
            fields["occurred_at"] = int(turn.occurred_at.timestamp() * 1000)
    return WriteRequest.model_validate(fields)


async def _write_all(store: Any, requests: list[WriteRequest]) -> None:
    for request in requests:
        await store.write(request)
    flush = getattr(store, "flush", None)
    if flush is not None:  # a hybrid store may embed in the background: wait for it
        await flush()


async def _close(store: Any) -> None:
    for name in ("aclose", "close"):
        method = getattr(store, name, None)
        if method is not None:
            result = method()
            if hasattr(result, "__await__"):
                await result
            return


def _traced(build: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        size = tracemalloc.get_traced_memory()[0] - before
        del kept
    finally:
        tracemalloc.stop()
    return size


def occurred_at_supported() -> bool:
    """Whether ``WriteRequest`` has an ``occurred_at`` field (the entry's own time)."""
    return "occurred_at" in WriteRequest.model_fields


def hybrid_factory(
    embedder_name: str | None,
) -> tuple[Callable[..., Any], TimedEmbedder]:
    """A function wrapping a store for hybrid retrieval (``wrap(inner, vectors=None)``)
    and its timed embedder, or :class:`Unavailable`."""
    try:
        hybrid = importlib.import_module("jarvismem.recall.hybrid")
        factory = importlib.import_module("jarvismem.backends.embeddings.factory")
        store_class = hybrid.HybridRecallStore
        create_embedder = factory.create_embedder
    except (ImportError, AttributeError) as exc:
        raise Unavailable(f"hybrid mode not available yet ({exc})") from None
    try:
        embedder = create_embedder(embedder_name) if embedder_name else create_embedder()
    except Exception as exc:  # any failure to make one is this row's note, not a crash
        raise Unavailable(f"hybrid mode: no embedder {embedder_name!r} ({exc})") from None

    timed = TimedEmbedder(embedder)

    def wrap(inner: Any, vectors: Any = None) -> Any:
        return store_class(inner, timed, vectors=vectors)

    return wrap, timed


class RedisTarget:
    """The real Redis a ``redis`` row writes to: a unique namespace per row, every
    key of it deleted when the row ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: Any = None

    async def client(self) -> Any:
        """The shared client, connected and pinged once; :class:`Unavailable` if down."""
        if self._client is None:
            aioredis = importlib.import_module("redis.asyncio")
            client = aioredis.Redis.from_url(self.url)
            try:
                await client.ping()
            except Exception as exc:  # connection refused, auth, timeout: all one note
                await client.aclose()
                raise Unavailable(f"Redis at {self.url} not reachable ({exc})") from None
            self._client = client
        return self._client

    async def keys_of(self, namespace: str) -> list[Any]:
        """Every key of ``namespace`` (the benchmark's own, unique per row)."""
        client = await self.client()
        return [key async for key in client.scan_iter(match=f"jm:{namespace}:*", count=1000)]

    async def memory(self, namespace: str) -> int:
        """Bytes held by the namespace's keys (``MEMORY USAGE key SAMPLES 0``, exact)."""
        client = await self.client()
        total = 0
        for key in await self.keys_of(namespace):
            total += int(await client.memory_usage(key, samples=0) or 0)
        return total

    async def delete(self, namespace: str) -> None:
        """Delete every key of ``namespace``."""
        client = await self.client()
        keys = await self.keys_of(namespace)
        for start in range(0, len(keys), 500):
            await client.delete(*keys[start : start + 500])

    async def close(self) -> None:
        """Close the client, if one was opened."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def new_namespace(label: str) -> str:
    """A fresh recall namespace for one row of one run."""
    return f"bench-recall-{label}-{uuid.uuid4().hex[:10]}"


async def make_retriever(
    store: str, mode: str, redis: RedisTarget, embedder: str | None
) -> StoreRetriever:
    """The retriever of one jarvismem row; :class:`Unavailable` when it cannot run."""
    wrap: Callable[..., Any] | None = None
    timed: TimedEmbedder | None = None
    if mode == "hybrid":
        wrap, timed = hybrid_factory(embedder)
    elif mode != "lexical":
        raise Unavailable(f"unknown mode {mode!r} (lexical, hybrid)")
    namespace = new_namespace(f"{store}-{mode}")
    if store == "memory":

        async def make_memory() -> Any:
            inner = InMemoryRecallStore()
            return inner if wrap is None else wrap(inner)

        return StoreRetriever(make_memory, namespace, embedder=timed)
    if store == "redis":
        client = await redis.client()
        keyspace = KeySpace(namespace)

        async def make_redis() -> Any:
            inner = RedisRecallStore(client, keyspace)
            if wrap is None:
                return inner
            # Vectors in Redis beside the index, as the runtime keeps them.
            vectors = importlib.import_module("jarvismem.recall.vectors")
            return wrap(inner, vectors.RedisVectorStore(client, keyspace))

        return StoreRetriever(make_redis, namespace, redis.memory, redis.delete, embedder=timed)
    raise Unavailable(f"unknown store {store!r} (memory, redis)")
