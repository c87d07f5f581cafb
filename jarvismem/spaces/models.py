"""Cognitive spaces as plain data: what an agent believes (``world``) and intends (``tasks``).

No I/O here. A :class:`MemoryContainer` holds named :class:`Space` objects, each a map
(dict) or a list; the reserved ``world`` (map) and ``tasks`` (list of ``{id, text,
status}``) always exist. The rules a space obeys live here once, for the container and
the Redis store alike (:mod:`jarvismem.spaces.store`): the task rule, addressing list
items by id, and the revision rule (a mutation bumps the touched space and the
container by one). :class:`Space` methods change data only; the owner bumps revisions.
See docs/api.md, "Cognitive spaces".
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from jarvismem.defaults import MAX_PAYLOAD_DEPTH, SPACE_VALUE_MAX_CHARS
from jarvismem.errors import (
    InvalidPayloadError,
    PayloadTooLargeError,
    ReservedSpaceError,
    SpaceIndexError,
    SpaceItemNotFoundError,
    SpaceNotFoundError,
    SpaceTypeError,
    TaskNotFoundError,
)
from jarvismem.keys import MAX_REVISION, validate_id
from jarvismem.payload import check_depth

SpaceKind = Literal["map", "list"]
SpaceData = dict[str, Any] | list[Any]
TaskStatus = Literal["open", "done"]

WORLD = "world"
TASKS = "tasks"
RESERVED_SPACES: dict[str, SpaceKind] = {WORLD: "map", TASKS: "list"}
"""Reserved space name -> the kind it must keep."""

_TASK_STATUSES = ("open", "done")

T = TypeVar("T")


def now_ms() -> int:
    """Wall-clock time in integer milliseconds (the unit of every timestamp here)."""
    return time.time_ns() // 1_000_000


def new_container_id() -> str:
    """A fresh container id: ``"mem_"`` + 32 hex digits."""
    return "mem_" + uuid.uuid4().hex


def new_task_id() -> str:
    """A fresh task id: ``"task_"`` + 12 hex digits (unique within one agenda)."""
    return "task_" + uuid.uuid4().hex[:12]


def validate_space_name(name: object) -> str:
    """Return ``name`` if it can name a space, else raise ``InvalidIdError``."""
    return validate_id(name, "space name")


def kind_of(data: object) -> SpaceKind:
    """The kind a value would give a space; :class:`SpaceTypeError` if neither dict nor list."""
    if isinstance(data, dict):
        return "map"
    if isinstance(data, list):
        return "list"
    raise SpaceTypeError(f"space data must be a dict (map) or a list, got {type(data).__name__}")


def check_json(value: object, what: str = "value") -> None:
    """Raise unless ``value`` can be stored in a space as it is.

    :class:`InvalidPayloadError` for a value that does not survive a JSON round
    trip or nests deeper than ``MAX_PAYLOAD_DEPTH``; :class:`PayloadTooLargeError`
    when its JSON encoding is longer than ``SPACE_VALUE_MAX_CHARS``.
    """
    check_depth(value, MAX_PAYLOAD_DEPTH, what)
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    if len(encoded) > SPACE_VALUE_MAX_CHARS:
        raise PayloadTooLargeError(
            f"{what} is {len(encoded)} characters of JSON; a space value may hold at most "
            f"{SPACE_VALUE_MAX_CHARS}"
        )


def check_space_data(name: str, data: object) -> SpaceData:
    """Validate data about to become the whole content of space ``name``; returns it as stored.

    For ``tasks`` that is a new list whose tasks without a ``status`` have
    ``"status": "open"`` (the argument is left as it was); any other data is
    returned as given. Raises :class:`SpaceTypeError` (not a dict/list),
    :class:`ReservedSpaceError` (a reserved space would change kind) or
    :class:`InvalidPayloadError`.
    """
    if not isinstance(data, dict | list):
        kind_of(data)  # raises the SpaceTypeError
        raise AssertionError("unreachable")
    kind = kind_of(data)
    reserved = RESERVED_SPACES.get(name)
    if reserved is not None and reserved != kind:
        raise ReservedSpaceError(f"space {name!r} is reserved as a {reserved} space; cannot retype")
    if isinstance(data, dict):
        bad = [k for k in data if not isinstance(k, str)]
        if bad:
            raise InvalidPayloadError(f"map space {name!r} keys must be strings, got {bad[0]!r}")
    elif name == TASKS:
        data = [normalise_task(item) for item in data]
    check_json(data, f"data of space {name!r}")
    return data


_INT_FIELDS = ("rev", "created_at", "updated_at")


def _bounded_int(value: object, what: str) -> int:
    """A revision or epoch-ms stamp of a snapshot: an int in ``0..MAX_REVISION``.

    The store's compare-and-set script reads revisions as Lua doubles, exact
    only up to 2^53: a larger one loaded from an import would be bumped to a
    wrong number (the issue saw -9223372036854775808) and every later write to
    the spaces refused, so it is refused here, before anything is written.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidPayloadError(f"{what} must be a non-negative integer")
    if value > MAX_REVISION:
        raise InvalidPayloadError(
            f"{what} {value} is above {MAX_REVISION} (2^53-1), the largest the store keeps exactly"
        )
    return value


