"""The CLI's argument types: what they accept and the message for what they refuse."""

from __future__ import annotations

import argparse

import pytest

from jarvismem.cli._args import count, positive, seconds
from tests.cli.conftest import Cli


def test_count_accepts_zero_and_up() -> None:
    assert count("0") == 0 and count("12") == 12
    with pytest.raises(argparse.ArgumentTypeError, match=r"whole number >= 0, got '-1'"):
        count("-1")


def test_positive_refuses_zero() -> None:
    assert positive("1") == 1
    for bad in ("0", "-3", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"whole number >= 1, got '{bad}'"):
            positive(bad)


def test_seconds_refuses_negative_infinite_and_nan() -> None:
    assert seconds("0.5") == 0.5
    for bad in ("-1", "inf", "nan", "soon"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected seconds"):
            seconds(bad)


@pytest.mark.parametrize("command", [("context",), ("search", "--query", "q")])
def test_athena_limits_below_one_are_refused_in_one_line(
    cli: Cli, command: tuple[str, ...]
) -> None:
    proc = cli.run(*command, "--agent", "a1", "--limit", "-1")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("argument --limit: expected a whole number >= 1, got '-1'")
    )
