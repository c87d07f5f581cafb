"""Tier 1: the working scratchpad, JSONL in blob storage per (workflow, step, agent).

File format (documented in docs/architecture.md): UTF-8 JSON objects, one per line,
each written as ``"\\n" + json``. The *leading* newline is deliberate: if a
crash tears a record half-way, the next append still starts on a fresh line,
so one torn record never spoils the records after it. Readers skip blank
lines and lines that do not parse (with a warning).

Each record: ``{"ts": float, "type": str, "scope": "step"|"goal", "data": …}``
and, for turns, ``"turn_id"``. Goal-scoped records are also appended to a
small per-(step, agent) goals blob, so rendering can always include every goal
finding while reading only a bounded tail of the (unbounded) scratchpad.

Two read shapes: :meth:`WorkingScratchpad.read_records` returns the stored
records as above; :meth:`WorkingScratchpad.read_all` returns them flat,
``{"type", "scope", **data}``, the shape JarvisCore's scratchpad returns (so its
users read ``entries[0]["value"]``). Likewise :meth:`WorkingScratchpad.get_notes`
is JarvisCore's markdown of this step's goal findings only, while the bundle uses
:meth:`WorkingScratchpad.render`, which also carries forward every step's and
agent's goal findings and shows the recent turns and notes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jarvismem.backends.blob.base import BlobStorage
from jarvismem.defaults import SCRATCHPAD_BUDGET_CHARS, SCRATCHPAD_TAIL_BYTES
from jarvismem.errors import BlobNotFoundError, InvalidPayloadError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.payload import PayloadPolicy
from jarvismem.records import TURN, TURN_FIELDS, Scope, encode_record, parse_records
from jarvismem.records import compact_json as _dumps

log = logging.getLogger(__name__)
_TURN_JSON = _dumps(TURN)

MAX_ENTRY_TYPE_CHARS = 256
"""Longest ``entry_type`` of a note: a label, not a payload (a longer one is refused)."""

_NO_POLICY = PayloadPolicy()
"""Cleaning without redaction, for a scratchpad built without the runtime's policy."""


@dataclass(frozen=True, slots=True)
class ScratchpadBounds:
    """How much of a scratchpad a read takes (``SCRATCHPAD_*`` settings).

    Attributes:
        tail_bytes: the most bytes one tail read fetches.
        budget_chars: the most characters :meth:`WorkingScratchpad.render` returns.
    """

    tail_bytes: int = SCRATCHPAD_TAIL_BYTES
    budget_chars: int = SCRATCHPAD_BUDGET_CHARS

    def __post_init__(self) -> None:
        # Caught here rather than as an empty or failed first read.
        for name in ("tail_bytes", "budget_chars"):
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"ScratchpadBounds.{name} must be a positive int, got {bound!r}")


_DEFAULT_BOUNDS = ScratchpadBounds()


# How many goal-findings blobs (one per step and agent that wrote findings) the
# bundle reads at once: enough to overlap Azure round trips, few enough not to
# flood the store or the event loop for a workflow of hundreds of steps.
_CARRY_CONCURRENCY = 16


GOALS_LISTING_MAX_AGE = 5.0
"""Seconds a listing of a workflow's goal-findings blobs is reused by the bundle.

Every bundle reads the goal findings of every (step, agent) of its workflow; the
*listing* of which (step, agent)s wrote any is cached per workflow in a runtime
(each listed blob is still read every time, so new findings of a known (step,
agent) show at once). A goal finding written through the runtime adds its blob
to the listing at once; one written elsewhere (another process or runtime) for a
(step, agent) that had none is seen within this bound."""


