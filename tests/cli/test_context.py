"""What every command gets: settings from --env-file/flags and runtimes built by from_env."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from jarvismem.cli._context import CliContext, resolve_env_file
from jarvismem.cli._output import Output
from jarvismem.errors import BackendUnavailableError, ConfigError
from tests.harness.redis_server import free_port


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A CliContext factory on an isolated store whose Redis does not answer."""
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("REDIS_CONNECT_RETRIES", "0")
    monkeypatch.setenv("STORAGE_BACKEND", "local")
    monkeypatch.setenv("STORAGE_BASE_PATH", str(tmp_path / "blobs"))
    monkeypatch.setenv("OUTBOX_PATH", str(tmp_path / "outbox"))
    monkeypatch.delenv("ATHENA_URL", raising=False)
    monkeypatch.delenv("JARVISMEM_NAMESPACE", raising=False)

    def make(**args: Any) -> CliContext:
        return CliContext(argparse.Namespace(**args), Output(False), None)

    return make


def test_resolve_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_env_file(None) is None  # no .env here: fine
    (tmp_path / ".env").write_text("")
    assert resolve_env_file(None) == Path(".env")
    assert resolve_env_file(os.devnull) is None
    assert resolve_env_file(".env") == Path(".env")
    with pytest.raises(ConfigError, match=r"^--env-file nope.env: no such file$"):
        resolve_env_file("nope.env")


def test_namespace_flag_overrides_the_environment(context: Any) -> None:
    assert context(namespace="flagged").settings().jarvismem_namespace == "flagged"
    assert context().settings(jarvismem_namespace="given").jarvismem_namespace == "given"


async def test_runtime_needs_redis(context: Any) -> None:
    with pytest.raises(BackendUnavailableError, match="did not answer"):
        async with context().runtime():
            pass


async def test_probe_runtime_starts_degraded_without_a_warning(
    context: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with context().probe_runtime() as rt:
        health = await rt.health()
    assert health["backends"]["redis"]["reachable"] is False
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_probe_runtime_keeps_the_warning_under_v(
    context: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with context(verbose=1).probe_runtime():
        pass
    assert any("starting degraded" in r.getMessage() for r in caplog.records)
