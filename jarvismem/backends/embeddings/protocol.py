"""The protocol the recall tier talks to for meaning-based retrieval: text in, vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Something that turns texts into fixed-length vectors (async, batched).

    Vectors of one embedder are comparable with each other only: ``name``
    (model and provider) is stored beside every vector, so a store can tell
    vectors made by another model apart and re-embed instead of comparing them.
    """

    name: str
    """Provider and model, e.g. ``openai:text-embedding-3-small``; recorded with each vector."""

    dimensions: int
    """Length of every vector this embedder returns."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order.

        Raises :class:`~jarvismem.errors.LLMError` (a transient
        :class:`~jarvismem.errors.BackendUnavailableError` for an outage) when
        the vectors cannot be made; callers keep the entry lexical-only and retry
        later.
        """
        ...