class GoalIndex:
    """The goal-findings blobs of one workflow, as last listed.

    Its owner shares it: the runtime's workflow state holds one per workflow and
    gives it to every view's scratchpad, so a finding written through one view
    is in the next bundle of every other view of the workflow at once.
    """

    __slots__ = ("_added", "_listed_at", "_paths", "blob", "max_age", "prefix")

    def __init__(
        self, blob: BlobStorage, prefix: str, max_age: float = GOALS_LISTING_MAX_AGE
    ) -> None:
        self.blob = blob
        self.prefix = prefix
        self.max_age = max_age
        self._paths: list[str] | None = None
        self._listed_at = 0.0
        # Blobs this process wrote to, with when (a listing begun before that
        # may have missed them).
        self._added: dict[str, float] = {}

    @property
    def fresh(self) -> bool:
        """Whether the listing is younger than ``max_age``."""
        return self._paths is not None and time.monotonic() - self._listed_at <= self.max_age

    async def paths(self) -> list[str]:
        """The goal blobs' paths, listed again when older than ``max_age``."""
        if self._paths is not None and self.fresh:
            return self._paths
        started = time.monotonic()
        listed = await self.blob.list(self.prefix)
        added = {p for p, at in self._added.items() if at >= started}
        self._added = {p: at for p, at in self._added.items() if at >= started}
        paths = sorted(added.union(listed)) if added else listed
        self._paths, self._listed_at = paths, started
        return paths

    def add(self, path: str) -> None:
        """A goal blob this process just wrote (visible to the next bundle at once)."""
        self._added[path] = time.monotonic()
        if self._paths is not None and path not in self._paths:
            self._paths = sorted([*self._paths, path])

    def forget(self) -> None:
        """Drop the listing (the next read lists again)."""
        self._paths = None


@dataclass(frozen=True, slots=True)
class ScratchpadLinks:
    """How a scratchpad meets the rest of its workflow (the facade supplies both).

    Attributes:
        append: the blob append to use (None: the blob's own). The facade's
            durable writer queues appends in the local outbox during a blob outage
            instead of raising into the kernel.
        goals: the workflow's listing of goal blobs, shared by its scratchpads
            (None: one of the scratchpad's own).
    """

    append: Callable[[str, bytes], Awaitable[object]] | None = None
    goals: GoalIndex | None = None


_NO_LINKS = ScratchpadLinks()


