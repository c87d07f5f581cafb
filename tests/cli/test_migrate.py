"""``jarvismem migrate --from-jarviscore`` through the real entry point.

The JarvisCore data is written in the reference's formats straight into the
loopback server (its keys are not namespaced, so every test uses its own
workflow id); the migration of data written by the real reference package is
tested in ``tests/transfer/test_jarviscore.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Cli


@pytest.fixture
def jarviscore(cli: Cli, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A JarvisCore workflow in the loopback Redis and a blob folder: ``(workflow id, folder)``."""
    import redis

    wf = "wf-" + uuid.uuid4().hex[:8]
    folder = tmp_path / "jarviscore-blobs"
    pad = folder / "workflows" / wf / "scratchpads" / "step_1_researcher.md"
    pad.parent.mkdir(parents=True)
    turn = {"turn_id": "t1", "ts": 1700000000.5, "thought": "42", "action": "a", "result": "r",
            "tokens": 3}  # fmt: skip
    pad.write_text(
        json.dumps({"type": "turn", "scope": "step", **turn})
        + "\n"
        + json.dumps({"type": "finding", "scope": "goal", "content": "the answer"}),
        encoding="utf-8",
    )
    client: Any = redis.Redis.from_url(cli.redis_url)
    fields = {k: v if isinstance(v, str) else json.dumps(v) for k, v in turn.items()}
    client.xadd(f"ledgers:{wf}", fields, id="1700000000500-0")
    client.set(f"checkpoint:{wf}:step_1", '{"next": 2}')
    client.set(f"ltm:{wf}", "so far")
    yield wf, folder
    client.delete(f"ledgers:{wf}", f"checkpoint:{wf}:step_1", f"ltm:{wf}")
    client.close()


def _migrate(cli: Cli, folder: Path, *args: str) -> Any:
    return cli.run("migrate", "--from-jarviscore", "--source-blob", str(folder), *args)


def test_dry_run_then_migrate_then_again_changes_nothing(
    cli: Cli, jarviscore: tuple[str, Path]
) -> None:
    wf, folder = jarviscore
    dry = _migrate(cli, folder, "--workflow", wf, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert report["workflows"][0]["status"] == "would import"
    assert report["workflows"][0]["counts"] == {
        "checkpoint": 1, "goals": 1, "ledger": 1, "scratchpad": 2, "summary": 1}  # fmt: skip
    tail = cli.run("tail", "--workflow", wf, "--json")
    # The dry run wrote nothing: the workflow does not exist yet.
    assert tail.returncode == 1 and json.loads(tail.stdout)["error"] == "workflow_not_found"

    done = _migrate(cli, folder, "--workflow", wf)
    assert done.returncode == 0, done.stderr
    assert f"  {wf}: imported (1 checkpoint, 1 goals, 1 ledger, 2 scratchpad, 1 summary)" in (
        done.stdout
    )
    assert f"reading {wf}: 1/1 (100%)" in done.stderr
    assert f"writing {wf}: 6/6 (100%)" in done.stderr
    tail = cli.run("tail", "--workflow", wf, "--json")
    [entry] = json.loads(tail.stdout)
    assert (entry["id"], entry["thought"], entry["step_id"]) == ("1700000000500-0", "42", "step_1")

    again = _migrate(cli, folder, "--all", "--json")
    assert again.returncode == 0, again.stderr
    statuses = {w["workflow_id"]: w["status"] for w in json.loads(again.stdout)["workflows"]}
    assert statuses[wf] == "unchanged"


def test_a_workflow_that_is_not_there_is_one_error_line(
    cli: Cli, jarviscore: tuple[str, Path]
) -> None:
    _, folder = jarviscore
    proc = _migrate(cli, folder, "--workflow", "wf-missing")
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("jarvismem: error: JarvisCore workflow wf-missing: nothing found in redis://")
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workflow", "../etc"), "workflow_id '../etc' is not allowed"),
        (("--workflow", "wf", "--source-redis-url", "http://x"), "must start with redis://"),
        ((), "one of the arguments --workflow --all is required"),
        (("--workflow", "a", "--all"), "not allowed with argument"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    cli: Cli, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    proc = _migrate(cli, tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_blob_folder_exits_2(cli: Cli, tmp_path: Path) -> None:
    proc = _migrate(cli, tmp_path / "nope", "--all")
    assert proc.returncode == 2
    assert f"--source-blob {tmp_path / 'nope'}: no such folder" in proc.stderr


def test_without_from_jarviscore_the_source_kind_is_required(cli: Cli) -> None:
    proc = cli.run("migrate", "--all")
    assert proc.returncode == 2
    assert "--from-jarviscore" in proc.stderr