def normalise_task(item: object) -> dict[str, Any]:
    """``item`` as the ``tasks`` space stores it, or :class:`InvalidPayloadError`.

    The one task rule: a dict with a non-empty string ``id``, a string
    ``text`` and a ``status`` of ``"open"`` or ``"done"``; a missing ``status``
    is ``"open"`` (a new dict is returned then; ``item`` is never changed).
    """
    if not isinstance(item, dict):
        raise InvalidPayloadError(f"a task must be a dict {{id, text, status}}, got {item!r:.60}")
    if not isinstance(item.get("id"), str) or not item["id"]:
        raise InvalidPayloadError("a task needs a non-empty string 'id'")
    if not isinstance(item.get("text"), str):
        raise InvalidPayloadError(f"task {item['id']!r:.60} needs a string 'text'")
    if "status" not in item:
        return {**item, "status": "open"}
    if item["status"] not in _TASK_STATUSES:
        raise InvalidPayloadError(f"task {item['id']!r:.60} status must be 'open' or 'done'")
    return item


def check_item_id(item_id: object) -> str | int:
    """An id to find a list item by: a non-empty string or an int (not a bool)."""
    if isinstance(item_id, bool) or not isinstance(item_id, str | int) or item_id == "":
        raise InvalidPayloadError(
            f"an item id must be a non-empty string or an int, got {type(item_id).__name__}"
        )
    return item_id


