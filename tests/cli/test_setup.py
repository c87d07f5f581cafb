"""``jarvismem init``: the .env it writes and what it refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from jarvismem.cli.setup import next_steps, render_env
from tests.cli.conftest import Cli

AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
)


def _piped(cli: Cli, answers: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``jarvismem init ARGS`` with ``answers`` on stdin (not a terminal)."""
    return subprocess.run(
        cli.argv("init", *args),
        input=answers,
        env=cli.env,
        cwd=cli.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_piped_answers_are_read_one_per_prompt_with_prompts_on_stderr(
    cli: Cli, tmp_path: Path
) -> None:
    target = tmp_path / "piped.env"
    proc = _piped(
        cli, "redis://127.0.0.1:6379/4\nlocal\n/data/blobs\n\n\n", "--output", str(target)
    )
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert "REDIS_URL=redis://127.0.0.1:6379/4" in text.splitlines()
    assert "STORAGE_BASE_PATH=/data/blobs" in text.splitlines()
    assert "Redis URL" in proc.stderr and "Redis URL" not in proc.stdout
    assert "LLM model" not in proc.stderr  # no LLM URL given: its model is not asked


def test_azure_asks_for_a_connection_string_not_a_folder(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "azure.env"
    proc = _piped(cli, f"redis://127.0.0.1:6380/0\nazure\n{AZURITE}\n\n\n", "--output", str(target))
    assert proc.returncode == 0, proc.stderr
    assert "Local blob folder" not in proc.stderr
    lines = target.read_text().splitlines()
    assert "STORAGE_BACKEND=azure" in lines and not any(
        line.startswith("STORAGE_BASE_PATH") for line in lines
    )
    assert "docker compose up -d redis azurite" in proc.stdout


def test_an_empty_connection_string_is_refused_at_its_prompt(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "x.env"
    proc = _piped(cli, "\nazure\n\nhttp://athena:8080\n\n", "--output", str(target))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(
        "jarvismem: error: STORAGE_BACKEND=azure needs an Azure Blob connection string"
    )
    assert "Athena URL" not in proc.stderr  # it failed there, not after every prompt
    assert not target.exists()
    flags = cli.run(
        "init", "--non-interactive", "--storage-backend", "azure", "--output", str(target)
    )
    assert flags.returncode == 2 and "needs an Azure Blob connection string" in flags.stderr


def test_stdin_ending_early_is_an_error_not_silent_defaults(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "short.env"
    proc = _piped(cli, "redis://127.0.0.1:6379/0\n", "--output", str(target))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "jarvismem: error: stdin ended before an answer to 'Blob storage backend: local | azure "
        "| none': pipe one line per prompt, or pass flags with --non-interactive"
    )
    assert not target.exists()


def test_next_steps_follow_the_choices(cli: Cli, tmp_path: Path) -> None:
    proc = cli.run("init", "--non-interactive", "--json", "--output", str(tmp_path / ".env"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # No Redis URL, local blobs: nothing for docker compose to start; the omission is said.
    assert not any("docker" in step for step in data["next_steps"])
    assert any("REDIS_URL is not set" in note for note in data["notes"])
    remote, _ = next_steps({"REDIS_URL": "redis://db.example:6379/0"}, ".env")
    assert remote == ["jarvismem status", "jarvismem demo"]


def test_init_writes_env_and_never_overwrites_without_force(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "conf" / ".env"
    args = (
        "init",
        "--non-interactive",
        "--output",
        str(target),
        "--redis-url",
        "redis://:initsecret@127.0.0.1:6380/0",
        "--athena-url",
        "http://127.0.0.1:8080",
    )
    proc = cli.run(*args)
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert "REDIS_URL=redis://:initsecret@127.0.0.1:6380/0" in text
    assert "ATHENA_URL=http://127.0.0.1:8080" in text and "STORAGE_BACKEND=local" in text
    assert "initsecret" not in proc.stdout + proc.stderr
    assert "docker compose up -d redis" in proc.stdout and "--profile athena" in proc.stdout
    # Not ./.env: every suggested jarvismem command reads the file written.
    assert f"jarvismem --env-file {target} status" in proc.stdout
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
