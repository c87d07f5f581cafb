"""An :class:`~jarvismem.backends.embeddings.protocol.Embedder` over an OpenAI-compatible
``POST {base_url}/embeddings`` endpoint (OpenAI, Azure OpenAI v1, Ollama, vLLM, LiteLLM).

The HTTP exchange (one pooled ``httpx.AsyncClient``, retries on 429/5xx/timeouts/
connection errors with backoff and ``Retry-After``, bounded response bodies, key-free
error messages) is the chat client's: :class:`~jarvismem.backends.llm.client.ChatCompletionsClient`
does it for both, so the two endpoints behave the same under faults. Texts are sent in
batches of at most ``batch_size``; every failure surfaces as
:class:`~jarvismem.errors.LLMError`. Vectors are L2-normalised here, because not every
compatible server normalises them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import struct
from collections.abc import Sequence
from typing import Any

import httpx

from jarvismem import defaults
from jarvismem.backends.llm.client import ChatCompletionsClient, HttpPolicy
from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.redaction import Redactor, configured_redactor, default_redactor, mask_url
from jarvismem.settings import Settings

__all__ = ["EMBEDDINGS_HTTP", "OpenAIEmbedder", "normalise"]

EMBEDDINGS_HTTP = HttpPolicy(
    timeout=defaults.EMBEDDINGS_TIMEOUT,
    max_retries=defaults.EMBEDDINGS_MAX_RETRIES,
    max_response_bytes=defaults.EMBEDDINGS_MAX_RESPONSE_BYTES,
)
"""The embedder's default HTTP policy: the chat client's backoff, its own deadline and bound."""


def normalise(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector is returned as it is)."""
    norm = math.sqrt(math.fsum(v * v for v in vector))
    if norm == 0.0 or not math.isfinite(norm):
        return [float(v) for v in vector]
    return [float(v) / norm for v in vector]


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

    ``name`` is ``openai:<model>`` (plus ``@<dimensions>`` when a size is asked
    for): vectors of another model or size are never compared with these.
    ``dimensions`` is the requested size, or, when none is requested, the size
    the server answered with (0 until the first answer). Close with :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        model: str = defaults.EMBEDDINGS_MODEL,
        dimensions: int | None = None,
        batch_size: int = defaults.EMBEDDINGS_BATCH,
        policy: HttpPolicy = EMBEDDINGS_HTTP,
        transport: httpx.AsyncBaseTransport | None = None,
        redactor: Redactor = default_redactor,
    ) -> None:
        """Create the embedder (no connection is made yet).

        ``base_url``: the API root including its version (``https://api.openai.com/v1``).
        ``api_key``: sent as ``Authorization: Bearer``. ``model``: embedding model name.
        ``dimensions``: ask the server for vectors of this size (models that support
        shortening; None: the model's own size). ``batch_size``: most texts per request.
        ``policy``: timeouts, retries, backoff and the response bound (default
        :data:`EMBEDDINGS_HTTP`). ``redactor``: applied to every text before it is
        sent (queries are a user's words and may hold a secret; stored facts are
        redacted already, and redaction is idempotent).
        """
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError("EMBEDDINGS_BASE_URL must start with http:// or https://")
        if not model or not isinstance(model, str):
            raise ConfigError("EMBEDDINGS_MODEL must be a non-empty string")
        if dimensions is not None and dimensions < 1:
            raise ConfigError("EMBEDDINGS_DIMENSIONS must be >= 1 (or unset)")
        if batch_size < 1:
            raise ConfigError("EMBEDDINGS_BATCH must be >= 1")
        self._redact = redactor
        self.model = model
        self.requested_dimensions = dimensions
        self.dimensions = dimensions or 0
        self.batch_size = batch_size
        self.name = f"openai:{model}" + (f"@{dimensions}" if dimensions else "")
        self._shown_url = mask_url(base_url.rstrip("/"))
        self._client = ChatCompletionsClient(
            base_url, api_key=api_key, model=model, policy=policy, transport=transport
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEmbedder:
        """Build the embedder from ``EMBEDDINGS_*`` settings; ``ConfigError`` if no base URL."""
        if not settings.embeddings_base_url:
            raise ConfigError("RECALL_EMBEDDER=openai needs EMBEDDINGS_BASE_URL")
        key = settings.embeddings_api_key
        return cls(
            settings.embeddings_base_url,
            api_key=key.get_secret_value() if key else None,
            model=settings.embeddings_model,
            dimensions=settings.embeddings_dimensions,
            batch_size=settings.embeddings_batch,
            policy=dataclasses.replace(
                EMBEDDINGS_HTTP,
                timeout=settings.embeddings_timeout,
                max_retries=settings.embeddings_max_retries,
            ),
            redactor=configured_redactor(settings.redaction_enabled, settings.redaction_key_names),
        )

    @property
    def client(self) -> ChatCompletionsClient:
        """The HTTP client (its ``_sleep`` is what tests replace to skip backoff waits)."""
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order; batches of ``batch_size``.

        ``InvalidPayloadError`` for an empty text (nothing is sent); ``LLMError``
        when the server fails after retries or answers something malformed.
        """
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str) or not text.strip():
                raise InvalidPayloadError(f"texts[{i}] must be a non-empty string")
        vectors: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            vectors.extend(await self._embed_batch(items[start : start + self.batch_size]))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        # The one place texts leave for the embeddings server: redacted here.
        sent = [self._redact(text) for text in texts]
        payload: dict[str, Any] = {"model": self.model, "input": sent, "encoding_format": "float"}
        if self.requested_dimensions:
            payload["dimensions"] = self.requested_dimensions
        body = await self._client._request("POST", "/embeddings", payload)
        vectors = self._parse(body, len(texts))
        size = len(vectors[0])
        if self.dimensions and size != self.dimensions:
            raise LLMError(
                f"embeddings at {self._shown_url} returned {size}-dimensional vectors; "
                f"expected {self.dimensions}"
            )
        self.dimensions = size
        return vectors

    def _parse(self, body: bytes, count: int) -> list[list[float]]:
        malformed = f"embeddings at {self._shown_url} returned a malformed body"
        try:
            data = json.loads(body)["data"]
            items = sorted(data, key=lambda item: int(item["index"]))
            vectors = [self._vector(item["embedding"]) for item in items]
        except (ValueError, KeyError, TypeError, struct.error):
            raise LLMError(malformed) from None
        if len(vectors) != count or [int(i["index"]) for i in items] != list(range(count)):
            raise LLMError(
                f"embeddings at {self._shown_url} returned {len(vectors)} vectors for {count} texts"
            )
        sizes = {len(v) for v in vectors}
        if len(sizes) != 1 or 0 in sizes:
            raise LLMError(malformed)
        return [normalise(v) for v in vectors]

    @staticmethod
    def _vector(raw: object) -> list[float]:
        if isinstance(raw, str):  # encoding_format=base64: little-endian float32
            packed = base64.b64decode(raw, validate=True)
            return list(struct.unpack(f"<{len(packed) // 4}f", packed))
        if not isinstance(raw, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw
        ):
            raise ValueError("an embedding must be a list of finite numbers")
        return [float(v) for v in raw]

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
