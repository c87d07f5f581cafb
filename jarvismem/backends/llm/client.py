"""An async client of an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint.

OpenAI, Azure OpenAI (v1 API), Ollama, vLLM and LiteLLM all speak this wire
format. The HTTP body is read up to ``max_response_bytes``; a larger body is
refused, never buffered unbounded. Every failure surfaces as
:class:`~jarvismem.errors.LLMError`; messages name the host, the status and the
reason, never the API key. Retries run on :func:`jarvismem.resilience.retrying`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from jarvismem import defaults
from jarvismem.errors import ConfigError, InvalidPayloadError, LLMError
from jarvismem.redaction import default_redactor, mask_url
from jarvismem.resilience import Backoff, retrying
from jarvismem.settings import Settings

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "LLM_HTTP",
    "RETRY_STATUSES",
    "ChatCompletionsClient",
    "HttpPolicy",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_RESPONSE_BYTES = defaults.LLM_MAX_RESPONSE_BYTES
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))


@dataclass(frozen=True, slots=True)
class HttpPolicy:
    """How an OpenAI-compatible HTTP client waits, retries and bounds answers.

    Shared by the chat client and the embedder, so both endpoints behave the
    same under faults.

    Attributes:
        timeout: deadline of one HTTP attempt, s.
        max_retries: extra attempts after a 429, a 5xx, a timeout or a
            connection error.
        backoff_base, backoff_cap: exponential backoff with equal jitter
            (uniform in ``[ceiling/2, ceiling]``), s.
        retry_after_cap: longest ``Retry-After`` honoured, s.
        max_response_bytes: larger response bodies are refused with ``LLMError``.
    """

    timeout: float = defaults.LLM_TIMEOUT
    max_retries: int = defaults.LLM_MAX_RETRIES
    backoff_base: float = defaults.LLM_BACKOFF_BASE
    backoff_cap: float = defaults.LLM_BACKOFF_CAP
    retry_after_cap: float = defaults.RETRY_AFTER_CAP
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        # A bad value would only show on the first request, far from where it was set.
        if not self.timeout > 0:
            raise ConfigError(f"HttpPolicy.timeout must be > 0 seconds, got {self.timeout!r}")
        if self.max_retries < 0:
            raise ConfigError(f"HttpPolicy.max_retries must be >= 0, got {self.max_retries!r}")
        if self.backoff_base < 0 or self.backoff_cap < 0 or self.retry_after_cap < 0:
            raise ConfigError("HttpPolicy backoff_base, backoff_cap, retry_after_cap must be >= 0")
        if self.max_response_bytes < 1:
            raise ConfigError("HttpPolicy.max_response_bytes must be >= 1")


LLM_HTTP = HttpPolicy()
"""The chat client's default policy (the ``LLM_*`` defaults)."""


class _TransientFailure(Exception):
    """One attempt failed in a way worth repeating (a 429, a 5xx, a timeout, no connection).

    ``retry_after`` is the server's ``Retry-After`` in seconds (None: use the
    backoff); :func:`~jarvismem.resilience.retrying` reads it by that name.
    """

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


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
        policy: HttpPolicy = LLM_HTTP,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Create the client (no connection is made yet).

        ``base_url``: the API root including its version, e.g. ``https://api.openai.com/v1``
        or ``http://127.0.0.1:11434/v1``. ``api_key``: sent as ``Authorization: Bearer``
        (only to ``base_url``'s host; redirects are never followed). ``model``: chat
        model name. ``policy``: timeouts, retries, backoff and the response bound.
        ``transport``: an httpx transport instead of the network (tests).
        """
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError("LLM_BASE_URL must start with http:// or https://")
        if not model or not isinstance(model, str):
            raise ConfigError("LLM_MODEL must be a non-empty string")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.policy = policy
        self.timeout = float(policy.timeout)
        self.max_retries = int(policy.max_retries)
        self._api_key = api_key or None
        # Equal jitter: workers hit by one outage retry apart, never sooner than
        # half the ceiling.
        self._backoff = Backoff(base=policy.backoff_base, cap=policy.backoff_cap, jitter="equal")
        self._retry_after_cap = policy.retry_after_cap
        self._max_response_bytes = policy.max_response_bytes
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
            policy=HttpPolicy(timeout=settings.llm_timeout, max_retries=settings.llm_max_retries),
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

    async def _attempt_ok(self, method: str, url: str, payload: dict[str, Any] | None) -> bytes:
        """One attempt: the body of a 2xx, ``_TransientFailure`` to retry, else ``LLMError``."""
        try:
            status, headers, body = await self._attempt(method, url, payload)
        except (TimeoutError, httpx.TimeoutException):
            raise _TransientFailure(f"timed out after {self.timeout:g}s") from None
        except httpx.TransportError as exc:
            raise _TransientFailure(f"connection failed ({type(exc).__name__})") from None
        if 200 <= status < 300:
            return body
        reason = f"HTTP {status}{self._error_detail(body)}"
        if status not in RETRY_STATUSES:
            raise LLMError(f"LLM at {self._shown_url} refused the request: {reason}")
        raise _TransientFailure(reason, _parse_retry_after(headers.get("retry-after")))

    def _log_retry(self, exc: BaseException, attempt: int, delay: float) -> None:
        log.warning(
            "LLM at %s: %s; retrying in %.2fs (%d retries left)",
            self._shown_url,
            exc,
            delay,
            self.max_retries + 1 - attempt,
        )

    async def _request(self, method: str, path: str, payload: dict[str, Any] | None) -> bytes:
        """Send with retries; return the body of a 2xx answer or raise ``LLMError``."""
        url = f"{self.base_url}{path}"
        try:
            async for attempt in retrying(
                attempts=self.max_retries + 1,
                backoff=self._backoff,
                retry_if=lambda exc: isinstance(exc, _TransientFailure),
                sleep=self._sleep,
                on_retry=self._log_retry,
                retry_after_cap=self._retry_after_cap,
            ):
                with attempt:
                    return await self._attempt_ok(method, url, payload)
        except _TransientFailure as exc:
            raise LLMError(
                f"LLM at {self._shown_url} failed after {self.max_retries + 1} attempt(s): "
                f"{exc.reason}"
            ) from None
        raise AssertionError("unreachable: retrying() returns or raises")  # pragma: no cover

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
