"""The summarizers: a rolling LLM summary, an extractive one that needs no LLM, and
JarvisCore's LLM client shape adapted to the :class:`Summarizer` protocol.

* :class:`LLMSummarizer` wraps a :class:`ChatCompletionsClient` with a
  rolling-summary prompt.
* :class:`ExtractiveSummarizer` keeps the most informative lines,
  deterministically. It is the default when ``LLM_BASE_URL`` is unset.
* :class:`GenerateSummarizer` wraps any client with JarvisCore's
  ``async generate(prompt=, temperature=, max_tokens=) -> {"content", "tokens"}``;
  :func:`as_summarizer` picks it by duck typing, so ``ltm.compress(entries, llm)``
  takes what a JarvisCore caller passes.

Every summary either returns is at most ``max_chars`` long; a longer one is cut
and ends with :data:`~jarvismem.backends.llm.truncation.TRUNCATION_MARKER`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

# Re-exported: this module was their home before the worker process needed them alone.
from jarvismem.backends.llm.extractive import SLICE_SECONDS, ExtractiveSummarizer, omission_marker
from jarvismem.backends.llm.protocol import Summarizer
from jarvismem.backends.llm.truncation import truncate
from jarvismem.defaults import SUMMARY_MAX_CHARS
from jarvismem.errors import InvalidPayloadError, LLMError

if TYPE_CHECKING:  # the client (and httpx) loads only when an LLM is configured
    from jarvismem.backends.llm.client import ChatCompletionsClient

__all__ = [
    "GENERATE_TEMPERATURE",
    "SLICE_SECONDS",
    "SYSTEM_PROMPT",
    "ExtractiveSummarizer",
    "GenerateSummarizer",
    "LLMSummarizer",
    "as_summarizer",
    "omission_marker",
]

SYSTEM_PROMPT = (
    "You maintain the long-term memory of an AI agent's workflow. You receive the "
    "current summary (possibly empty) and new ledger entries. Write one updated "
    "summary that keeps every durable fact, decision, open problem, result and "
    "identifier (names, numbers, paths) from both, drops chatter and repetition, and "
    "stays in chronological order. Plain text, no preamble. At most {max_chars} characters."
)


class LLMSummarizer:
    """A rolling summarizer backed by a :class:`ChatCompletionsClient`."""

    def __init__(
        self,
        client: ChatCompletionsClient,
        *,
        temperature: float = 0.2,
        owns_client: bool = False,
    ) -> None:
        """``client``: the chat client; ``owns_client``: whether :meth:`aclose` closes it
        (False for a client shared with other code).
        """
        self.client = client
        self.temperature = temperature
        self.owns_client = owns_client
        self.name = f"llm:{client.model}"

    async def aclose(self) -> None:
        """Close the client if this summarizer owns it."""
        if self.owns_client:
            await self.client.aclose()

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """Ask the LLM for an updated summary; the answer is cut to ``max_chars``."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_chars=max_chars)},
            {"role": "user", "content": _user_text(text, previous_summary)},
        ]
        answer = await self.client.complete(
            messages, max_tokens=_tokens_for(max_chars), temperature=self.temperature
        )
        return truncate(answer.strip(), max_chars)


def _tokens_for(max_chars: int) -> int:
    """Output tokens to ask for a summary of ``max_chars``: ~4 chars per token, with a
    little headroom so the model is not cut mid-sentence (the character cap is the
    hard bound)."""
    return max(64, math.ceil(max_chars / 3))


def _user_text(text: str, previous_summary: str | None) -> str:
    return (
        "Current summary:\n"
        + (previous_summary.strip() if previous_summary else "(none yet)")
        + "\n\nNew entries:\n"
        + text.strip()
    )


GENERATE_TEMPERATURE = 0.3
"""The temperature JarvisCore's own compress() asks its LLM client for."""


