"""LLM access for long-term compression: one small protocol, two honest summarizers.

* :class:`Summarizer` is the protocol the long-term tier talks to.
* :class:`ChatCompletionsClient` speaks the OpenAI-compatible
  ``POST {base_url}/chat/completions`` wire format over httpx, which OpenAI,
  Azure OpenAI (v1 API), Ollama, vLLM and LiteLLM all accept.
* :class:`LLMSummarizer` wraps the client with a rolling-summary prompt.
* :class:`ExtractiveSummarizer` needs no LLM: it keeps the most informative
  lines, deterministically. It is the default when ``LLM_BASE_URL`` is unset.

Bounds: every summary a summarizer returns is at most ``max_chars`` long. An
answer that is longer is cut and ends with :data:`TRUNCATION_MARKER`, so a
reader can tell it was cut. The HTTP body itself is read up to
``max_response_bytes``; a larger body is refused, never buffered unbounded.

Every failure surfaces as :class:`~jarvismem.errors.LLMError`. Messages name
the host, the status and the reason, never the API key.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.redaction import default_redactor, mask_url
from jarvismem.settings import Settings

log = logging.getLogger(__name__)

TRUNCATION_MARKER = "\n[…truncated]"
"""Appended to a summary that was cut to fit ``max_chars``."""

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))


def truncate(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its head plus :data:`TRUNCATION_MARKER`.

    The result is never longer than ``max_chars``.
    """
    if max_chars <= 0:
        return ""
    if len(text) <= max_chars:
        return text
    if max_chars <= len(TRUNCATION_MARKER):
        return text[:max_chars]
    return text[: max_chars - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER


@runtime_checkable
class Summarizer(Protocol):
    """Something that condenses text, optionally on top of an earlier summary."""

    name: str
    """Short name recorded in a summary's provenance (``extractive``, ``llm:<model>``)."""

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        """Return a summary of ``previous_summary`` + ``text`` of at most ``max_chars``.

        Raises :class:`~jarvismem.errors.LLMError` when the summary cannot be made;
        callers then keep their old summary.
        """
        ...


# --------------------------------------------------------------------------------------
# HTTP client
# --------------------------------------------------------------------------------------


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ChatCompletionsClient:
    """Async client of an OpenAI-compatible chat-completions endpoint.

    One instance owns one ``httpx.AsyncClient`` (a connection pool): build it once
    per process and close it with :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        retry_after_cap: float = 30.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        """Create the client (no connection is made yet).

        ``base_url``: the API root including its version, e.g. ``https://api.openai.com/v1``
        or ``http://127.0.0.1:11434/v1``. ``api_key``: sent as ``Authorization: Bearer``
        (only to ``base_url``'s host; redirects are never followed). ``model``: chat
        model name. ``timeout``: deadline of one HTTP attempt, in seconds.
        ``max_retries``: extra attempts after a 429, a 5xx, a timeout or a connection
        error. ``backoff_base``/``backoff_cap``: exponential backoff with full jitter,
        in seconds. ``retry_after_cap``: longest ``Retry-After`` honoured.
        ``max_response_bytes``: larger response bodies are refused with ``LLMError``.
        """
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError("LLM_BASE_URL must start with http:// or https://")
        if not model or not isinstance(model, str):
            raise ConfigError("LLM_MODEL must be a non-empty string")
        if timeout <= 0:
            raise ConfigError("LLM_TIMEOUT must be > 0")
        if max_retries < 0:
            raise ConfigError("LLM_MAX_RETRIES must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self._api_key = api_key or None
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._retry_after_cap = retry_after_cap
        self._max_response_bytes = max_response_bytes
        self._host = urlsplit(self.base_url).netloc
        self._shown_url = mask_url(self.base_url)
        # Injectable so tests can observe backoff delays without waiting for them.
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout),
            follow_redirects=False,
            transport=transport,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatCompletionsClient:
        """Build the client from ``LLM_*`` settings; ``ConfigError`` if no base URL."""
        if not settings.llm_base_url:
            raise ConfigError("LLM_BASE_URL is not set")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(
            settings.llm_base_url,
            api_key=key,
            model=settings.llm_model,
            timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries,
        )

    async def __aenter__(self) -> ChatCompletionsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _scrub(self, text: str) -> str:
        """Make server-provided text safe for an exception message."""
        if self._api_key:
            text = text.replace(self._api_key, "[REDACTED]")
        return default_redactor(text)[:200]

    @staticmethod
    def _validate_messages(messages: object) -> list[dict[str, str]]:
        if not isinstance(messages, list) or not messages:
            raise InvalidPayloadError("messages must be a non-empty list of {role, content}")
        for i, message in enumerate(messages):
            if (
                not isinstance(message, dict)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise InvalidPayloadError(
                    f"messages[{i}] must be a dict with string 'role' and 'content'"
                )
        return messages

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._retry_after_cap)
        ceiling = min(self._backoff_cap, self._backoff_base * (2**attempt))
        # Full jitter spreads retries of many workers hit by the same outage.
        return random.uniform(ceiling / 2, ceiling)

    async def _read_body(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self._max_response_bytes:
            raise LLMError(
                f"LLM at {self._shown_url} sent a {declared}-byte body; "
                f"the limit is {self._max_response_bytes}"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_response_bytes:
                raise LLMError(
                    f"LLM at {self._shown_url} sent more than {self._max_response_bytes} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def _attempt(
        self, method: str, url: str, payload: dict[str, Any] | None
    ) -> tuple[int, httpx.Headers, bytes]:
        """One HTTP exchange within ``timeout`` seconds (status, headers, body)."""
        async with asyncio.timeout(self.timeout):
            request = self._http.build_request(method, url, json=payload, headers=self._headers())
            response = await self._http.send(request, stream=True)
            try:
                body = await self._read_body(response)
            finally:
                await response.aclose()
            return response.status_code, response.headers, body

    async def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> bytes:
        """Send with retries; return the body of a 2xx answer or raise ``LLMError``."""
        url = f"{self.base_url}{path}"
        last_reason = "no attempt made"
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                status, headers, body = await self._attempt(method, url, payload)
            except (TimeoutError, httpx.TimeoutException):
                last_reason = f"timed out after {self.timeout:g}s"
            except httpx.TransportError as exc:
                last_reason = f"connection failed ({type(exc).__name__})"
            else:
                if 200 <= status < 300:
                    return body
                last_reason = f"HTTP {status}{self._error_detail(body)}"
                if status not in RETRY_STATUSES:
                    raise LLMError(f"LLM at {self._shown_url} refused the request: {last_reason}")
                retry_after = _parse_retry_after(headers.get("retry-after"))
            if attempt < self.max_retries:
                delay = self._backoff(attempt, retry_after)
                log.warning(
                    "LLM at %s: %s; retrying in %.2fs (%d retries left)",
                    self._shown_url,
                    last_reason,
                    delay,
                    self.max_retries - attempt,
                )
                await self._sleep(delay)
        raise LLMError(
            f"LLM at {self._shown_url} failed after {self.max_retries + 1} attempt(s): "
            f"{last_reason}"
        )

    def _error_detail(self, body: bytes) -> str:
        try:
            data = json.loads(body)
            message = data["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return ""
        return f": {self._scrub(str(message))}" if message else ""

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.2,
    ) -> str:
        """Send a chat and return the assistant's text (``choices[0].message.content``).

        ``messages``: ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``.
        ``max_tokens``: cap of the answer's length in tokens (omitted when None).
        Raises ``LLMError`` on failure after retries, on an empty answer and on a
        malformed body; ``InvalidPayloadError`` on bad ``messages`` (nothing sent).
        """
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": self._validate_messages(messages),
            "temperature": temperature,
        }
        if max_tokens is not None:
            if max_tokens < 1:
                raise InvalidPayloadError("max_tokens must be >= 1")
            payload["max_tokens"] = max_tokens
        body = await self._request("POST", "/chat/completions", payload)
        try:
            data = json.loads(body)
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError(
                f"LLM at {self._shown_url} returned a malformed chat-completions body"
            ) from None
        if not isinstance(content, str) or not content.strip():
            raise LLMError(f"LLM at {self._shown_url} returned an empty answer")
        return content

    async def ping(self) -> float:
        """Round trip of ``GET {base_url}/models`` in seconds; ``LLMError`` if it fails.

        A single attempt (no retries): this is for status output.
        """
        started = time.perf_counter()
        try:
            status, _, body = await self._attempt("GET", f"{self.base_url}/models", None)
        except (TimeoutError, httpx.TimeoutException):
            raise LLMError(f"LLM at {self._shown_url} timed out after {self.timeout:g}s") from None
        except httpx.TransportError as exc:
            raise LLMError(f"LLM at {self._shown_url} unreachable ({type(exc).__name__})") from None
        if not 200 <= status < 300:
            raise LLMError(
                f"LLM at {self._shown_url} answered HTTP {status}{self._error_detail(body)}"
            )
        return time.perf_counter() - started

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


# --------------------------------------------------------------------------------------
# Summarizers
# --------------------------------------------------------------------------------------

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
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        """Ask the LLM for an updated summary; the answer is cut to ``max_chars``."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        user = (
            "Current summary:\n"
            + (previous_summary.strip() if previous_summary else "(none yet)")
            + "\n\nNew entries:\n"
            + text.strip()
        )
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_chars=max_chars)},
            {"role": "user", "content": user},
        ]
        # ~4 chars per token; a little headroom so the model is not cut mid-sentence,
        # the character cap below is the hard bound.
        max_tokens = max(64, math.ceil(max_chars / 3))
        answer = await self.client.complete(
            messages, max_tokens=max_tokens, temperature=self.temperature
        )
        return truncate(answer.strip(), max_chars)