def _clean_task_text(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidPayloadError("task text must be a non-empty string")
    return text.strip()


@dataclass(slots=True)
class Space:
    """One named space: ``data`` (dict = map space, list = list space) plus bookkeeping.

    ``rev`` counts the mutations of this space; ``created_at``/``updated_at``
    are epoch milliseconds; ``metadata`` is free JSON-able data of the caller.
    """

    data: SpaceData
    rev: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0

    @property
    def kind(self) -> SpaceKind:
        """``"map"`` or ``"list"``, decided by the shape of ``data``."""
        return kind_of(self.data)

    def copy(self) -> Space:
        """A deep copy: changing it never changes this space."""
        return Space(
            copy.deepcopy(self.data),
            self.rev,
            copy.deepcopy(self.metadata),
            self.created_at,
            self.updated_at,
        )

    # --- JSON ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict ``{data, rev, metadata, created_at, updated_at}``."""
        return {
            "data": copy.deepcopy(self.data),
            "rev": self.rev,
            "metadata": copy.deepcopy(self.metadata),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], name: str = "space") -> Space:
        """Rebuild from :meth:`to_dict` output; :class:`InvalidPayloadError` if malformed."""
        if not isinstance(raw, Mapping):
            raise InvalidPayloadError(f"space {name!r} must be an object")
        data = raw.get("data")
        if not isinstance(data, dict | list):
            raise InvalidPayloadError(f"space {name!r} data must be an object or an array")
        ints = {key: _bounded_int(raw.get(key, 0), f"space {name!r} {key}") for key in _INT_FIELDS}
        metadata = raw.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InvalidPayloadError(f"space {name!r} metadata must be an object")
        return cls(
            copy.deepcopy(data),
            ints["rev"],
            copy.deepcopy(metadata),
            ints["created_at"],
            ints["updated_at"],
        )

    # --- map operations ---------------------------------------------------------

    def _as_map(self, op: str) -> dict[str, Any]:
        if not isinstance(self.data, dict):
            raise SpaceTypeError(f"{op} needs a map space, but this space is a list")
        return self.data

    def _as_list(self, op: str) -> list[Any]:
        if not isinstance(self.data, list):
            raise SpaceTypeError(f"{op} needs a list space, but this space is a map")
        return self.data

    def get_key(self, key: str, default: Any = None) -> Any:
        """A deep copy of the value at ``key`` (``default`` when absent)."""
        return copy.deepcopy(self._as_map("get_key").get(key, default))

    def put_key(self, key: str, value: Any) -> None:
        """Set ``key`` to a JSON-able ``value``."""
        data = self._as_map("put_key")
        if not isinstance(key, str) or not key:
            raise InvalidPayloadError("a map key must be a non-empty string")
        check_json(value, f"value of key {key!r}")
        data[key] = copy.deepcopy(value)

    def delete_key(self, key: str) -> bool:
        """Remove ``key``; returns whether it was there."""
        return self._as_map("delete_key").pop(key, _MISSING) is not _MISSING

    def items(self) -> dict[str, Any]:
        """A deep copy of the whole map."""
        return copy.deepcopy(self._as_map("items"))

    # --- list operations ----------------------------------------------------------

    def _position(self, items: list[Any], index: int, *, inserting: bool) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise SpaceIndexError(f"index must be an int, got {type(index).__name__}")
        # Same meaning as Python's list indices: negatives count from the end,
        # and inserting at len(items) appends.
        pos = index + len(items) if index < 0 else index
        if not 0 <= pos < len(items) + (1 if inserting else 0):
            raise SpaceIndexError(f"index {index} is out of range for a list of {len(items)}")
        return pos

    def append(self, item: Any) -> None:
        """Add ``item`` at the end."""
        items = self._as_list("append")
        check_json(item, "item")
        items.append(copy.deepcopy(item))

    def prepend(self, item: Any) -> None:
        """Add ``item`` at the front."""
        self.insert(0, item)

    def insert(self, index: int, item: Any) -> None:
        """Insert ``item`` before position ``index`` (like ``list.insert``, but range-checked)."""
        items = self._as_list("insert")
        pos = self._position(items, index, inserting=True)
        check_json(item, "item")
        items.insert(pos, copy.deepcopy(item))

    def remove(self, index: int) -> Any:
        """Remove and return the item at ``index``."""
        items = self._as_list("remove")
        return items.pop(self._position(items, index, inserting=False))

    def update_item(self, index: int, item: Any) -> Any:
        """Replace the item at ``index``; returns the previous item."""
        items = self._as_list("update_item")
        pos = self._position(items, index, inserting=False)
        check_json(item, "item")
        old = items[pos]
        items[pos] = copy.deepcopy(item)
        return old

    def _item_position(self, op: str, item_id: str | int) -> int:
        items = self._as_list(op)
        check_item_id(item_id)
        for pos, item in enumerate(items):
            if isinstance(item, dict) and item.get("id") == item_id:
                return pos
        raise SpaceItemNotFoundError(f"{op}: no item with id {item_id!r:.60}")

    def remove_by_id(self, item_id: str | int) -> Any:
        """Remove and return the first item whose ``id`` is ``item_id``."""
        items = self._as_list("remove_from_space")
        return items.pop(self._item_position("remove_from_space", item_id))

    def update_by_id(self, item_id: str | int, fn: Callable[[Any], Any]) -> Any:
        """Replace the first item whose ``id`` is ``item_id`` with ``fn(copy_of_item)``.

        ``fn`` returns the new item, or ``None`` after changing its argument in
        place. The new item must be a dict keeping the same ``id`` (else
        :class:`InvalidPayloadError`, nothing changed). Returns a copy of it.
        """
        items = self._as_list("update_in_space")
        pos = self._item_position("update_in_space", item_id)
        draft = copy.deepcopy(items[pos])
        result = fn(draft)
        new = draft if result is None else result
        if not isinstance(new, dict) or new.get("id") != item_id:
            raise InvalidPayloadError(
                f"update_in_space: the updated item must be a dict keeping id {item_id!r:.60}"
            )
        check_json(new, "item")
        items[pos] = copy.deepcopy(new)
        return copy.deepcopy(new)

    # --- task-list operations (the ``tasks`` space) -------------------------------

    def _task_index(self, task_id: str) -> int:
        for i, task in enumerate(self._as_list("tasks")):
            if isinstance(task, dict) and task.get("id") == task_id:
                return i
        raise TaskNotFoundError(f"no task with id {task_id!r}")

    def tasks_insert(self, index: int, text: str, *, task_id: str | None = None) -> dict[str, Any]:
        """Insert an open task before ``index``; returns a copy of the new task."""
        items = self._as_list("tasks_insert")
        pos = self._position(items, index, inserting=True)
        task = {"id": task_id or new_task_id(), "text": _clean_task_text(text), "status": "open"}
        items.insert(pos, task)
        return dict(task)

    def tasks_add(self, text: str, *, task_id: str | None = None) -> dict[str, Any]:
        """Append an open task (lowest priority); returns a copy of it."""
        return self.tasks_insert(len(self._as_list("tasks_add")), text, task_id=task_id)

    def tasks_complete(self, task_id: str) -> dict[str, Any]:
        """Mark a task done; returns a copy of it. :class:`TaskNotFoundError` if unknown."""
        task = self._as_list("tasks_complete")[self._task_index(task_id)]
        task["status"] = "done"
        return dict(task)

    def tasks_remove(self, task_id: str) -> dict[str, Any]:
        """Remove a task; returns it. :class:`TaskNotFoundError` if unknown."""
        return dict(self._as_list("tasks_remove").pop(self._task_index(task_id)))

    def tasks_open(self) -> list[dict[str, Any]]:
        """Copies of the open tasks, in priority order."""
        items = self._as_list("tasks_open")
        return [dict(t) for t in items if isinstance(t, dict) and t.get("status") == "open"]

    def tasks_next(self) -> dict[str, Any] | None:
        """The first open task (a copy), or ``None`` when nothing is open."""
        open_tasks = self.tasks_open()
        return open_tasks[0] if open_tasks else None

    def tasks_reorder(self, task_ids: Iterable[str]) -> None:
        """Reorder tasks to ``task_ids``, which must be a permutation of the existing ids."""
        items = self._as_list("tasks_reorder")
        wanted = list(task_ids)
        by_id = {t["id"]: t for t in items if isinstance(t, dict)}
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            raise TaskNotFoundError(f"tasks_reorder: unknown task id {unknown[0]!r}")
        if len(set(wanted)) != len(wanted):
            raise InvalidPayloadError("tasks_reorder: an id is listed twice")
        missing = [i for i in by_id if i not in set(wanted)]
        if missing or len(wanted) != len(items):
            raise InvalidPayloadError(
                f"tasks_reorder needs every existing task id exactly once; missing {missing[:3]!r}"
            )
        items[:] = [by_id[i] for i in wanted]


