"""Cleaning of caller values before any tier stores them: redaction, size and depth bounds.

Whatever an agent's tools return (nested JSON, huge blobs, credentials) passes
through :func:`clean_value` before it reaches the ledger, the scratchpad or
Athena. The result is plain JSON data, bounded in depth and size, with
secrets redacted.

Size policy (``max_chars``, ``MAX_TURN_FIELD_CHARS`` for turn fields)
    * A **string** is redacted, then truncated to ``max_chars`` characters
      followed by the marker ``…[truncated N chars]`` (N: characters cut).
      Strings nested in a structure get the same rule each.
    * A **structured value** (list, tuple, dict) is cleaned, then measured as
      its compact JSON encoding. When that encoding is longer than
      ``max_chars`` the value is replaced by a *truncation marker*, a dict
      that says what was cut::

          {"truncated": "<the first kept_chars characters of the JSON>",
           "kind": "list" | "dict", "items": <top-level length of the original>,
           "kept_chars": <length of the kept JSON text>}

      The marker's own encoding is at most ``max_chars`` characters. Cleaning
      stops once it is certain the value will be cut (at twice ``max_chars``
      of JSON), so a 10 MB result costs about as much as a 128 KiB one and the
      part that is cut is never examined, stored or sent.
    * Encoded bytes are then bounded too: a string field's JSON is at most
      ``6 * max_chars`` bytes plus its marker (a control character escapes to
      six bytes, any other character is at most four), a structured field's at
      most ``4 * max_chars`` bytes. :func:`turn_record_max_bytes` gives the
      worst case of a whole scratchpad turn record from this, and the settings
      refuse a ``MAX_TURN_FIELD_CHARS`` whose records could exceed a blob
      backend's largest append.

Depth policy (``max_depth``, ``MAX_PAYLOAD_DEPTH``)
    A value nested deeper than ``max_depth`` containers is refused with
    :class:`~jarvismem.errors.InvalidPayloadError` (``"result: nesting deeper
    than 64 levels"``) before anything is written; a reference cycle is
    refused the same way. Cleaning uses an explicit stack, never recursion, so
    no input can raise ``RecursionError``.

Types
    ``str``, ``int``, ``float``, ``bool`` and ``None`` are kept (floats as the
    JSON encoder writes them, ``NaN``/``Infinity`` included, as before);
    ``bytes``/``bytearray`` become text (UTF-8, undecodable bytes replaced);
    tuples become lists; dict keys become strings the way ``json`` converts
    them (``1`` -> ``"1"``, ``True`` -> ``"true"``, ``None`` -> ``"null"``).
    Anything else (a set, an arbitrary object, a tuple as a dict key, text with
    an unpaired surrogate, an int too long to print) is refused with
    :class:`~jarvismem.errors.InvalidPayloadError`: the JSON encoders refused
    those before, only later, and this keeps them refused before any write.

Secrets
    Every string, and every dict key, goes through ``redact``. A value under a
    key that ``is_secret_key`` names a secret (``{"password": ...}``,
    ``{"api_key": {...}}``) is replaced by ``[REDACTED]`` whatever its type,
    without being examined.

Policy object
    :class:`PayloadPolicy` holds the four knobs above (redactor, secret-key
    matcher, ``max_chars``, ``max_depth``) as one frozen value. The runtime
    builds it once from settings and every write path (turns, scratchpad
    notes, long-term text) receives that one object, so no path can pair one
    setting's redactor with another's bounds.

This module is layer 1: it imports only ``errors``, ``defaults`` and ``redaction``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from jarvismem.defaults import MAX_PAYLOAD_DEPTH, MAX_TURN_FIELD_CHARS
from jarvismem.errors import InvalidPayloadError
from jarvismem.redaction import REDACTED, Redactor, never_secret, no_redaction

# The record encoding (records.compact_json, one layer up): compact, non-ASCII as is.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

TRUNCATION_KEYS: Final = ("truncated", "kind", "items", "kept_chars")
"""The keys of a structured value's truncation marker, in order."""

