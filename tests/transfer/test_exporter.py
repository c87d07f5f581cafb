"""Export: header first, every tier's records, ledger oldest first with its ids."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jarvismem.errors import BackendUnavailableError, InvalidIdError
from jarvismem.runtime import MemoryRuntime
from jarvismem.transfer import export_workflow, parse_header, parse_record
from tests.transfer.conftest import STEPS, TURNS, MakeRuntime, populate


async def _lines(rt: MemoryRuntime, wf: str, **kw: Any) -> list[str]:
    return [line async for line in export_workflow(rt, wf, **kw)]


async def test_every_tier_is_exported_and_every_line_validates(
    make_store_runtime: MakeRuntime,
) -> None:
    rt = make_store_runtime()
    await populate(rt, "wf1")
    progress: list[tuple[int, int]] = []
    lines = await _lines(rt, "wf1", progress=lambda d, t: progress.append((d, t)))
    header = parse_header(lines[0])
    assert (header.workflow_id, header.namespace) == ("wf1", rt.keyspace.namespace)
    records = [parse_record(line, n) for n, line in enumerate(lines[1:], start=2)]
    by_kind: dict[str, list[Any]] = {}
    for rec in records:
        by_kind.setdefault(rec.kind, []).append(rec)
    assert len(by_kind["ledger"]) == len(STEPS) * TURNS
    assert progress[-1] == (len(STEPS) * TURNS,) * 2
    ids = [rec.id for rec in by_kind["ledger"]]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    assert {(r.step_id, r.rev) for r in by_kind["checkpoint"]} == {("s1", 2), ("s2", 2)}
    assert {r.agent_id for r in by_kind["spaces"]} == {a for _, a in STEPS}
    assert [r.record["data"] for r in by_kind["goals"]] == ["finding of s1", "finding of s2"]
    assert len(by_kind["summary"]) == 1 and by_kind["summary"][0].text
    # Lines are single-line JSON, so the file is valid JSON lines.
    assert all("\n" not in line and json.loads(line) for line in lines)


async def test_an_empty_workflow_exports_its_header_alone(make_store_runtime: MakeRuntime) -> None:
    lines = await _lines(make_store_runtime(), "nothing-here")
    assert len(lines) == 1 and parse_header(lines[0]).workflow_id == "nothing-here"


async def test_a_bad_workflow_id_is_refused(make_store_runtime: MakeRuntime) -> None:
    with pytest.raises(InvalidIdError):
        await _lines(make_store_runtime(), "../etc")


async def test_an_export_with_redis_down_raises_a_jarvismem_error(
    unreachable_redis: Any, make_runtime: Any
) -> None:
    # The key listing (SCAN) is a Redis call like any other: translated, never raw redis-py.
    rt = make_runtime(redis=unreachable_redis)
    with pytest.raises(BackendUnavailableError):
        await _lines(rt, "wf-1")