_WORD_RE = re.compile(r"[^\W_]{3,}", re.UNICODE)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+")
_STOPWORDS = frozenset(
    """the and for are but not you all any can had her was one our out has him his how
    its may new now old see two who did get let put say she too use this that with from
    have they will would there their what when which were been into than then them these
    those some such only also just more most other over very your about after again
    while where being because should could does doing each few here itself same""".split()
)


def _terms(text: str) -> list[str]:
    return [w for w in (m.lower() for m in _WORD_RE.findall(text)) if w not in _STOPWORDS]


def _units(text: str) -> list[str]:
    """Lines, with over-long lines split into sentences."""
    out: list[str] = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if len(line) <= 300:
            out.append(line)
        else:
            out.extend(s for s in _SENTENCE_SPLIT_RE.split(line) if s)
    return out


def _weights(units: Sequence[str]) -> dict[str, float]:
    """Term weight = frequency x inverse unit frequency (tf-idf over the input's units).

    A word in every unit ("turn") weighs nothing; a subject that recurs in some
    units weighs most.
    """
    tf: Counter[str] = Counter()
    df: Counter[str] = Counter()
    for unit in units:
        terms = _terms(unit)
        tf.update(terms)
        df.update(set(terms))
    n = len(units)
    return {t: tf[t] * math.log((n + 1) / df[t]) for t in tf}


