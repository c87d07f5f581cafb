"""``jarvismem init``: the .env it writes and what it refuses."""

from __future__ import annotations

from pathlib import Path

from jarvismem.cli.setup import render_env
from tests.cli.conftest import Cli


def test_init_writes_env_and_never_overwrites_without_force(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "conf" / ".env"
    args = (
        "init",
        "--non-interactive",
        "--output",
        str(target),
        "--redis-url",
        "redis://:initsecret@127.0.0.1:6379/0",
        "--athena-url",
        "http://127.0.0.1:8080",
    )
    proc = cli.run(*args)
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert "REDIS_URL=redis://:initsecret@127.0.0.1:6379/0" in text
    assert "ATHENA_URL=http://127.0.0.1:8080" in text and "STORAGE_BACKEND=local" in text
    assert "initsecret" not in proc.stdout + proc.stderr
    assert "docker compose up -d" in proc.stdout and "--profile athena" in proc.stdout
    assert target.stat().st_mode & 0o077 == 0
    again = cli.run(*args)
    assert again.returncode == 2 and "already exists; pass --force" in again.stderr
    assert cli.run(*args, "--force").returncode == 0


def test_init_refuses_an_invalid_value_before_writing(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / ".env"
    proc = cli.run("init", "--non-interactive", "--output", str(target), "--redis-url", "http://x")
    assert proc.returncode == 2 and "REDIS_URL" in proc.stderr
    assert not target.exists()


def test_render_env_quotes_what_dotenv_would_misread_and_leaves_out_empty_values() -> None:
    text = render_env(
        {"REDIS_URL": "redis://h:6379/0", "LLM_MODEL": "my model #2", "ATHENA_URL": ""}
    )
    lines = text.splitlines()
    assert "REDIS_URL=redis://h:6379/0" in lines
    assert "LLM_MODEL='my model #2'" in lines
    assert not any(line.startswith("ATHENA_URL") for line in lines)
    assert text.endswith("\n") and lines[0].startswith("# jarvismem settings")