_MISSING = object()


@dataclass(slots=True)
class MemoryContainer:
    """All spaces of one (workflow, agent), with a container-wide revision.

    Attributes: ``id`` (``"mem_..."``), ``rev`` (mutations of any space),
    ``spaces`` (name -> :class:`Space`; ``world`` and ``tasks`` always present),
    ``created_at``/``updated_at`` (epoch ms), ``metadata`` (free JSON-able dict).
    """

    id: str = field(default_factory=new_container_id)
    rev: int = 0
    spaces: dict[str, Space] = field(default_factory=dict)
    created_at: int = field(default_factory=now_ms)
    updated_at: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.updated_at:
            self.updated_at = self.created_at
        for name, kind in RESERVED_SPACES.items():
            space = self.spaces.get(name)
            if space is None:
                self.spaces[name] = Space(
                    {} if kind == "map" else [],
                    created_at=self.created_at,
                    updated_at=self.created_at,
                )
            elif space.kind != kind:
                raise ReservedSpaceError(f"space {name!r} must be a {kind} space")

    # --- plumbing -------------------------------------------------------------------

    def _touch(self, space: Space) -> None:
        """Record one mutation of ``space``: its rev and the container's rev go up."""
        now = max(now_ms(), self.updated_at)
        space.rev += 1
        space.updated_at = now
        self.rev += 1
        self.updated_at = now

    def _apply(self, name: str, fn: Callable[[Space], T], *, changed: bool = True) -> T:
        """Run ``fn`` on a copy of the space, check the whole result, then keep it.

        The check is the one every write of the Redis store makes
        (:func:`check_space_data`), so the container accepts exactly what the
        store and :meth:`from_dict` accept, and a failed call changes nothing.
        """
        space = self.get_space(name)
        draft = space.copy()
        result = fn(draft)
        if changed:
            space.data = check_space_data(name, draft.data)
            self._touch(space)
        return result

    def get_space(self, name: str) -> Space:
        """The live space object (changing it directly skips revisions); SpaceNotFoundError."""
        space = self.spaces.get(validate_space_name(name))
        if space is None:
            raise SpaceNotFoundError(f"no space named {name!r}")
        return space

    def has_space(self, name: str) -> bool:
        """Whether a space of that name exists."""
        return validate_space_name(name) in self.spaces

    def space_names(self) -> list[str]:
        """Names of every space, reserved ones first."""
        return [*RESERVED_SPACES, *sorted(n for n in self.spaces if n not in RESERVED_SPACES)]

    # --- whole spaces -----------------------------------------------------------------

    def ensure_space(self, name: str, initial: SpaceData | None = None) -> Space:
        """Return the space, creating it from ``initial`` (default ``{}``) when missing.

        An existing space is left alone (no revision change), but if ``initial``
        is given with the other shape, :class:`SpaceTypeError` is raised.
        """
        validate_space_name(name)
        existing = self.spaces.get(name)
        if existing is not None:
            if initial is not None and kind_of(initial) != existing.kind:
                raise SpaceTypeError(f"space {name!r} exists as a {existing.kind} space")
            return existing
        return self.put_space(name, {} if initial is None else initial)

    def put_space(
        self, name: str, data: SpaceData, metadata: Mapping[str, Any] | None = None
    ) -> Space:
        """Create or replace a space's data (and metadata when given); returns the space."""
        validate_space_name(name)
        data = check_space_data(name, data)
        if metadata is not None:
            check_json(dict(metadata), "metadata")
        space = self.spaces.get(name)
        if space is None:
            now = max(now_ms(), self.updated_at)
            space = Space([], created_at=now, updated_at=now)
            self.spaces[name] = space
        space.data = copy.deepcopy(data)
        if metadata is not None:
            space.metadata = copy.deepcopy(dict(metadata))
        self._touch(space)
        return space

    def update_space(self, name: str, fn: Callable[[SpaceData], SpaceData | None]) -> Space:
        """Replace a space's data with ``fn(copy_of_data)``.

        ``fn`` may return new data or ``None`` after changing its argument in
        place. The result is validated like :meth:`put_space`; on any error the
        space is unchanged.
        """
        space = self.get_space(name)
        draft = copy.deepcopy(space.data)
        result = fn(draft)
        new = draft if result is None else result
        space.data = check_space_data(name, new)
        self._touch(space)
        return space

    def delete_space(self, name: str) -> None:
        """Delete a custom space (container rev +1). Reserved spaces: ReservedSpaceError."""
        if validate_space_name(name) in RESERVED_SPACES:
            raise ReservedSpaceError(f"space {name!r} is reserved and cannot be deleted")
        if name not in self.spaces:
            raise SpaceNotFoundError(f"no space named {name!r}")
        del self.spaces[name]
        self.rev += 1
        self.updated_at = max(now_ms(), self.updated_at)

    # --- map spaces ------------------------------------------------------------------

    def get_key(self, space: str, key: str, default: Any = None) -> Any:
        """A copy of ``key`` in map space ``space`` (``default`` when absent)."""
        return self.get_space(space).get_key(key, default)

    def put_key(self, space: str, key: str, value: Any) -> None:
        """Set ``key`` in map space ``space``."""
        self._apply(space, lambda s: s.put_key(key, value))

    def delete_key(self, space: str, key: str) -> bool:
        """Remove ``key``; returns whether it existed (revisions move only if it did)."""
        target = self.get_space(space)
        target._as_map("delete_key")
        return self._apply(space, lambda s: s.delete_key(key), changed=key in target.data)

    # --- list spaces ---------------------------------------------------------------------

    def append(self, space: str, item: Any) -> None:
        """Append ``item`` to list space ``space``."""
        self._apply(space, lambda s: s.append(item))

    def prepend(self, space: str, item: Any) -> None:
        """Put ``item`` first in list space ``space``."""
        self._apply(space, lambda s: s.prepend(item))

    def insert(self, space: str, index: int, item: Any) -> None:
        """Insert ``item`` before ``index`` in list space ``space``."""
        self._apply(space, lambda s: s.insert(index, item))

    def remove(self, space: str, index: int) -> Any:
        """Remove and return the item at ``index`` of list space ``space``."""
        return self._apply(space, lambda s: s.remove(index))

    def update_item(self, space: str, index: int, item: Any) -> Any:
        """Replace the item at ``index``; returns the previous one."""
        return self._apply(space, lambda s: s.update_item(index, item))

    def remove_from_space(self, space: str, item_id: str | int) -> Any:
        """Remove and return the first item of list space ``space`` whose ``id`` is ``item_id``.

        :class:`SpaceNotFoundError` (no such space), :class:`SpaceTypeError` (a map
        space), :class:`SpaceItemNotFoundError` (no item with that id).
        """
        return self._apply(space, lambda s: s.remove_by_id(item_id))

    def update_in_space(self, space: str, item_id: str | int, fn: Callable[[Any], Any]) -> Any:
        """Replace the item whose ``id`` is ``item_id`` with ``fn(copy_of_item)``; returns it.

        ``fn`` returns the new item or ``None`` after changing its argument in
        place; the item must stay a dict with the same ``id``, and in ``tasks``
        a valid task. Errors as :meth:`remove_from_space`, plus
        :class:`InvalidPayloadError`; on any error nothing changes.
        """
        return self._apply(space, lambda s: s.update_by_id(item_id, fn))

    # --- world --------------------------------------------------------------------------

    def world_get(self, key: str, default: Any = None) -> Any:
        """A belief from ``world``."""
        return self.get_key(WORLD, key, default)

    def world_put(self, key: str, value: Any) -> None:
        """Set a belief in ``world``."""
        self.put_key(WORLD, key, value)

    def world_delete(self, key: str) -> bool:
        """Forget a belief; returns whether it existed."""
        return self.delete_key(WORLD, key)

    def world_items(self) -> dict[str, Any]:
        """A copy of every belief."""
        return self.get_space(WORLD).items()

    # --- tasks ----------------------------------------------------------------------------

    def tasks_add(self, text: str) -> dict[str, Any]:
        """Append an open task with a generated id; returns it."""
        return self._apply(TASKS, lambda s: s.tasks_add(text))

    def tasks_insert(self, index: int, text: str) -> dict[str, Any]:
        """Insert an open task at priority position ``index``; returns it."""
        return self._apply(TASKS, lambda s: s.tasks_insert(index, text))

    def tasks_complete(self, task_id: str) -> dict[str, Any]:
        """Mark a task done; returns it."""
        return self._apply(TASKS, lambda s: s.tasks_complete(task_id))

    def tasks_remove(self, task_id: str) -> dict[str, Any]:
        """Remove a task; returns it."""
        return self._apply(TASKS, lambda s: s.tasks_remove(task_id))

    def tasks_reorder(self, task_ids: Iterable[str]) -> None:
        """Reorder the agenda; ``task_ids`` must be a permutation of the existing ids."""
        ids = list(task_ids)
        self._apply(TASKS, lambda s: s.tasks_reorder(ids))

    def tasks_next(self) -> dict[str, Any] | None:
        """The first open task, or ``None``."""
        return self.get_space(TASKS).tasks_next()

    def tasks_open(self) -> list[dict[str, Any]]:
        """Open tasks in priority order."""
        return self.get_space(TASKS).tasks_open()

    # --- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-able snapshot (also the format of the rehydrate bundle and export)."""
        return {
            "id": self.id,
            "rev": self.rev,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": copy.deepcopy(self.metadata),
            "spaces": {name: self.spaces[name].to_dict() for name in self.space_names()},
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> MemoryContainer:
        """Rebuild from :meth:`to_dict` output; :class:`InvalidPayloadError` if malformed."""
        if not isinstance(raw, Mapping):
            raise InvalidPayloadError("a memory container must be an object")
        cid = raw.get("id")
        if not isinstance(cid, str) or not cid.startswith("mem_"):
            raise InvalidPayloadError("container id must be a string starting with 'mem_'")
        ints = {key: _bounded_int(raw.get(key, 0), f"container {key}") for key in _INT_FIELDS}
        metadata = raw.get("metadata") or {}
        raw_spaces = raw.get("spaces") or {}
        if not isinstance(metadata, dict) or not isinstance(raw_spaces, Mapping):
            raise InvalidPayloadError("container metadata and spaces must be objects")
        spaces = {}
        for name, body in raw_spaces.items():
            validate_space_name(name)
            space = Space.from_dict(body, name)
            space.data = check_space_data(name, space.data)
            spaces[name] = space
        return cls(
            id=cid,
            rev=ints["rev"],
            spaces=spaces,
            created_at=ints["created_at"],
            updated_at=ints["updated_at"],
            metadata=copy.deepcopy(metadata),
        )