class ExtractiveSummarizer:
    """Deterministic summarizer without an LLM.

    Splits the input into lines (long lines into sentences), scores each by the
    tf-idf weight of its content words across the whole input (so recurring
    subjects win and words present everywhere count for nothing), normalised by
    length, and keeps the best ones (the later on equal scores) in their original
    order within ``max_chars``. Lines of the previous summary are kept first (up to half
    the budget when there is new text), so a rolling summary does not forget its
    past. Same input, same output.
    """

    name = "extractive"

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = 4000
    ) -> str:
        """Return the selected lines joined by newlines, at most ``max_chars`` long."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        previous = _units(previous_summary or "")
        new = _units(text)
        freq = _weights(previous + new)
        budget_prev = max_chars if not new else max_chars // 2 if previous else 0
        kept_prev = self._select(previous, freq, budget_prev)
        used = sum(len(u) + 1 for u in kept_prev)
        kept_new = self._select(new, freq, max_chars - used, exclude=set(kept_prev))
        return truncate("\n".join(kept_prev + kept_new), max_chars)

    @staticmethod
    def _select(
        units: Sequence[str], freq: dict[str, float], budget: int, exclude: set[str] | None = None
    ) -> list[str]:
        """Best-scoring distinct units fitting in ``budget`` chars, in input order."""
        if budget <= 0 or not units:
            return []
        seen: set[str] = set(exclude or ())
        candidates: list[tuple[float, int, str]] = []
        for index, unit in enumerate(units):
            if unit in seen:
                continue
            seen.add(unit)
            terms = _terms(unit)
            # sorted(): float sums in set order would differ between processes
            # (string hash randomisation) and break ties differently.
            score = sum(freq.get(t, 0.0) for t in sorted(set(terms))) / math.sqrt(len(terms) + 1)
            # On equal scores the later line wins: the newest turns matter most
            # to an agent resuming its work.
            candidates.append((-score, -index, unit))
        candidates.sort()
        chosen: list[tuple[int, str]] = []
        used = 0
        for _, neg_index, unit in candidates:
            index = -neg_index
            cost = len(unit) + (1 if chosen else 0)
            if used + cost > budget:
                # A single unit larger than the whole budget is cut rather than lost.
                if not chosen and budget > len(TRUNCATION_MARKER) + 20:
                    chosen.append((index, truncate(unit, budget)))
                    used = budget
                continue
            chosen.append((index, unit))
            used += cost
        chosen.sort()
        return [unit for _, unit in chosen]


def create_summarizer(settings: Settings) -> Summarizer:
    """An :class:`LLMSummarizer` when ``LLM_BASE_URL`` is set, else an extractive one.

    The LLM summarizer owns its new client: close it with ``await summarizer.aclose()``.
    """
    if settings.llm_base_url:
        return LLMSummarizer(ChatCompletionsClient.from_settings(settings), owns_client=True)
    return ExtractiveSummarizer()


__all__ = [
    "TRUNCATION_MARKER",
    "ChatCompletionsClient",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "create_summarizer",
    "truncate",
]