class WorkingScratchpad:
    """What am I in the middle of? One step's notes and turns, in blob storage."""

    def __init__(
        self,
        blob: BlobStorage,
        keyspace: KeySpace,
        workflow_id: str,
        step_id: str,
        agent_id: str,
        *,
        policy: PayloadPolicy = _NO_POLICY,
        bounds: ScratchpadBounds = _DEFAULT_BOUNDS,
        links: ScratchpadLinks = _NO_LINKS,
    ) -> None:
        """A scratchpad view; no I/O.

        ``policy``: how a note's data is cleaned (the runtime's one, redacting
        per settings); a note's data obeys the turn fields' size policy, so
        every record fits the blob store's largest append. ``bounds``: how
        much a read takes. ``links``: the append to use and the workflow's goal
        listing (by default ``blob.append`` and a listing of its own).
        """
        self.blob = blob
        self.keyspace = keyspace
        self.workflow_id = validate_id(workflow_id, "workflow_id")
        self.step_id = validate_id(step_id, "step_id")
        self.agent_id = validate_id(agent_id, "agent_id")
        self.path = keyspace.scratchpad(workflow_id, step_id, agent_id)
        self.goals_path = keyspace.goals(workflow_id, step_id, agent_id)
        self.tail_bytes = bounds.tail_bytes
        self.budget_chars = bounds.budget_chars
        self.policy = policy
        self._append = links.append or blob.append
        goals = links.goals
        if goals is None:
            goals = GoalIndex(blob, keyspace.goals_prefix(self.workflow_id))
        self._goals = goals

    # --- writes ------------------------------------------------------------------------

    async def write(self, entry_type: str, data: Any, scope: Scope = "step") -> None:
        """Append an entry. ``scope="goal"`` findings are carried across steps."""
        if scope not in ("step", "goal"):
            raise InvalidPayloadError(f"scope must be 'step' or 'goal', got {scope!r}")
        if not isinstance(entry_type, str) or not entry_type:
            raise InvalidPayloadError("entry_type must be a non-empty string")
        if len(entry_type) > MAX_ENTRY_TYPE_CHARS:
            raise InvalidPayloadError(
                f"entry_type is longer than {MAX_ENTRY_TYPE_CHARS} characters"
            )
        record = {"ts": time.time(), "type": entry_type, "scope": scope, "data": self._clean(data)}
        payload = encode_record(record)
        if scope == "goal":
            # Goals blob first: a finding must never be in the scratchpad only.
            await self._append(self.goals_path, payload)
            self._goals.add(self.goals_path)
        await self._append(self.path, payload)

    async def append_turn(self, turn_id: str, turn: dict[str, Any], ts: float) -> None:
        """Append a turn record (called by ``UnifiedMemory.log_turn``)."""
        record = {"ts": ts, "type": TURN, "scope": "step", "turn_id": turn_id, "data": turn}
        await self._append(self.path, encode_record(record))

    async def append_turn_encoded(self, turn_id: str, fields: list[str], ts: float) -> None:
        """Append a turn record built from the ledger entry's encoded fields.

        ``fields``: ``encode_fields`` of the turn's ledger entry (``turn_id``,
        ``step_id``, ``agent_id``, ``ts``, ``thought``, ``action``, ``result``,
        ``tokens``, in that order). The line is byte-for-byte what
        :meth:`append_turn` writes, without encoding the values a second time.
        """
        await self._append(self.path, encode_turn_line(fields))

    def _clean(self, data: Any) -> Any:
        """Redacted, bounded, JSON-safe data (InvalidPayloadError when too deep or not JSON)."""
        return self.policy.clean(data, "data")

    # --- reads ---------------------------------------------------------------------------

    async def read_all(self) -> list[dict[str, Any]]:
        """Every readable entry of this scratchpad, oldest first, flat (reads the whole blob).

        JarvisCore's shape: ``{"type", "scope", **data}``, so a note written as
        ``write("obs", {"value": 42})`` reads back with ``entry["value"] == 42``;
        a turn is ``{"type": "turn", "scope": "step", "turn_id", "ts", "thought",
        "action", "result", "tokens"}``. See :func:`flat_record` for data that is
        not a dict. :meth:`read_records` keeps the stored form (time stamp and data
        apart from the record's own fields).
        """
        return [flat_record(record) for record in await self.read_records()]

    async def read_records(self) -> list[dict[str, Any]]:
        """Every readable record in its stored form, oldest first (reads the whole blob).

        ``{"ts", "type", "scope", "data"}`` (turns also ``"turn_id"``): nothing a
        caller wrote can shadow the record's own fields, unlike :meth:`read_all`.
        A turn appended twice (re-logged after a crash: the ledger keeps one copy)
        reads back once, in its first place, with its last copy's content.
        """
        try:
            raw = await self.blob.read(self.path)
        except BlobNotFoundError:
            return []
        return _dedupe_turns(parse_records(raw, source=self.path))

    async def read_recent(self, max_bytes: int | None = None) -> list[dict[str, Any]]:
        """Records from a bounded tail read (at most ``max_bytes``, default ``tail_bytes``)."""
        want = self.tail_bytes if max_bytes is None else min(max_bytes, self.tail_bytes)
        try:
            raw = await self.blob.tail(self.path, want)
        except BlobNotFoundError:
            return []
        return parse_records(raw, source=self.path, partial_head=len(raw) >= want)

    def _first_read(self) -> int:
        return min(self.tail_bytes, 2 * self.budget_chars + 4096)

    async def _recent_for_budget(self) -> list[dict[str, Any]]:
        """Just enough of the tail to fill the render budget.

        Reads twice the budget (a record's JSON is about as long as its
        markdown) and widens x4, up to ``tail_bytes``, only when that read held
        no whole record (one huge record). Rendering then costs the same at
        100 turns and at 100,000.
        """
        want = self._first_read()
        while True:
            try:
                raw = await self.blob.tail(self.path, want)
            except BlobNotFoundError:
                return []
            full = len(raw) >= want
            records = parse_records(raw, source=self.path, partial_head=full)
            if records or not full or want >= self.tail_bytes:
                return records
            want = min(self.tail_bytes, want * 4)

    async def goal_findings(self, max_bytes: int | None = None) -> list[dict[str, Any]]:
        """This (step, agent)'s goal-scoped records (the newest ``max_bytes`` of them,
        default ``tail_bytes``)."""
        want = self.tail_bytes if max_bytes is None else min(max_bytes, self.tail_bytes)
        try:
            raw = await self.blob.tail(self.goals_path, want)
        except BlobNotFoundError:
            return []
        records = parse_records(raw, source=self.goals_path, partial_head=len(raw) >= want)
        return dedupe_findings(records)

    async def workflow_goal_findings(self, max_bytes: int | None = None) -> list[dict[str, Any]]:
        """Goal findings of every step and agent of the workflow, oldest first, each
        tagged with its ``step_id`` and ``agent_id``.

        This is how later steps, and other agents, carry forward what earlier
        steps found. ``max_bytes``: how much of each (step, agent)'s findings to
        read, the newest (default ``tail_bytes``); identical findings of one
        (step, agent) are read back once (:func:`dedupe_findings`).
        """
        want = self.tail_bytes if max_bytes is None else min(max_bytes, self.tail_bytes)
        prefix = self.keyspace.goals_prefix(self.workflow_id)
        gate = asyncio.Semaphore(_CARRY_CONCURRENCY)

        async def read(path: str) -> list[dict[str, Any]]:
            step, _, agent_file = path[len(prefix) :].partition("/")
            async with gate:
                try:
                    raw = await self.blob.tail(path, want)
                except BlobNotFoundError:  # deleted between the listing and the read
                    return []
            records = parse_records(raw, source=path, partial_head=len(raw) >= want)
            agent = agent_file.removesuffix(".jsonl")
            return [
                {**record, "step_id": step, "agent_id": agent}
                for record in dedupe_findings(records)
            ]

        paths = await self._goals.paths()
        found = [r for part in await asyncio.gather(*(read(p) for p in paths)) for r in part]
        found.sort(key=_ts_of)  # stable: one blob's findings keep their order
        return found

    async def _carried(self, max_bytes: int) -> list[dict[str, Any]]:
        """Every step's and agent's findings (this one's included), or this
        (step, agent)'s own when the others cannot be read (logged): a listing
        failure must not hide this step's own notes."""
        try:
            return await self.workflow_goal_findings(max_bytes)
        except Exception as exc:
            log.warning(
                "goal findings of other steps unavailable, showing this step's own: %s: %s",
                type(exc).__name__,
                exc,
            )
        self._goals.forget()
        own = await self.goal_findings(max_bytes)
        return [{**r, "step_id": self.step_id, "agent_id": self.agent_id} for r in own]

    async def get_notes(self) -> str:
        """This step's goal findings as markdown, JarvisCore's format ("" when none).

        ``## Findings from prior step ({step_id})`` then one line per finding of
        this (step, agent), ``- **{type}**: {json of the rest}`` - what a next
        step's prompt is given; turns and step-scoped notes (tactical noise) are
        left out. Reads the newest ``tail_bytes`` of the findings.
        The bundle's ``scratchpad`` is the richer :meth:`render`.
        """
        return render_findings(self.step_id, await self.goal_findings())

    async def render(self) -> str:
        """The bundle's scratchpad markdown, within ``budget_chars``.

        Goal findings come first: those of every step and agent of the
        workflow (carried forward; another step's or agent's are marked with
        where they came from), oldest first; when they overflow, the oldest
        carried ones are left out before this step's own. Then the most recent
        turns and notes, newest kept first when the budget runs out. Reads only
        bounded tails. When the other steps' findings cannot be read, this
        step's own are shown and the failure is logged.
        """
        # The markdown holds at most budget_chars, so twice that of goals is plenty.
        first = self._first_read()
        # The listing of goal blobs is cached (GoalIndex); this (step, agent)'s
        # own blob joins it as soon as this process writes a finding.
        recent, goals = await asyncio.gather(self._recent_for_budget(), self._carried(first))
        return render_notes(goals, recent, self.budget_chars, here=(self.step_id, self.agent_id))


