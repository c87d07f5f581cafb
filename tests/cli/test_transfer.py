"""``jarvismem export`` and ``jarvismem import`` through the real entry point."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from jarvismem.cli import main as cli_main
from jarvismem.cli import transfer as transfer_cmds
from jarvismem.runtime import MemoryRuntime
from jarvismem.transfer.format import TransferError
from tests.cli.conftest import Cli, seed_turns


async def test_export_then_import_into_a_fresh_namespace(cli: Cli, tmp_path: Path) -> None:
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    async with rt:
        await seed_turns(rt, "wf-x", range(1, 6))
        await rt.memory("wf-x", "s1", "a1").save_checkpoint("state-5")
    export = await cli.arun("export", "--workflow", "wf-x", "-o", str(tmp_path / "wf.jsonl"))
    assert export.returncode == 0, export.stderr
    lines = (tmp_path / "wf.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "jarvismem-export" and header["workflow_id"] == "wf-x"
    kinds = [json.loads(line)["kind"] for line in lines[1:]]
    assert kinds.count("ledger") == 5 and "checkpoint" in kinds and "scratchpad" in kinds
    fresh = dict(cli.env, JARVISMEM_NAMESPACE="t" + uuid.uuid4().hex[:12])
    imported = cli.run("import", str(tmp_path / "wf.jsonl"), "--json", env=fresh)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["counts"]["ledger"] == 5
    tail = cli.run("tail", "--workflow", "wf-x", "--json", env=fresh)
    assert [e["turn_id"] for e in json.loads(tail.stdout)] == ["1", "2", "3", "4", "5"]
    refused = cli.run("import", str(tmp_path / "wf.jsonl"), env=fresh)
    assert refused.returncode == 1
    assert "already holds data; pass --force" in refused.stderr
    forced = cli.run("import", str(tmp_path / "wf.jsonl"), "--force", env=fresh)
    assert forced.returncode == 0, forced.stderr
    assert (
        forced.stderr.splitlines()[-1]
        == f"importing wf.jsonl: {len(lines) - 1}/{len(lines) - 1} (100%)"
    )


async def test_export_to_stdout_pipes_clean_jsonl(cli: Cli) -> None:
    # A workflow that holds one checkpoint: the header, then that one record.
    async with await MemoryRuntime.from_env(cli.runtime_settings()) as rt:
        await rt.memory("wf-empty", "s1", "a1").save_checkpoint("{}")
    proc = await cli.arun("export", "--workflow", "wf-empty")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["version"] == 1
    assert json.loads(lines[1])["kind"] == "checkpoint"
    assert "exported 1 record(s)" in proc.stderr


def test_import_of_a_bad_file_names_the_line(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"format": "jarvismem-export", "version": 1, "workflow_id": "w", '
        '"namespace": "n"}\n{"kind": "ledger", "id": "1-0", "fields": {"a": 1}}\n'
        '{"kind": "mystery"}\n'
    )
    proc = cli.run("import", str(bad))
    assert proc.returncode == 1
    assert proc.stderr.startswith("jarvismem: error: line 3:")
    assert "Traceback" not in proc.stderr
    tail = cli.run("tail", "--workflow", "w")
    # The valid line 2 was not written either: the workflow holds nothing at all.
    assert tail.returncode == 1 and "no workflow 'w'" in tail.stderr


def test_import_of_out_of_order_ids_writes_nothing_and_a_fixed_file_imports(
    cli: Cli, tmp_path: Path
) -> None:
    # Regression: the checkpoint was written, the ledger refused
    # by Redis, and the retry answered "already holds data".
    header = '{"format": "jarvismem-export", "version": 1, "workflow_id": "wo", "namespace": "n"}'
    ckpt = '{"kind": "checkpoint", "step_id": "s1", "state": "x", "rev": 2}'
    turn = '"fields": {"step_id": "s1", "agent_id": "a1", "turn_id": %d, "thought": "t"}'
    first = '{"kind": "ledger", "id": "9-0", ' + turn % 1 + "}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "\n".join([header, ckpt, first, '{"kind": "ledger", "id": "3-0", ' + turn % 2 + "}"])
    )
    proc = cli.run("import", str(bad))
    assert proc.returncode == 1
    assert proc.stderr.startswith("jarvismem: error: line 4: ledger id 3-0 is not above 9-0")
    good = tmp_path / "good.jsonl"
    good.write_text(bad.read_text().replace('"id": "3-0"', '"id": "10-0"'))
    proc = cli.run("import", str(good), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["counts"] == {"checkpoint": 1, "ledger": 2}


def test_an_import_failing_after_its_last_record_never_shows_100_percent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async def staged_then_refused(rt: Any, path: Path, **kwargs: Any) -> dict[str, Any]:
        kwargs["progress"](24, 24)  # every record staged ...
        raise TransferError("workflow w received data while it was being imported")

    monkeypatch.setattr(transfer_cmds, "import_workflow", staged_then_refused)
    export = tmp_path / "w.jsonl"
    export.write_text("{}\n")
    env = ("--env-file", os.devnull)
    assert cli_main([*env, "import", str(export)]) == 1
    err = capsys.readouterr().err
    assert "100%" not in err and err.splitlines()[-1].startswith("jarvismem: error: workflow w")
