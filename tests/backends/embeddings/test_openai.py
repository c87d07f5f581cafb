"""OpenAIEmbedder against the fake LLM's /v1/embeddings over real HTTP."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from jarvismem.backends.embeddings.openai import OpenAIEmbedder, normalise
from jarvismem.backends.embeddings.protocol import Embedder
from jarvismem.backends.llm.client import HttpPolicy
from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.settings import Settings
from jarvismem.testing.fake_llm import FakeLLMServer, hashed_embedding

API_KEY = "sk-embed-test-0123456789abcdef"
MakeEmbedder = Callable[..., OpenAIEmbedder]


@pytest.fixture
async def make_embedder(fake_llm: FakeLLMServer) -> AsyncIterator[MakeEmbedder]:
    made: list[OpenAIEmbedder] = []

    def make(**kwargs: object) -> OpenAIEmbedder:
        """Keyword arguments name embedder options or :class:`HttpPolicy` fields."""
        policy: dict[str, Any] = {
            "timeout": 5.0,
            "max_retries": 2,
            "backoff_base": 0.01,
            "backoff_cap": 0.02,
        }
        options: dict[str, Any] = {"api_key": API_KEY, "model": "emb-1"}
        for name, value in kwargs.items():
            (policy if name in HttpPolicy.__dataclass_fields__ else options)[name] = value
        made.append(OpenAIEmbedder(fake_llm.url, policy=HttpPolicy(**policy), **options))
        return made[-1]

    yield make
    for embedder in made:
        await embedder.aclose()


async def test_it_is_an_embedder_named_after_provider_and_model(
    make_embedder: MakeEmbedder,
) -> None:
    embedder = make_embedder()
    assert isinstance(embedder, Embedder)
    assert embedder.name == "openai:emb-1" and embedder.dimensions == 0
    assert make_embedder(dimensions=16).name == "openai:emb-1@16"


async def test_embed_posts_the_wire_format_and_returns_vectors_in_order(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    embedder = make_embedder()
    vectors = await embedder.embed(["red apple", "blue car"])
    assert vectors == [pytest.approx(hashed_embedding(t)) for t in ("red apple", "blue car")]
    assert embedder.dimensions == 64
    [request] = fake_llm.embedding_requests()
    assert request.path == "/v1/embeddings"
    assert request.json == {
        "model": "emb-1",
        "input": ["red apple", "blue car"],
        "encoding_format": "float",
    }
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


async def test_dimensions_are_asked_for_when_set(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    [vector] = await make_embedder(dimensions=8).embed(["x y"])
    assert len(vector) == 8
    assert fake_llm.embedding_requests()[0].json["dimensions"] == 8


async def test_texts_are_sent_in_batches_of_batch_size(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = await make_embedder(batch_size=3).embed(texts)
    assert [r.json["input"] for r in fake_llm.embedding_requests()] == [
        texts[0:3],
        texts[3:6],
        texts[6:7],
    ]
    assert vectors == [pytest.approx(hashed_embedding(t)) for t in texts]


async def test_429_and_5xx_are_retried(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    fake_llm.fail_next(1, status=429, endpoint="embeddings")
    fake_llm.fail_next(1, status=503, endpoint="embeddings")
    assert len(await make_embedder().embed(["x"])) == 1
    assert len(fake_llm.embedding_requests()) == 3


async def test_failures_after_the_retries_raise_llm_error_without_the_key(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    fake_llm.mode = "error"
    with pytest.raises(LLMError, match="after 3 attempt") as info:
        await make_embedder().embed(["x"])
    assert API_KEY not in str(info.value)
    assert len(fake_llm.embedding_requests()) == 3


async def test_a_400_is_not_retried(make_embedder: MakeEmbedder, fake_llm: FakeLLMServer) -> None:
    fake_llm.fail_next(1, status=400, endpoint="embeddings")
    with pytest.raises(LLMError, match="HTTP 400"):
        await make_embedder().embed(["x"])
    assert len(fake_llm.embedding_requests()) == 1


async def test_a_timeout_is_retried_then_raised(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.mode = "hang"
    with caplog.at_level(logging.WARNING, logger="jarvismem.backends.llm.client"):
        with pytest.raises(LLMError, match="timed out"):
            await make_embedder(timeout=0.2, max_retries=1).embed(["x"])
    # Count the client's attempts on its side: on a loaded machine a 0.2 s timeout can
    # fire before the request reaches the server's thread, so the server's count may lag
    # or stay short of the attempts made.
    retries = [r for r in caplog.records if "timed out" in r.getMessage()]
    assert len(retries) == 1, [r.getMessage() for r in retries]
    assert "1 retries left" in retries[0].getMessage()
    assert len(fake_llm.embedding_requests()) <= 2


@pytest.mark.parametrize("mode", ["garbage", "empty"])
async def test_malformed_answers_raise_llm_error(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer, mode: str
) -> None:
    fake_llm.mode = mode
    with pytest.raises(LLMError, match=r"malformed|0 vectors for 1"):
        await make_embedder(max_retries=0).embed(["x"])


async def test_empty_texts_are_refused_before_sending(
    make_embedder: MakeEmbedder, fake_llm: FakeLLMServer
) -> None:
    with pytest.raises(InvalidPayloadError, match=r"texts\[1\]"):
        await make_embedder().embed(["ok", "  "])
    assert fake_llm.embedding_requests() == []
    assert await make_embedder().embed([]) == []


def test_bad_configuration_is_refused() -> None:
    for kwargs in ({"base_url": "ftp://x"}, {"model": ""}, {"batch_size": 0}):
        options: dict[str, object] = {"base_url": "http://x/v1", "api_key": None, **kwargs}
        with pytest.raises(ConfigError):
            OpenAIEmbedder(**options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout"):
        OpenAIEmbedder("http://x/v1", api_key=None, policy=HttpPolicy(timeout=0))


async def test_from_settings_reads_the_embeddings_block(fake_llm: FakeLLMServer) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        embeddings_base_url=fake_llm.url,
        embeddings_api_key=API_KEY,  # type: ignore[arg-type]
        embeddings_model="emb-2",
        embeddings_dimensions=12,
        embeddings_batch=5,
    )
    embedder = OpenAIEmbedder.from_settings(settings)
    try:
        assert (embedder.name, embedder.dimensions, embedder.batch_size) == (
            "openai:emb-2@12",
            12,
            5,
        )
        [vector] = await embedder.embed(["hello"])
        assert len(vector) == 12
    finally:
        await embedder.aclose()
    with pytest.raises(ConfigError, match="EMBEDDINGS_BASE_URL"):
        OpenAIEmbedder.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]


def test_normalise_scales_to_unit_length() -> None:
    assert math.isclose(math.hypot(*normalise([3.0, 4.0])), 1.0)
    assert normalise([0.0, 0.0]) == [0.0, 0.0]
