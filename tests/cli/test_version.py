"""``jarvismem --version`` answers before the commands load, exactly when the full parser would.

The start-up cost itself is checked in fresh interpreters by tests/test_jarvismem.py.
"""

from __future__ import annotations

import pytest

from jarvismem import __version__
from jarvismem.cli import _asks_for_version, _unknown_option, build_parser, main

ARGVS = [
    ["--version"],
    ["--vers"],
    ["--ver"],  # ambiguous: --verbose or --version
    ["--json", "--version"],
    ["-vv", "--version"],
    ["--env-file", "x", "--version"],
    ["--env-file=x", "--version"],
    ["--env-file", "--version"],  # --version taken as the missing value
    ["--version", "status"],
    ["status", "--version"],
    ["-h", "--version"],
    ["--bogus", "--version"],
    ["--version=1"],
    [],
    ["status"],
]


def _full_parser_prints_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    parser = build_parser()
    try:
        _unknown_option(argv, parser)
        parser.parse_args(argv)
    except SystemExit:
        captured = capsys.readouterr()
        return captured.out.strip() == f"jarvismem {__version__}"
    return False


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_the_version_probe_agrees_with_the_full_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _asks_for_version(argv) is _full_parser_prints_version(argv, capsys)


def test_version_prints_the_version_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "--version"]) == 0
    assert capsys.readouterr().out == f"jarvismem {__version__}\n"
