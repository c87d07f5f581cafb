"""Embedders: text to vectors for hybrid recall (see :mod:`.protocol`)."""

from jarvismem.backends.embeddings.protocol import Embedder

__all__ = ["Embedder"]