class GenerateSummarizer:
    """A JarvisCore-style LLM client as a :class:`Summarizer`.

    The client has ``async generate(prompt=…, temperature=…, max_tokens=…)``
    returning ``{"content": str, "tokens": {"total": int, …}}`` (JarvisCore's
    ``UnifiedLLMClient``, or a caller's own). It gets one prompt: the
    rolling-summary instructions, the current summary and the new entries.

    Whatever the client raises, or an answer without a ``content`` string,
    becomes :class:`~jarvismem.errors.LLMError` (callers keep their old summary).
    Token totals the client reports are added up in :attr:`tokens_used`.
    """

    def __init__(
        self,
        client: Any,
        *,
        temperature: float = GENERATE_TEMPERATURE,
        max_tokens: int | None = None,
    ) -> None:
        """``max_tokens``: an upper bound on the output tokens asked for in any call
        (JarvisCore's ``compress(..., max_tokens=)``); each call asks for what its
        ``max_chars`` needs (~3 characters per token), at most that."""
        if not callable(getattr(client, "generate", None)):
            raise InvalidPayloadError(
                f"{type(client).__name__} has no generate(prompt=, temperature=, max_tokens=)"
            )
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidPayloadError(f"max_tokens must be a positive int, got {max_tokens!r}")
        self.client = client
        self.temperature = temperature
        self.max_tokens = max_tokens
        model = getattr(client, "model", None)
        self.name = (
            f"generate:{model if isinstance(model, str) and model else type(client).__name__}"
        )
        self.tokens_used = 0

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """Ask the client for an updated summary; the answer is cut to ``max_chars``."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        prompt = (
            SYSTEM_PROMPT.format(max_chars=max_chars) + "\n\n" + _user_text(text, previous_summary)
        )
        max_tokens = _tokens_for(max_chars)
        if self.max_tokens is not None:
            max_tokens = min(max_tokens, self.max_tokens)
        try:
            response = self.client.generate(
                prompt=prompt, temperature=self.temperature, max_tokens=max_tokens
            )
            if inspect.isawaitable(response):
                response = await response
        except LLMError:
            raise
        except Exception as exc:  # any client's failure is the summarizer's LLMError
            raise LLMError(
                f"{self.name}: generate() failed: {type(exc).__name__}: {exc}"[:500]
            ) from exc
        content = response.get("content") if isinstance(response, Mapping) else None
        if not isinstance(content, str):
            raise LLMError(
                f"{self.name}: generate() must return a dict with a 'content' string, "
                f"got {type(response).__name__}"
                + (
                    f" with keys {sorted(map(str, response))[:8]}"
                    if isinstance(response, Mapping)
                    else ""
                )
            )
        tokens = response.get("tokens")
        total = tokens.get("total") if isinstance(tokens, Mapping) else None
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            self.tokens_used += total
        return truncate(content.strip(), max_chars)


def as_summarizer(llm: object, *, max_tokens: int | None = None) -> Summarizer:
    """``llm`` as a :class:`Summarizer`, recognised by what it can do.

    * ``generate(prompt=, temperature=, max_tokens=)``: JarvisCore's LLM client
      shape, wrapped in a :class:`GenerateSummarizer` that sends ``max_tokens``;
    * else ``summarize(text, previous_summary=, max_chars=)``: used as it is
      (jarvismem's protocol; ``max_tokens`` does not apply);
    * anything else: :class:`~jarvismem.errors.InvalidPayloadError` naming both shapes.

    ``generate`` is looked for first because JarvisCore only ever calls that: a
    caller's test double (``MagicMock`` with an ``AsyncMock`` ``generate``) also
    answers ``summarize`` with a plain, non-awaitable mock, and would otherwise be
    taken for a summarizer. jarvismem's own summarizers have no ``generate``.
    """
    if callable(getattr(llm, "generate", None)):
        return GenerateSummarizer(llm, max_tokens=max_tokens)
    if callable(getattr(llm, "summarize", None)):
        return cast(Summarizer, llm)
    raise InvalidPayloadError(
        f"llm must be a summarizer (async summarize(text, previous_summary=, max_chars=)) or "
        f"an LLM client (async generate(prompt=, temperature=, max_tokens=) -> "
        f'{{"content": ..., "tokens": ...}}); got {type(llm).__name__}'
    )