MAX_ESCAPED_BYTES_PER_CHAR: Final = 6
"""Worst case UTF-8 bytes of one character of a string once JSON-encoded (``\\u001f``)."""

MAX_UTF8_BYTES_PER_CHAR: Final = 4
"""Worst case UTF-8 bytes of one character of an encoded JSON text."""

_STRING_MARKER_CHARS: Final = 32
"""Upper bound of ``…[truncated N chars]`` (N has at most 20 digits)."""

_RECORD_OVERHEAD_BYTES: Final = 8192
"""Upper bound of a turn record's bytes besides its three fields: JSON keys and
punctuation, ts, type, scope, a turn id (a validated id, at most 128 chars),
and a token count (an int the encoder can print: at most 4,300 digits by default)."""

# Ints this long are printed once to learn whether Python will print them at
# all (sys.set_int_max_str_digits, 4,300 digits by default); shorter ones
# always print.
_CHECKED_INT_BITS: Final = 1024


def truncate_text(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters plus ``…[truncated N chars]`` when longer."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return text[:max_chars] + f"…[truncated {cut} chars]"


def turn_record_max_bytes(max_chars: int) -> int:
    """Worst-case bytes of one scratchpad turn record whose fields obey ``max_chars``.

    Three fields (thought, action, result), each at most ``6 * max_chars``
    bytes plus its marker when a string (``4 * max_chars`` when structured),
    plus the rest of the record. Settings and the view compare this with a blob
    backend's ``max_append_bytes``.
    """
    field = MAX_ESCAPED_BYTES_PER_CHAR * (max_chars + _STRING_MARKER_CHARS) + 2
    return 3 * field + _RECORD_OVERHEAD_BYTES


def max_field_chars_for(append_bytes: int) -> int:
    """The largest ``max_chars`` whose turn records fit an append of ``append_bytes``."""
    room = (append_bytes - _RECORD_OVERHEAD_BYTES) // 3 - 2
    return max(0, room // MAX_ESCAPED_BYTES_PER_CHAR - _STRING_MARKER_CHARS)


def _clean_text(text: str, redact: Redactor, max_chars: int, field: str) -> str:
    text = truncate_text(redact(text), max_chars)
    if not text.isascii():
        # A lone surrogate passes json but not UTF-8 on the wire: refuse it now,
        # before any write, rather than in one tier after another has stored it.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPayloadError(
                f"{field}: text contains unpaired surrogates (not valid UTF-8)"
            ) from None
    return text


def _key_text(key: Any, field: str) -> str:
    """A dict key as the string ``json`` would write it (or InvalidPayloadError)."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return _int_text(key, field)
    if isinstance(key, float):
        return float.__repr__(key)
    raise InvalidPayloadError(
        f"{field}: dict keys must be str, int, float, bool or None, not {type(key).__name__}"
    )


@dataclass(frozen=True, slots=True)
class PayloadPolicy:
    """What every write path applies to a caller's value before it is stored.

    Attributes:
        redact: applied to every string and dict key (default: none).
        is_secret_key: names the dict keys whose values are hidden whatever
            their type (default: no key is a secret).
        max_chars: the size bound of one field (``MAX_TURN_FIELD_CHARS``).
        max_depth: the deepest nesting accepted (``MAX_PAYLOAD_DEPTH``).

    The defaults clean without redacting: redaction is the runtime's decision
    (``REDACTION_ENABLED``), made once where it builds the policy.
    """

    redact: Redactor = no_redaction
    is_secret_key: Callable[[str], bool] = never_secret
    max_chars: int = MAX_TURN_FIELD_CHARS
    max_depth: int = MAX_PAYLOAD_DEPTH
    # Cleaned dict keys (key -> (cleaned name, is secret)). An agent's payloads
    # repeat the same few keys every turn, and redacting each again tripled the
    # cost of a typical structured turn; the redactor and matcher are pure and
    # fixed for this policy, so a remembered answer is the answer.
    _keys: dict[str, tuple[str, bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # A bad bound would only show on the first write, far from where it was set.
        for name in ("max_chars", "max_depth"):
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"PayloadPolicy.{name} must be a positive int, got {bound!r}")
        for name in ("redact", "is_secret_key"):
            if not callable(getattr(self, name)):
                raise TypeError(f"PayloadPolicy.{name} must be callable")

    def clean(self, value: Any, field: str = "value") -> Any:
        """``value`` cleaned by this policy (:func:`clean_value`; ``field`` names it in errors)."""
        return clean_value(
            value,
            redact=self.redact,
            is_secret_key=self.is_secret_key,
            max_chars=self.max_chars,
            max_depth=self.max_depth,
            field=field,
            key_cache=self._keys,
        )


def clean_value(
    value: Any,
    *,
    redact: Redactor,
    is_secret_key: Callable[[str], bool],
    max_chars: int,
    max_depth: int = MAX_PAYLOAD_DEPTH,
    field: str = "value",
    key_cache: dict[str, tuple[str, bool]] | None = None,
) -> Any:
    """``value`` as bounded, redacted, JSON-safe data (see the module doc for the policy).

    ``field`` names the value in errors. ``key_cache`` remembers cleaned dict keys
    across calls; it must only ever see this ``redact`` and ``is_secret_key``
    (:class:`PayloadPolicy` keeps one per policy). Raises
    :class:`~jarvismem.errors.InvalidPayloadError` for nesting deeper than
    ``max_depth`` containers and for values JSON cannot hold; never recurses.
    """
    if isinstance(value, str):
        # The common case (a turn's thought or action) pays for no stack at all.
        return _clean_text(value, redact, max_chars, field)
    if isinstance(value, bytes | bytearray):
        return _clean_text(bytes(value).decode("utf-8", "replace"), redact, max_chars, field)
    if not isinstance(value, list | tuple | dict):
        return _check_scalar(value, field)

    # Depth-first in document order with one frame (an iterator) per open
    # container: nothing is visited twice, memory is bounded by the depth, and
    # when cleaning stops early what was cleaned is exactly a prefix of the
    # JSON. ``seen`` is a lower bound of that prefix's JSON length (strings
    # count their characters, escapes only add; containers their brackets).
    root: list[Any] | dict[str, Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any, bool]] = [_frame(value, root)]
    budget = 2 * max_chars
    seen = 2
    # An upper bound of the JSON length too: below max_chars, the value needs
    # no encoding to be measured (a typical structured turn is a few KB).
    upper = 2
    keys = key_cache if key_cache is not None else {}
    while stack:
        frame, out, is_dict = stack[-1]
        entry: Any = next(frame, _END)
        if entry is _END:
            stack.pop()
            continue
        if is_dict:
            key, item = entry
            known = keys.get(key) if type(key) is str else None
            if known is None:
                name = _key_text(key, field)
                secret = is_secret_key(name)
                name = _clean_text(name, redact, max_chars, field)
                if type(key) is str and len(key) <= _CACHED_KEY_CHARS:
                    if len(keys) >= _KEY_CACHE_SIZE:
                        keys.clear()  # bounded: a handful of distinct keys is the common case
                    keys[key] = (name, secret)
            else:
                name, secret = known
            seen += len(name) + 3
            upper += _ESCAPED * len(name) + 4
            if secret:
                # Replaced whatever its type, and never looked into.
                out[name] = REDACTED
                seen += len(REDACTED) + 2
                upper += len(REDACTED) + 3
                continue
        else:
            item = entry
        cleaned: Any
        if isinstance(item, str):
            cleaned = _clean_text(item, redact, max_chars, field)
            seen += len(cleaned) + 2
            upper += _ESCAPED * len(cleaned) + 3
        elif isinstance(item, list | tuple | dict):
            if len(stack) >= max_depth:
                raise InvalidPayloadError(f"{field}: nesting deeper than {max_depth} levels")
            cleaned = {} if isinstance(item, dict) else []
            stack.append(_frame(item, cleaned))
            seen += 2
            upper += 3
        elif isinstance(item, bytes | bytearray):
            cleaned = _clean_text(bytes(item).decode("utf-8", "replace"), redact, max_chars, field)
            seen += len(cleaned) + 2
            upper += _ESCAPED * len(cleaned) + 3
        else:
            cleaned = _check_scalar(item, field)
            # An int of n bits prints at least n/4 digits: a list of huge ints
            # reaches the budget as early as their text would.
            seen += 1 if type(cleaned) is not int else 1 + cleaned.bit_length() // 4
            # true/false/null; an int has at most bits/3 + 2 digits (and a
            # sign); a float prints in at most 24 characters.
            if cleaned is None or cleaned is True or cleaned is False:
                upper += 6
            elif isinstance(cleaned, int):
                upper += cleaned.bit_length() // 3 + 4
            else:
                upper += 26
        if is_dict:
            out[name] = cleaned
        else:
            out.append(cleaned)
        if seen > budget:
            # Certain to be cut: the rest is never examined, stored or sent.
            return _marker(_encode_checked(root, field), value, max_chars)
    if upper <= max_chars:
        return root
    encoded = _encode_checked(root, field)
    if len(encoded) > max_chars:
        return _marker(encoded, value, max_chars)
    return root


_END: Final[Any] = object()

_KEY_CACHE_SIZE: Final = 4096
_ESCAPED: Final = 6  # JSON characters of one escaped character at most (\u001f)
_CACHED_KEY_CHARS: Final = 64


def _frame(container: Any, out: Any) -> tuple[Any, Any, bool]:
    if isinstance(container, dict):
        return iter(container.items()), out, True
    return iter(container), out, False


def _check_scalar(value: Any, field: str) -> Any:
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        if value.bit_length() >= _CHECKED_INT_BITS:
            _int_text(value, field)
        return value
    raise InvalidPayloadError(
        f"{field}: a value of type {type(value).__name__} is not JSON-serialisable "
        "(accepted: str, bytes, int, float, bool, None, list, tuple, dict)"
    )


def _int_text(value: int, field: str) -> str:
    """An int as JSON writes it, or InvalidPayloadError when Python refuses to print it."""
    try:
        return int.__repr__(value)
    except ValueError:
        raise InvalidPayloadError(
            f"{field}: an int too long to encode (over the interpreter's digit limit)"
        ) from None


def _encode_checked(cleaned: Any, field: str) -> str:
    try:
        return _encode(cleaned)
    except (TypeError, ValueError) as exc:  # kept for types a subclass smuggles in
        raise InvalidPayloadError(f"{field}: not JSON-serialisable: {exc}") from None


def _marker(encoded: str, original: Any, max_chars: int) -> dict[str, Any]:
    """The truncation marker of a structured value whose JSON is ``encoded`` (or its start)."""
    kind = "dict" if isinstance(original, dict) else "list"
    keep = max(0, max_chars - 96)
    while True:
        kept = encoded[:keep]
        marker = {
            "truncated": kept,
            "kind": kind,
            "items": len(original),
            "kept_chars": len(kept),
        }
        # Re-encoding escapes the kept JSON's quotes and backslashes, so a kept
        # character costs one or two: removing half the excess each time
        # converges on the longest text that fits, in a few rounds.
        excess = len(_encode(marker)) - max_chars
        if excess <= 0 or keep == 0:
            return marker
        keep = max(0, keep - (excess + 1) // 2)


def check_depth(value: Any, max_depth: int = MAX_PAYLOAD_DEPTH, field: str = "value") -> None:
    """Raise :class:`InvalidPayloadError` when ``value`` nests more than ``max_depth`` containers.

    For values that are stored as given (cognitive spaces), where
    :func:`clean_value`'s rewriting does not apply: a check only, iterative,
    so no nesting can raise ``RecursionError`` here or in the JSON encoder after it.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise InvalidPayloadError(f"{field}: nesting deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


__all__ = [
    "MAX_ESCAPED_BYTES_PER_CHAR",
    "MAX_UTF8_BYTES_PER_CHAR",
    "TRUNCATION_KEYS",
    "check_depth",
    "clean_value",
    "max_field_chars_for",
    "truncate_text",
    "turn_record_max_bytes",
]
