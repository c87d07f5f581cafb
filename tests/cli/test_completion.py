"""``jarvismem completion bash|zsh``: scripts generated from the parser, tried in the shell."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from jarvismem.cli import build_parser, command_parsers
from jarvismem.cli.completion import bash_script, zsh_script
from tests.cli.conftest import Cli


def _bash_complete(script: str, *words: str) -> list[str]:
    """What bash offers for the command line ``words`` (the last one being typed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=()\n"
        "_jarvismem\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile"],
        input=program,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash() -> str:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    return bash_script(build_parser())


def test_bash_completes_command_names(bash: str) -> None:
    assert _bash_complete(bash, "jarvismem", "ta") == ["tail"]
    assert set(_bash_complete(bash, "jarvismem", "")) == set(command_parsers(build_parser()))
    assert _bash_complete(bash, "jarvismem", "--json", "com") == ["compact", "completion"]


def test_bash_completes_options_choices_and_values(bash: str) -> None:
    assert _bash_complete(bash, "jarvismem", "tail", "--wo") == ["--workflow"]
    assert _bash_complete(bash, "jarvismem", "--red") == ["--redis-url"]
    assert _bash_complete(bash, "jarvismem", "init", "--storage-backend", "a") == ["azure"]
    assert _bash_complete(bash, "jarvismem", "completion", "") == ["bash", "zsh"]
    # After an option that takes a free value, nothing is offered.
    assert _bash_complete(bash, "jarvismem", "tail", "--workflow", "") == []


def test_the_command_prints_the_script_for_each_shell(cli: Cli) -> None:
    proc = cli.run("completion", "bash")
    assert proc.returncode == 0 and "complete -o default -F _jarvismem jarvismem" in proc.stdout
    zsh = cli.run("completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef jarvismem")
    as_json = json.loads(cli.run("completion", "zsh", "--json").stdout)
    assert as_json["shell"] == "zsh" and as_json["script"] == zsh.stdout.rstrip("\n") + "\n"
    bad = cli.run("completion", "fish")
    assert bad.returncode == 2 and "invalid choice: 'fish'" in bad.stderr


def test_zsh_script_describes_every_command_and_parses() -> None:
    script = zsh_script(build_parser())
    for name in command_parsers(build_parser()):
        assert f"'{name}:" in script
    if shutil.which("zsh") is None:
        return  # syntax checked where zsh is installed
    proc = subprocess.run(["zsh", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