def _ts_of(record: dict[str, Any]) -> float:
    ts = record.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else 0.0


def flat_record(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record in JarvisCore's flat shape: ``{"type", "scope", **data}``.

    A turn also carries ``turn_id`` and ``ts`` before its fields, as JarvisCore's
    turns do. Keys of the data replace ``type`` and ``scope`` when they collide,
    as in JarvisCore. Data that is not a dict (jarvismem accepts any JSON value;
    JarvisCore only dicts) is kept under ``"data"``. The record's time stamp of a
    note is not added (JarvisCore's notes have none): :meth:`~WorkingScratchpad.
    read_records` has it.
    """
    flat: dict[str, Any] = {"type": record.get("type"), "scope": record.get("scope", "step")}
    if record.get("type") == TURN:
        flat["turn_id"] = record.get("turn_id")
        flat["ts"] = record.get("ts")
    data = record.get("data")
    if isinstance(data, dict):
        flat.update(data)
    elif "data" in record:
        flat["data"] = data
    return flat


def render_findings(step_id: str, findings: Iterable[dict[str, Any]]) -> str:
    """JarvisCore's markdown of goal findings ("" for none): header, then one line each.

    ``- **{type}**: {json}``, the json being the flat record without ``type`` and
    ``scope``, written as JarvisCore writes it (``json.dumps``, non-ASCII kept).
    """
    lines = [f"## Findings from prior step ({step_id})"]
    for record in findings:
        rest = flat_record(record)
        entry_type = rest.pop("type", None) or "finding"
        rest.pop("scope", None)
        lines.append(f"- **{entry_type}**: {json.dumps(rest, ensure_ascii=False)}")
    return "\n".join(lines) if len(lines) > 1 else ""


def encode_turn_line(fields: list[str]) -> bytes:
    """The scratchpad line of a turn from its ledger entry's ``encode_fields`` output.

    Equal to ``encode_record({"ts", "type": "turn", "scope": "step", "turn_id",
    "data": {"thought", "action", "result", "tokens"}})``: the values are already
    compact JSON (and checked for valid UTF-8) by ``encode_fields``.
    """
    if len(fields) != 16 or tuple(fields[0::2]) != TURN_FIELDS:
        raise InvalidPayloadError("not the encoded fields of a turn entry")
    return (
        f'\n{{"ts":{fields[7]},"type":{_TURN_JSON},"scope":"step","turn_id":{fields[1]},'
        f'"data":{{"thought":{fields[9]},"action":{fields[11]},"result":{fields[13]},'
        f'"tokens":{fields[15]}}}}}'
    ).encode()


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return value
    return _dumps(value)


def _render_record(record: dict[str, Any], here: tuple[str, str] | None = None) -> str:
    """One record as markdown; a carried finding (tagged with another step or agent
    than ``here``) says where it came from."""
    data = record.get("data")
    if record.get("type") == TURN and isinstance(data, dict):
        lines = [f"### Turn {record.get('turn_id', '?')}"]
        for name in ("thought", "action", "result"):
            if data.get(name) not in (None, ""):
                lines.append(f"- **{name.capitalize()}:** {_fmt(data[name])}")
        return "\n".join(lines)
    text = f"- **{record.get('type', 'note')}:** {_fmt(data)}"
    origin = (record.get("step_id"), record.get("agent_id"))
    if here is not None and origin[0] is not None and origin != here:
        text += f" _(from step {origin[0]}, agent {origin[1]})_"
    return text


def dedupe_findings(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Goal findings with identical content (same type, same data) kept once, the first.

    Two writers of one (workflow, step, agent), say two processes, or a kernel
    re-run after a crash, each append the finding they made; an append-only
    blob cannot refuse the second copy without a read-modify-write race, so
    readers drop it instead. Content decides (not the time stamp, which differs
    between the copies); a record written before this rule reads the same way.
    """
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records:
        try:
            identity = _dumps([record.get("type"), record.get("data")])
        except (TypeError, ValueError):
            out.append(record)  # cannot happen for parsed JSON; keep rather than drop
            continue
        if identity in seen:
            continue
        seen.add(identity)
        out.append(record)
    return out


def _dedupe_turns(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the last copy of each turn id (a re-run turn is appended twice)."""
    out: list[dict[str, Any]] = []
    seen: dict[Any, int] = {}
    for record in records:
        turn_id = record.get("turn_id")
        # A hand-edited or foreign record may carry any JSON as turn_id: only
        # plain ids are deduplicated (a dict here used to fail the whole render).
        if record.get("type") == TURN and isinstance(turn_id, str | int):
            if turn_id in seen:
                out[seen[turn_id]] = record
                continue
            seen[turn_id] = len(out)
        out.append(record)
    return out


_OMITTED_ROOM = 64
"""Characters kept for the line saying how many carried findings were left out."""


def _goals_block(
    goals: list[dict[str, Any]], budget_chars: int, here: tuple[str, str] | None
) -> str:
    """``## Goal findings`` within ``budget_chars``: the oldest carried findings
    (another step's or agent's) are left out first, then the text is cut."""
    lines = [_render_record(g, here) for g in goals]
    carried = [
        here is not None
        and g.get("step_id") is not None
        and (g.get("step_id"), g.get("agent_id")) != here
        for g in goals
    ]
    header = "## Goal findings"
    size = len(header) + sum(len(line) + 1 for line in lines)
    omitted = 0
    for i, is_carried in enumerate(carried):
        # Room for the "left out" line once something is left out.
        if size + (_OMITTED_ROOM if omitted else 0) <= budget_chars:
            break
        if is_carried:
            size -= len(lines[i]) + 1
            lines[i] = ""
            omitted += 1
    kept = [line for line in lines if line]
    if omitted:
        kept.insert(0, f"- …{omitted} earlier finding(s) of other steps left out")
    block = "\n".join([header, *kept])
    if len(block) > budget_chars:
        block = block[: max(0, budget_chars - 20)] + "\n…[truncated]"
    return block


def render_notes(
    goals: list[dict[str, Any]],
    recent: list[dict[str, Any]],
    budget_chars: int,
    *,
    here: tuple[str, str] | None = None,
) -> str:
    """The bundle's scratchpad markdown ("" when there is nothing).

    ``here``: the (step, agent) rendering; goal findings tagged with another
    (``step_id``/``agent_id``, as :meth:`WorkingScratchpad.workflow_goal_findings`
    tags them) say where they came from.
    """
    parts: list[str] = []
    used = 0
    if goals:
        block = _goals_block(goals, budget_chars, here)
        parts.append(block)
        used += len(block) + 2
    steps = [r for r in _dedupe_turns(recent) if r.get("scope") != "goal"]
    rendered: list[str] = []
    header = "## Recent activity"
    room = budget_chars - used - len(header) - 1
    for record in reversed(steps):
        text = _render_record(record)
        if len(text) + 2 > room:
            if not rendered and room > 40:
                # The newest record alone is too big: show its start rather than nothing.
                rendered.append(text[: room - 16] + "\n…[truncated]")
            break
        rendered.append(text)
        room -= len(text) + 2
    if rendered:
        parts.append(header + "\n" + "\n\n".join(reversed(rendered)))
    return "\n\n".join(parts)
