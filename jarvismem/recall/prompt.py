"""Putting memory into a prompt, and taking a turn back out of it.

:func:`preflight` builds the exact chat messages a turn would send (without calling an
LLM) within a character budget, by priority (recalled entries, spaces, summary,
scratchpad), and redacts again everything taken from memory: an entry stored before a
secret pattern existed must not reach the LLM. :func:`recall_for_turn` and
:func:`capture_conversation` apply a :class:`MemoryPolicy` around a store. The rules:
docs/recall.md, "Into the prompt".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypedDict, Unpack

from pydantic import BaseModel

from jarvismem import redaction
from jarvismem.defaults import PROMPT_BUDGET_CHARS
from jarvismem.errors import RecallStoreMissingError
from jarvismem.recall.models import MemoryEntry, RecallResult
from jarvismem.recall.policy import SOURCE_CONVERSATION, MemoryPolicy
from jarvismem.recall.stores import RecallStore
from jarvismem.redaction import Redactor

P = ParamSpec("P")

TRUNCATION_MARKER = " …[truncated]"
RELEVANT_MEMORY_HEADER = "Relevant memory:"
CONTEXT_HEADER = "Memory context:"


class Preflight(BaseModel):
    """What a turn would send: ``messages`` (role/content dicts), the recalled entries
    used and dropped (over ``max_entries`` or the budget), and the total characters
    of all message contents."""

    messages: list[dict[str, str]]
    used_entries: list[RecallResult]
    dropped_entries: list[RecallResult]
    chars: int


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, size: int) -> str:
    """``text`` shortened to at most ``size`` characters, marker included ("" if no room)."""
    if len(text) <= size:
        return text
    if size <= len(TRUNCATION_MARKER):
        return ""
    return text[: size - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER


def _spaces_text(raw: Any) -> str:
    """World beliefs and open tasks from a spaces snapshot (``MemoryContainer.to_dict()``)."""
    if raw is None:
        return ""
    if hasattr(raw, "to_dict"):
        raw = raw.to_dict()
    if not isinstance(raw, Mapping):
        return ""
    spaces = raw.get("spaces", raw)
    world = (spaces.get("world") or {}).get("data") or {}
    tasks = (spaces.get("tasks") or {}).get("data") or []
    lines: list[str] = []
    if isinstance(world, Mapping) and world:
        lines.append("World state:")
        for key in sorted(world):
            lines.append(f"- {key}: {_one_line(json.dumps(world[key], ensure_ascii=False))}")
    open_tasks = [t for t in tasks if isinstance(t, Mapping) and t.get("status") == "open"]
    if open_tasks:
        lines.append("Open tasks (first = highest priority):")
        lines.extend(
            f"{n}. {_one_line(str(t.get('text', '')))}" for n, t in enumerate(open_tasks, 1)
        )
    return "\n".join(lines)


def _bundle_sections(
    bundle: Mapping[str, Any] | None, redactor: Redactor, is_secret_key: Callable[[str], bool]
) -> list[tuple[str, str]]:
    """``(title, body)`` of each bundle part worth showing, highest priority first, redacted."""
    if not bundle:
        return []
    spaces = bundle.get("spaces")
    if spaces is not None and hasattr(spaces, "to_dict"):
        spaces = spaces.to_dict()
    # Spaces by structure (a belief under "api_key" is hidden whatever its
    # type), the rendered text by pattern.
    spaces = redaction.redact_value(spaces, redactor, is_secret_key)
    sections = [
        ("Spaces", redactor(_spaces_text(spaces))),
        ("Long-term summary", redactor(str(bundle.get("ltm_summary") or "").strip())),
        ("Scratchpad notes", redactor(str(bundle.get("scratchpad") or "").strip())),
    ]
    return [(title, body) for title, body in sections if body]


def redact_results(results: Sequence[RecallResult], redactor: Redactor) -> list[RecallResult]:
    """Recall results with their entries' content redacted (unchanged ones are kept as they are)."""
    out: list[RecallResult] = []
    for result in results:
        content = redactor(result.entry.content)
        if content != result.entry.content:
            entry = result.entry.model_copy(update={"content": content})
            result = result.model_copy(update={"entry": entry})
        out.append(result)
    return out


