"""Every example runs as a subprocess against the backend it documents, so none can rot."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import redis as sync_redis

from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.testing.fake_llm import FakeLLMServer
from tests.conftest import env_without_settings, require_backend
from tests.harness.redis_server import RedisServerProcess, free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = env_without_settings()
    clean.update(env)
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=clean,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_quickstart_runs_with_nothing_configured(tmp_path: Path, embedded_folder: Path) -> None:
    # REDIS_URL unset: the embedded server in tmp_path/.jarvismem/redis (killed afterwards).
    proc = _run("quickstart.py", tmp_path, REDIS_URL="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "recent turns: ['1', '2', '3']",
        'checkpoint: {"next_turn": 4}',
        "## Goal findings",
    ]
    assert "WARNING" not in proc.stderr and "ephemeral" not in proc.stderr
    assert (tmp_path / ".jarvismem" / "blobs").is_dir()
    assert (tmp_path / ".jarvismem" / "redis" / "redis.sock").is_socket()


def test_quickstart_with_redis_down_runs_and_loses_nothing_once_redis_is_back(
    tmp_path: Path,
) -> None:
    """The README's kernel loop, started while Redis is down (it used to crash at start-up)."""
    require_backend(shutil.which("redis-server") is not None, "redis-server binary")
    port = free_port()
    env = {
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "STORAGE_BASE_PATH": str(tmp_path / "blobs"),
        "OUTBOX_PATH": str(tmp_path / "outbox"),
    }
    down = _run("quickstart.py", tmp_path, **env)
    assert down.returncode == 0, down.stderr
    expected = [
        "recent turns: ['1', '2', '3']",  # served from the local outbox while Redis is down
        'checkpoint: {"next_turn": 4}',
        "## Goal findings",
    ]
    assert down.stdout.splitlines() == expected
    assert "starting degraded" in down.stderr and "Traceback" not in down.stderr
    server = RedisServerProcess(tmp_path / "redis", port=port, persistence=False)
    server.start()
    try:
        up = _run("quickstart.py", tmp_path, **env)  # replays, then resumes at turn 4
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines() == expected
        ledgers = [k for k in sync_redis.Redis(port=server.port).keys("jm:*:ledger")]
        assert len(ledgers) == 1
        assert sync_redis.Redis(port=server.port).xlen(ledgers[0]) == 3
    finally:
        server.kill()


def test_crash_recovery_kills_resumes_and_verifies(tmp_path: Path, embedded_folder: Path) -> None:
    proc = _run("crash_recovery.py", tmp_path, REDIS_URL="")
    assert proc.returncode == 0, proc.stderr
    assert "with SIGKILL in turn 7" in proc.stdout
    assert "resumed at turn 7, re-ran [7]" in proc.stdout
    assert proc.stdout.rstrip().endswith("verified")


def test_azure_blob_example_on_azurite(tmp_path: Path, azurite_connection_string: str) -> None:
    container = "ex" + uuid.uuid4().hex[:16]
    proc = _run(
        "azure_blob.py",
        tmp_path,
        STORAGE_BACKEND="azure",
        AZURE_STORAGE_CONNECTION_STRING=azurite_connection_string,
        AZURE_STORAGE_CONTAINER=container,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "scratchpad blob: workflows/azure-example/scratchpads/plan/planner.jsonl" in out
    assert "- **finding:** goal findings are carried to later steps" in out
    assert "- **Result:** in Azure Blob" in out
    assert "blob backend: azure reachable=True" in out
    assert "AccountKey" not in out + proc.stderr


def test_athena_example_against_the_fake_server(
    tmp_path: Path, athena_server: FakeAthenaServer
) -> None:
    proc = _run("athena_usage.py", tmp_path, ATHENA_URL=athena_server.url)
    assert proc.returncode == 0, proc.stderr
    events = athena_server.events
    out = proc.stdout
    assert "[thought] the tide tables cover twelve harbours" in out
    assert "[observation] high tide at Brest is 6.1 m" in out
    assert "search hits:" in out
    assert len(events) >= 4  # the server really received the writes


def test_llm_kernel_falls_back_to_a_scripted_agent(tmp_path: Path) -> None:
    proc = _run("llm_kernel.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "agent: scripted (no LLM_BASE_URL)"
    assert lines[1] == (
        "turn 1: What causes the tides? -> (scripted) I would look up: what causes the tides."
    )
    assert lines[-1] == "ledger holds 3 turn(s)"


def test_llm_kernel_calls_the_configured_llm(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    # The in-repo fake speaks the OpenAI wire format over real HTTP and answers
    # "SUMMARY: " + the first lines of the last user message.
    proc = _run("llm_kernel.py", tmp_path, LLM_BASE_URL=fake_llm.url, LLM_API_KEY="sk-example-key")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "agent: llm gpt-4o-mini"
    assert lines[1].startswith("turn 1: What causes the tides? -> SUMMARY: ")
    assert lines[-1] == "ledger holds 3 turn(s)"
    chats = [r for r in fake_llm.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 3
    first, last = chats[0].json, chats[-1].json
    assert first is not None and last is not None
    assert first["model"] == "gpt-4o-mini"
    assert chats[0].headers["authorization"] == "Bearer sk-example-key"
    assert "research agent studying tides" in first["messages"][0]["content"]
    assert first["messages"][-1] == {"role": "user", "content": "What causes the tides?"}
    # Memory went into the prompt: the last turn's messages carry the earlier turns.
    prompt = " ".join(m["content"] for m in last["messages"])
    assert "What causes the tides?" in prompt and "Why are there two high tides" in prompt
