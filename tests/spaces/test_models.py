"""The pure cognitive-space model: operations, errors, revisions, JSON round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jarvismem.errors import (
    InvalidIdError,
    InvalidPayloadError,
    ReservedSpaceError,
    SpaceIndexError,
    SpaceNotFoundError,
    SpaceTypeError,
    TaskNotFoundError,
)
from jarvismem.spaces import MemoryContainer, SpaceItemNotFoundError


@pytest.fixture
def mem() -> MemoryContainer:
    return MemoryContainer()


def revs(mem: MemoryContainer) -> dict[str, int]:
    return {"memory": mem.rev, **{n: s.rev for n, s in mem.spaces.items()}}


def test_fresh_container_has_reserved_spaces_at_rev_zero(mem: MemoryContainer) -> None:
    assert mem.id.startswith("mem_") and len(mem.id) == 36
    assert revs(mem) == {"memory": 0, "world": 0, "tasks": 0}
    assert mem.get_space("world").kind == "map"
    assert mem.get_space("tasks").kind == "list"


def test_revision_sequence_world_tasks_world(mem: MemoryContainer) -> None:
    mem.world_put("door", "open")
    mem.tasks_add("walk through the door")
    mem.world_put("door", "closed")
    assert revs(mem) == {"memory": 3, "world": 2, "tasks": 1}


def test_deleting_custom_space_bumps_only_container(mem: MemoryContainer) -> None:
    mem.put_space("notes", ["a"])
    before = revs(mem)
    mem.delete_space("notes")
    assert not mem.has_space("notes")
    assert mem.rev == before["memory"] + 1
    assert (mem.get_space("world").rev, mem.get_space("tasks").rev) == (0, 0)


@pytest.mark.parametrize("name", ["world", "tasks"])
def test_reserved_space_cannot_be_deleted(mem: MemoryContainer, name: str) -> None:
    with pytest.raises(ReservedSpaceError):
        mem.delete_space(name)


@pytest.mark.parametrize(("name", "data"), [("world", []), ("tasks", {})])
def test_reserved_space_cannot_be_retyped(mem: MemoryContainer, name: str, data: Any) -> None:
    with pytest.raises(ReservedSpaceError):
        mem.put_space(name, data)
    with pytest.raises(ReservedSpaceError):
        mem.update_space(name, lambda _d: data)
    assert mem.rev == 0


def test_space_type_follows_data_shape(mem: MemoryContainer) -> None:
    assert mem.put_space("facts", {"a": 1}).kind == "map"
    assert mem.put_space("steps", [1, 2]).kind == "list"


def test_put_space_rejects_non_container_data(mem: MemoryContainer) -> None:
    with pytest.raises(SpaceTypeError):
        mem.put_space("scalar", 3)  # type: ignore[arg-type]


def test_ensure_space_creates_once(mem: MemoryContainer) -> None:
    created = mem.ensure_space("plan", [])
    assert created.rev == 1 and mem.rev == 1
    again = mem.ensure_space("plan", [])
    assert again is created and mem.rev == 1


def test_ensure_space_with_other_shape_is_type_error(mem: MemoryContainer) -> None:
    mem.ensure_space("plan", [])
    with pytest.raises(SpaceTypeError):
        mem.ensure_space("plan", {})


def test_update_space_applies_function_to_copy(mem: MemoryContainer) -> None:
    mem.put_space("counter", {"n": 1})
    mem.update_space("counter", lambda d: {"n": d["n"] + 1})  # type: ignore[call-overload]
    mem.update_space("counter", lambda d: d.update(m=0))  # type: ignore[union-attr]
    assert mem.get_space("counter").data == {"n": 2, "m": 0}
    assert mem.get_space("counter").rev == 3


def test_failed_update_leaves_space_untouched(mem: MemoryContainer) -> None:
    mem.put_space("counter", {"n": 1})

    def boom(data: Any) -> Any:
        data["n"] = 99
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        mem.update_space("counter", boom)
    assert mem.get_space("counter").data == {"n": 1}
    assert mem.get_space("counter").rev == 1


def test_missing_space_raises_not_found(mem: MemoryContainer) -> None:
    with pytest.raises(SpaceNotFoundError):
        mem.put_key("nope", "k", 1)
    with pytest.raises(SpaceNotFoundError):
        mem.delete_space("nope")
    assert not mem.has_space("nope")


def test_space_name_is_validated(mem: MemoryContainer) -> None:
    with pytest.raises(InvalidIdError):
        mem.put_space("../etc", {})
    with pytest.raises(InvalidIdError):
        mem.put_space("__container__", {})


def test_map_operations(mem: MemoryContainer) -> None:
    mem.put_space("facts", {})
    mem.put_key("facts", "sky", "blue")
    assert mem.get_key("facts", "sky") == "blue"
    assert mem.get_key("facts", "grass", "green") == "green"
    assert mem.delete_key("facts", "sky") is True
    assert mem.delete_key("facts", "sky") is False
    assert mem.get_space("facts").rev == 3  # put_space, put_key, one real delete


def test_map_op_on_list_space_is_type_error(mem: MemoryContainer) -> None:
    with pytest.raises(SpaceTypeError):
        mem.put_key("tasks", "k", 1)
    with pytest.raises(SpaceTypeError):
        mem.get_key("tasks", "k")
    assert mem.rev == 0


def test_list_op_on_map_space_is_type_error(mem: MemoryContainer) -> None:
    for op in (
        lambda: mem.append("world", 1),
        lambda: mem.prepend("world", 1),
        lambda: mem.insert("world", 0, 1),
        lambda: mem.remove("world", 0),
        lambda: mem.update_item("world", 0, 1),
    ):
        with pytest.raises(SpaceTypeError):
            op()
    assert mem.rev == 0


def test_list_operations(mem: MemoryContainer) -> None:
    mem.put_space("steps", [])
    mem.append("steps", "b")
    mem.prepend("steps", "a")
    mem.insert("steps", 2, "d")
    mem.insert("steps", -1, "c")
    assert mem.get_space("steps").data == ["a", "b", "c", "d"]
    assert mem.remove("steps", 0) == "a"
    assert mem.update_item("steps", -1, "D") == "d"
    assert mem.get_space("steps").data == ["b", "c", "D"]


@pytest.mark.parametrize("index", [5, -5])
def test_list_index_out_of_range(mem: MemoryContainer, index: int) -> None:
    mem.put_space("steps", ["x"])
    with pytest.raises(SpaceIndexError):
        mem.remove("steps", index)
    with pytest.raises(SpaceIndexError):
        mem.insert("steps", index, "y")
    assert mem.get_space("steps").data == ["x"]


def test_non_json_value_is_rejected(mem: MemoryContainer) -> None:
    with pytest.raises(InvalidPayloadError):
        mem.world_put("when", object())
    with pytest.raises(InvalidPayloadError):
        mem.world_put("nan", float("nan"))
    assert mem.rev == 0


def test_world_helpers(mem: MemoryContainer) -> None:
    mem.world_put("user", {"name": "Ada"})
    assert mem.world_get("user") == {"name": "Ada"}
    assert mem.world_items() == {"user": {"name": "Ada"}}
    assert mem.world_delete("user") is True
    assert mem.world_get("user") is None


def test_world_get_returns_a_copy(mem: MemoryContainer) -> None:
    mem.world_put("user", {"name": "Ada"})
    mem.world_get("user")["name"] = "Eve"
    assert mem.world_get("user") == {"name": "Ada"}


def test_tasks_add_generates_open_task(mem: MemoryContainer) -> None:
    task = mem.tasks_add("  write report ")
    assert task["text"] == "write report" and task["status"] == "open"
    assert task["id"].startswith("task_")
    assert mem.get_space("tasks").data == [task]


def test_tasks_insert_sets_priority(mem: MemoryContainer) -> None:
    low = mem.tasks_add("low")
    high = mem.tasks_insert(0, "high")
    assert [t["id"] for t in mem.tasks_open()] == [high["id"], low["id"]]


def test_tasks_next_is_first_open(mem: MemoryContainer) -> None:
    assert mem.tasks_next() is None
    first = mem.tasks_add("first")
    second = mem.tasks_add("second")
    mem.tasks_complete(first["id"])
    assert mem.tasks_next() == second
    assert [t["id"] for t in mem.tasks_open()] == [second["id"]]


def test_tasks_remove(mem: MemoryContainer) -> None:
    task = mem.tasks_add("x")
    assert mem.tasks_remove(task["id"]) == task
    assert mem.tasks_open() == []


@pytest.mark.parametrize("op", ["complete", "remove"])
def test_unknown_task_raises(mem: MemoryContainer, op: str) -> None:
    mem.tasks_add("x")
    with pytest.raises(TaskNotFoundError):
        getattr(mem, f"tasks_{op}")("task_nope")
    assert mem.get_space("tasks").rev == 1


def test_empty_task_text_is_rejected(mem: MemoryContainer) -> None:
    with pytest.raises(InvalidPayloadError):
        mem.tasks_add("   ")


def test_tasks_reorder_permutation(mem: MemoryContainer) -> None:
    a, b, c = (mem.tasks_add(t)["id"] for t in "abc")
    mem.tasks_reorder([c, a, b])
    assert [t["id"] for t in mem.tasks_open()] == [c, a, b]


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        (lambda a, b: [a], InvalidPayloadError),
        (lambda a, b: [a, a], InvalidPayloadError),
        (lambda a, b: [a, b, "task_x"], TaskNotFoundError),
        (lambda a, b: [a, "task_x"], TaskNotFoundError),
    ],
)
def test_tasks_reorder_rejects_non_permutation(mem: MemoryContainer, ids: Any, error: type) -> None:
    a, b = mem.tasks_add("a")["id"], mem.tasks_add("b")["id"]
    with pytest.raises(error):
        mem.tasks_reorder(ids(a, b))
    assert [t["id"] for t in mem.tasks_open()] == [a, b]


def test_tasks_space_rejects_malformed_items(mem: MemoryContainer) -> None:
    with pytest.raises(InvalidPayloadError):
        mem.put_space("tasks", [{"id": "t1", "text": "x", "status": "maybe"}])


def test_json_round_trip(mem: MemoryContainer) -> None:
    mem.world_put("k", [1, {"x": None}])
    mem.tasks_add("t")
    mem.put_space("custom", {"a": "b"}, metadata={"owner": "me"})
    mem.metadata["source"] = "test"
    text = json.dumps(mem.to_dict())
    back = MemoryContainer.from_dict(json.loads(text))
    assert back.to_dict() == mem.to_dict()
    assert back.get_space("custom").metadata == {"owner": "me"}


def test_from_dict_rejects_malformed(mem: MemoryContainer) -> None:
    good = mem.to_dict()
    with pytest.raises(InvalidPayloadError):
        MemoryContainer.from_dict({**good, "id": "x"})
    with pytest.raises(InvalidPayloadError):
        MemoryContainer.from_dict({**good, "rev": -1})
    with pytest.raises(ReservedSpaceError):
        MemoryContainer.from_dict({**good, "spaces": {"world": {"data": [], "rev": 0}}})


@pytest.mark.parametrize("field", ["rev", "created_at", "updated_at"])
def test_snapshot_integers_above_2_53_are_refused(field: str) -> None:
    snapshot = MemoryContainer().to_dict()
    snapshot[field] = 2**53
    with pytest.raises(InvalidPayloadError, match="2\\^53-1"):
        MemoryContainer.from_dict(snapshot)
    snapshot = MemoryContainer().to_dict()
    snapshot["spaces"]["world"][field] = 2**53
    with pytest.raises(InvalidPayloadError, match="2\\^53-1"):
        MemoryContainer.from_dict(snapshot)
    snapshot["spaces"]["world"][field] = 2**53 - 1
    assert MemoryContainer.from_dict(snapshot).spaces["world"].to_dict()[field] == 2**53 - 1


def test_deep_nesting_is_refused_without_recursion() -> None:
    from jarvismem.errors import InvalidPayloadError
    from jarvismem.spaces.models import check_json

    deep: object = "x"
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(InvalidPayloadError, match="nesting deeper than 64"):
        check_json(deep, "value of key 'k'")


def test_a_space_value_over_the_size_limit_is_refused() -> None:
    from jarvismem.defaults import SPACE_VALUE_MAX_CHARS
    from jarvismem.errors import PayloadTooLargeError
    from jarvismem.spaces.models import check_json

    check_json("x" * (SPACE_VALUE_MAX_CHARS - 2))  # fits with its two quotes
    with pytest.raises(PayloadTooLargeError, match="at most"):
        check_json("x" * (SPACE_VALUE_MAX_CHARS - 1))


# --- one task rule: the seed's task without a status, and round trips -----------------------


def test_a_task_appended_without_status_is_open_and_round_trips(mem: MemoryContainer) -> None:
    # The seed design's own example appends {id, text}; before, the container kept
    # it as given and its own from_dict(to_dict()) then refused the snapshot.
    item = {"id": "t1", "text": "write the tests"}
    mem.append("tasks", item)
    assert item == {"id": "t1", "text": "write the tests"}  # the caller's dict is not changed
    assert mem.get_space("tasks").data == [
        {"id": "t1", "text": "write the tests", "status": "open"}
    ]
    assert mem.tasks_next() == {"id": "t1", "text": "write the tests", "status": "open"}
    back = MemoryContainer.from_dict(json.loads(json.dumps(mem.to_dict())))
    assert back.to_dict() == mem.to_dict()


def test_from_dict_gives_a_stored_task_without_status_the_default() -> None:
    snapshot = MemoryContainer().to_dict()
    snapshot["spaces"]["tasks"]["data"] = [{"id": "t1", "text": "x"}]
    assert MemoryContainer.from_dict(snapshot).tasks_open() == [
        {"id": "t1", "text": "x", "status": "open"}
    ]


@pytest.mark.parametrize(
    "item",
    ["buy milk", {"text": "no id"}, {"id": "t1"}, {"id": "t1", "text": "x", "status": "blocked"}],
)
@pytest.mark.parametrize("op", ["append", "prepend", "insert", "update_item", "put_space"])
def test_a_bad_task_is_refused_by_every_write_and_changes_nothing(
    mem: MemoryContainer, item: Any, op: str
) -> None:
    # Before, append/prepend/insert/update_item kept any item in `tasks`.
    mem.tasks_add("keep me")
    before = mem.to_dict()
    call = {
        "append": lambda: mem.append("tasks", item),
        "prepend": lambda: mem.prepend("tasks", item),
        "insert": lambda: mem.insert("tasks", 0, item),
        "update_item": lambda: mem.update_item("tasks", 0, item),
        "put_space": lambda: mem.put_space("tasks", [item]),
    }[op]
    with pytest.raises(InvalidPayloadError):
        call()
    assert mem.to_dict() == before


_TASKS = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(min_size=1, max_size=8), "text": st.text(max_size=20)},
        optional={
            "status": st.sampled_from(["open", "done"]),
            "note": st.one_of(st.none(), st.integers(), st.text(max_size=5)),
        },
    ),
    max_size=6,
)
_ITEMS = st.lists(
    st.one_of(
        st.integers(),
        st.text(max_size=10),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    ),
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(tasks=_TASKS, items=_ITEMS, use_put=st.booleans())
def test_whatever_the_container_accepts_its_snapshot_loads_back(
    tasks: list[dict[str, Any]], items: list[Any], use_put: bool
) -> None:
    mem = MemoryContainer()
    if use_put:
        mem.put_space("tasks", tasks)
    else:
        for task in tasks:
            mem.append("tasks", task)
    mem.put_space("custom", [])
    for item in items:
        mem.append("custom", item)
    snapshot = json.loads(json.dumps(mem.to_dict()))
    back = MemoryContainer.from_dict(snapshot)
    assert back.to_dict() == mem.to_dict()
    assert all(t["status"] in ("open", "done") for t in back.get_space("tasks").data)


# --- items by id -------------------------------------------------------------------------------


def test_remove_from_space_by_item_id(mem: MemoryContainer) -> None:
    mem.put_space("notes", [{"id": "a", "v": 1}, "loose", {"id": "b", "v": 2}, {"id": 7}])
    rev = mem.rev
    assert mem.remove_from_space("notes", "b") == {"id": "b", "v": 2}
    assert mem.remove_from_space("notes", 7) == {"id": 7}
    assert mem.get_space("notes").data == [{"id": "a", "v": 1}, "loose"]
    assert (mem.rev, mem.get_space("notes").rev) == (rev + 2, 3)
    task = mem.tasks_add("done soon")
    assert mem.remove_from_space("tasks", task["id"]) == task
    assert mem.tasks_open() == []


def test_update_in_space_by_item_id(mem: MemoryContainer) -> None:
    mem.put_space("notes", [{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    new = mem.update_in_space("notes", "b", lambda item: {**item, "v": 3})
    assert new == {"id": "b", "v": 3}

    def in_place(item: dict[str, Any]) -> None:
        item["v"] = 10

    assert mem.update_in_space("notes", "a", in_place) == {"id": "a", "v": 10}
    assert mem.get_space("notes").data == [{"id": "a", "v": 10}, {"id": "b", "v": 3}]
    assert mem.get_space("notes").rev == 3
    task = mem.tasks_add("ship it")
    mem.update_in_space("tasks", task["id"], lambda t: {**t, "status": "done"})
    assert mem.tasks_open() == []


def test_item_id_operations_fail_clearly_and_change_nothing(mem: MemoryContainer) -> None:
    mem.put_space("notes", [{"id": "a", "v": 1}])
    mem.world_put("k", "v")
    task = mem.tasks_add("x")
    before = mem.to_dict()
    with pytest.raises(SpaceItemNotFoundError, match="no item with id 'zz'"):
        mem.remove_from_space("notes", "zz")
    with pytest.raises(SpaceItemNotFoundError):
        mem.update_in_space("notes", "zz", lambda item: item)
    with pytest.raises(SpaceTypeError, match="list space"):
        mem.remove_from_space("world", "k")
    with pytest.raises(SpaceTypeError):
        mem.update_in_space("world", "k", lambda item: item)
    with pytest.raises(SpaceNotFoundError):
        mem.remove_from_space("nope", "a")
    with pytest.raises(InvalidPayloadError, match="keeping id"):
        mem.update_in_space("notes", "a", lambda item: {"id": "other"})
    with pytest.raises(InvalidPayloadError, match="keeping id"):
        mem.update_in_space("notes", "a", lambda item: "not a dict")
    with pytest.raises(InvalidPayloadError, match="status"):
        mem.update_in_space("tasks", task["id"], lambda t: {**t, "status": "blocked"})
    for bad in ("", True, 1.5, None):
        with pytest.raises(InvalidPayloadError, match="item id"):
            mem.remove_from_space("notes", bad)  # type: ignore[arg-type]
    assert mem.to_dict() == before
