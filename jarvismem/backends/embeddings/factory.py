"""Pick the embedder hybrid recall uses: by name, or from the settings."""

from __future__ import annotations

from jarvismem.backends.embeddings.protocol import Embedder
from jarvismem.errors import ConfigError
from jarvismem.settings import Settings, load_settings

__all__ = ["EMBEDDER_NAMES", "create_embedder"]

EMBEDDER_NAMES = ("none", "openai", "minilm")
"""The values of ``RECALL_EMBEDDER``."""


def create_embedder(name_or_settings: str | Settings) -> Embedder | None:
    """The embedder named (``none`` gives None: lexical recall only).

    A name takes the other ``EMBEDDINGS_*`` settings from the environment; a
    :class:`Settings` object uses its ``RECALL_EMBEDDER``. ``openai`` needs
    ``EMBEDDINGS_BASE_URL`` and owns a new HTTP client (close it with ``aclose()``);
    ``minilm`` runs offline and raises ``ConfigError`` with an install hint when
    the ``[embeddings]`` extra or the weights package is missing.
    """
    settings: Settings | None = None
    if isinstance(name_or_settings, Settings):
        settings = name_or_settings
        name: str = settings.recall_embedder
    else:
        name = str(name_or_settings).strip().lower()
        if name not in EMBEDDER_NAMES:
            raise ConfigError(
                f"unknown embedder {name_or_settings!r}: choose one of {', '.join(EMBEDDER_NAMES)}"
            )
    if name == "none":
        return None
    try:
        # Vector search (jarvismem.recall.vectors) is a numpy matrix product whichever
        # embedder fills it; numpy is the [embeddings] extra, not a dependency of all.
        import numpy  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"RECALL_EMBEDDER={name} needs numpy for vector search: "
            "pip install 'jarvismem[embeddings]' (or RECALL_EMBEDDER=none for lexical recall)"
        ) from None
    # Each embedder's module is imported when it is chosen: numpy (minilm) and
    # httpx (openai) are not paid for by a process that recalls lexically.
    if name == "minilm":
        from jarvismem.backends.embeddings.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    from jarvismem.backends.embeddings.openai import OpenAIEmbedder

    return OpenAIEmbedder.from_settings(settings if settings is not None else load_settings())
