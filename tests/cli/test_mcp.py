"""``jarvismem mcp`` as a client starts it: over stdio and over loopback HTTP, real Redis."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import jarvismem.integrations
from jarvismem.cli import build_parser, main
from jarvismem.cli.completion import bash_script
from jarvismem.cli.mcp import INSTALL_HINT
from jarvismem.runtime import MemoryRuntime
from tests.cli.conftest import Cli, clean_env
from tests.cli.test_completion import _bash_complete
from tests.conftest import REAL_REDIS_URL, real_redis_available, require_backend


@pytest.fixture
async def real_cli(tmp_path: Path) -> AsyncIterator[Cli]:
    """The CLI against the real Redis server, in a namespace of its own (deleted after)."""
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    namespace = "t" + uuid.uuid4().hex[:12]
    env = clean_env(tmp_path)
    env.update(REDIS_URL=REAL_REDIS_URL, JARVISMEM_NAMESPACE=namespace)
    cli = Cli(env=env, cwd=tmp_path, redis_url=REAL_REDIS_URL, namespace=namespace)
    yield cli
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    try:
        assert rt.redis is not None
        keys = [k async for k in rt.redis.scan_iter(match=f"jm:{namespace}:*")]
        if keys:
            await rt.redis.delete(*keys)
    finally:
        await rt.close()


async def _seed(cli: Cli, workflow: str) -> None:
    rt = await MemoryRuntime.from_env(cli.runtime_settings())
    try:
        mem = rt.memory(workflow, "s1", "a1")
        await mem.log_turn(1, "look at the tide", "measure()", "noon")
    finally:
        await rt.close()


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


@pytest.mark.integration
async def test_stdio_serves_every_tool_to_the_sdk_client(real_cli: Cli) -> None:
    mcp = pytest.importorskip("mcp")
    await _seed(real_cli, "wf-io")
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=real_cli.argv("mcp", "--workflow", "wf-io", "--agent", "a1")[1:],
        env=real_cli.env,
        cwd=str(real_cli.cwd),
    )
    async with mcp.Client(params, read_timeout_seconds=60) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        stored = _data(await client.call_tool("remember", {"content": "tides follow the moon"}))
        found = _data(await client.call_tool("recall", {"query": "moon"}))
        tail = _data(await client.call_tool("tail", {"n": 5}))
        bundle = _data(await client.call_tool("bundle", {"step": "s1"}))
        put = _data(await client.call_tool("spaces_put", {"space": "world", "data": {"a": 1}}))
        spaces = _data(await client.call_tool("spaces_get", {}))
        bad = await client.call_tool("tail", {"n": 0})
    assert names == {"remember", "recall", "bundle", "tail", "spaces_get", "spaces_put"}
    assert [r["entry"]["id"] for r in found["results"]] == [stored["entry"]["id"]]
    assert [e["result"] for e in tail["entries"]] == ["noon"]
    assert [e["result"] for e in bundle["recent_turns"]] == ["noon"]
    assert put["rev"] == 1 and spaces["spaces"]["world"]["data"] == {"a": 1}
    assert bad.is_error


def _start_http(cli: Cli, *args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """``jarvismem mcp --transport http --port 0 --json``; the process and what it printed."""
    proc = subprocess.Popen(
        cli.argv("mcp", "--transport", "http", "--port", "0", "--json", *args),
        env=cli.env,
        cwd=cli.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # One JSON document (indented): read lines until it parses.
    text = ""
    while True:
        line = proc.stdout.readline()
        if not line:
            proc.wait(30)
            raise AssertionError(f"the server printed no address: {proc.stderr.read()}")  # type: ignore[union-attr]
        text += line
        try:
            return proc, json.loads(text)
        except ValueError:
            continue


@pytest.mark.integration
async def test_http_read_only_serves_reads_and_refuses_writes(real_cli: Cli) -> None:
    mcp = pytest.importorskip("mcp")
    await _seed(real_cli, "wf-http")
    proc, info = await asyncio.to_thread(
        _start_http,
        real_cli,
        "--workflow",
        "wf-http",
        "--agent",
        "a1",
        "--read-only",
        "--recall-scope",
        "agent",
    )
    try:
        assert info["url"].startswith("http://127.0.0.1:") and info["url"].endswith("/mcp")
        assert info["recall_scope"] == "agent"
        assert (info["workflow_id"], info["agent_id"], info["read_only"]) == ("wf-http", "a1", True)
        assert info["namespace"] == real_cli.namespace
        assert info["tools"] == ["recall", "bundle", "tail", "spaces_get"]
        async with mcp.Client(info["url"]) as client:
            tail = _data(await client.call_tool("tail", {}))
            refused = await client.call_tool("remember", {"content": "not stored"})
        assert [e["thought"] for e in tail["entries"]] == ["look at the tide"]
        assert refused.is_error and refused.content[0].text == "Unknown tool: remember"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    # Ctrl-C is how a server is stopped: a clean exit, and nothing more on stdout.
    assert proc.returncode == 0, err
    assert out == ""


@pytest.mark.integration
async def test_sigterm_stops_the_http_server_cleanly(real_cli: Cli) -> None:
    proc, info = await asyncio.to_thread(_start_http, real_cli, "--workflow", "w", "--agent", "a")
    assert info["transport"] == "http"
    proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0


@pytest.mark.integration
def test_stdio_prints_nothing_on_stdout_and_ends_with_its_input(real_cli: Cli) -> None:
    # stdout is the protocol channel: a client that sends nothing gets nothing.
    proc = subprocess.run(
        real_cli.argv("mcp", "--workflow", "w", "--agent", "a", "--json"),
        env=real_cli.env,
        cwd=real_cli.cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


# --- start-up errors: one line, exit 2 (in-process: nothing is served) --------------------------


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["--env-file", os.devnull, "mcp", *args])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_missing_extra_is_a_one_line_install_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the mcp extra were not installed: the SDK cannot be imported, and the
    # server module (even if another test imported it) is imported afresh.
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] or ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "jarvismem.integrations.mcp", raising=False)
    monkeypatch.delattr(jarvismem.integrations, "mcp", raising=False)
    code, line = _main(capsys, "--workflow", "w", "--agent", "a")
    assert (code, line) == (2, f"jarvismem: error: {INSTALL_HINT}")
    assert "pip install 'jarvismem[mcp]'" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--workflow", "a/b", "--agent", "a"),
            "jarvismem: error: workflow_id 'a/b' is not allowed",
        ),
        (("--workflow", "w", "--agent", ".a"), "jarvismem: error: agent_id '.a' is not allowed"),
        (("--workflow", "w", "--agent", "a", "--step", ""), "jarvismem: error: step_id must not"),
        (
            ("--workflow", "w", "--agent", "a", "--port", "70000"),
            "jarvismem mcp: error: argument --port: expected a port number from 0 to 65535",
        ),
        (
            ("--workflow", "w", "--agent", "a", "--transport", "sse"),
            "jarvismem mcp: error: argument --transport: invalid choice: 'sse'",
        ),
    ],
)
def test_bad_start_up_arguments_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], expected: str
) -> None:
    code, line = _main(capsys, *args)
    assert code == 2
    assert line.startswith(expected)


def test_completion_knows_the_command_and_its_choices() -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = bash_script(build_parser())
    assert _bash_complete(script, "jarvismem", "mc") == ["mcp"]
    assert _bash_complete(script, "jarvismem", "mcp", "--tr") == ["--transport"]
    assert _bash_complete(script, "jarvismem", "mcp", "--transport", "") == ["stdio", "http"]
    assert _bash_complete(script, "jarvismem", "mcp", "--read") == ["--read-only"]