def preflight(
    instructions: str,
    user_message: str,
    *,
    bundle: Mapping[str, Any] | None = None,
    recalled: Sequence[RecallResult] = (),
    policy: MemoryPolicy,
    budget_chars: int = PROMPT_BUDGET_CHARS,
    redactor: Redactor = redaction.default_redactor,
    is_secret_key: Callable[[str], bool] = redaction.is_secret_key,
) -> Preflight:
    """The exact messages of a turn, and which recalled entries they use.

    Args:
        instructions: the agent's system prompt (first message).
        user_message: this turn's user message (last message).
        bundle: a rehydrate bundle; its ``spaces``, ``ltm_summary`` and
            ``scratchpad`` are rendered.
        recalled: recall results, most relevant first.
        policy: ``inject`` picks the layout, ``max_entries`` caps the entries,
            ``enabled=False`` leaves recalled entries out.
        budget_chars: the most characters of memory text (headers excluded).
        redactor, is_secret_key: applied to everything taken from memory
            (entries, and the bundle's spaces, summary and scratchpad) before
            it is measured and assembled; the runtime passes its own.
    """
    if budget_chars < 0:
        raise ValueError("budget_chars must be >= 0")
    recalled = redact_results(recalled, redactor)
    allowed = list(recalled[: policy.max_entries]) if policy.enabled else []
    over_cap = list(recalled[len(allowed) :])
    over_budget: list[RecallResult] = []

    entry_lines = [_one_line(r.entry.content) for r in allowed]
    sections = _bundle_sections(bundle, redactor, is_secret_key)
    total = sum(len(line) for line in entry_lines) + sum(len(b) for _, b in sections)

    # Over budget: cut bundle sections from the lowest priority up...
    for i in range(len(sections) - 1, -1, -1):
        if total <= budget_chars:
            break
        title, body = sections[i]
        keep = _cut(body, max(0, len(body) - (total - budget_chars)))
        total -= len(body) - len(keep)
        sections[i] = (title, keep)
    sections = [(t, b) for t, b in sections if b]
    # ...then drop recalled entries, lowest-ranked first; a lone entry is cut.
    while total > budget_chars and entry_lines:
        if len(entry_lines) == 1:
            keep = _cut(entry_lines[0], max(0, len(entry_lines[0]) - (total - budget_chars)))
            total -= len(entry_lines[0]) - len(keep)
            if keep:
                entry_lines[0] = keep
                break
        total -= len(entry_lines.pop())
        over_budget.insert(0, allowed.pop())

    messages: list[dict[str, str]] = []
    if instructions.strip():
        messages.append({"role": "system", "content": instructions})
    if policy.inject == "instructions":
        if entry_lines:
            body = "\n".join(f"- {line}" for line in entry_lines)
            messages.append({"role": "system", "content": f"{RELEVANT_MEMORY_HEADER}\n{body}"})
        if sections:
            body = "\n\n".join(f"## {title}\n{text}" for title, text in sections)
            messages.append({"role": "system", "content": f"{CONTEXT_HEADER}\n\n{body}"})
    else:
        parts = []
        if entry_lines:
            lines = [
                f"- [{result.score:.3f}] {line}"
                for result, line in zip(allowed, entry_lines, strict=True)
            ]
            parts.append("## Recalled memory\n" + "\n".join(lines))
        parts.extend(f"## {title}\n{text}" for title, text in sections)
        if parts:
            messages.append(
                {"role": "system", "content": CONTEXT_HEADER + "\n\n" + "\n\n".join(parts)}
            )
    messages.append({"role": "user", "content": user_message})
    return Preflight(
        messages=messages,
        used_entries=allowed,
        dropped_entries=over_budget + over_cap,
        chars=sum(len(m["content"]) for m in messages),
    )


def _messages_of(build: Callable[P, Preflight]) -> Callable[P, list[dict[str, str]]]:
    # Keeps the builder's typed signature (ParamSpec) without writing it twice.
    @functools.wraps(build)
    def messages(*args: P.args, **kwargs: P.kwargs) -> list[dict[str, str]]:
        return build(*args, **kwargs).messages

    return messages


build_messages = _messages_of(preflight)
build_messages.__doc__ = (
    "The chat messages of a turn: :func:`preflight`'s ``messages``, same arguments."
)


def conversation_capture_text(user: str, assistant: str) -> str:
    """One turn as a memory entry: ``"User: …\\nAssistant: …"``."""
    return f"User: {user.strip()}\nAssistant: {assistant.strip()}"


class TurnRecallOptions(TypedDict, total=False):
    """The optional arguments of :func:`recall_for_turn`, passed on to
    :meth:`MemoryPolicy.recall_request` as they are (one list, kept in one place)."""

    session_id: str | None
    context: Mapping[str, str] | None
    limit: int | None
    filter: Mapping[str, str] | None
    min_score: float


async def recall_for_turn(
    store: RecallStore | None,
    policy: MemoryPolicy,
    *,
    agent_id: str,
    query: str,
    **options: Unpack[TurnRecallOptions],
) -> list[RecallResult]:
    """Recall up to ``limit`` (default ``policy.max_entries``) entries for this turn
    ([] when disabled); ``session_id``, ``context``, ``limit``, ``filter`` and
    ``min_score`` as in :meth:`MemoryPolicy.recall_request`.

    Raises :class:`RecallStoreMissingError` when enabled without a store, and the
    policy's scope errors (session id, namespace context).
    """
    if not policy.enabled:
        return []
    request = policy.recall_request(agent_id=agent_id, query=query, **options)
    if store is None:
        raise RecallStoreMissingError("recall is enabled but no recall store is configured")
    return await store.recall(request)


async def capture_conversation(
    store: RecallStore | None,
    policy: MemoryPolicy,
    *,
    agent_id: str,
    user: str,
    assistant: str,
    session_id: str | None = None,
    context: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> MemoryEntry | None:
    """Write the turn as an entry when ``policy.capture == "conversation"``; else ``None``.

    The entry's metadata carries ``"source": "conversation"`` and
    ``"kind": "conversation"`` (see :meth:`MemoryPolicy.write_request`).
    """
    if not policy.enabled or policy.capture != "conversation":
        return None
    request = policy.write_request(
        agent_id=agent_id,
        content=conversation_capture_text(user, assistant),
        session_id=session_id,
        context=context,
        metadata={"kind": "conversation", **(metadata or {})},
        source=SOURCE_CONVERSATION,
    )
    if store is None:
        raise RecallStoreMissingError(
            "conversation capture is on but no recall store is configured"
        )
    return await store.write(request)
