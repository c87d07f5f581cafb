"""The Embedder protocol: objects with name, dimensions and embed() satisfy it, others do not."""

from __future__ import annotations

from collections.abc import Sequence

import jarvismem.backends.embeddings as embeddings
from jarvismem.backends.embeddings.protocol import Embedder


class _Constant:
    name = "test:constant"
    dimensions = 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


def test_an_object_with_name_dimensions_and_embed_is_an_embedder() -> None:
    assert isinstance(_Constant(), Embedder)


def test_an_object_without_embed_is_not_an_embedder() -> None:
    class NameOnly:
        name = "nothing"
        dimensions = 2

    assert not isinstance(NameOnly(), Embedder)


def test_the_package_reexports_the_protocol() -> None:
    assert embeddings.Embedder is Embedder
