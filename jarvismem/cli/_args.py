"""Argument types shared by the commands: numbers checked with messages of their own.

argparse names the type function in its default message ("invalid _positive
value: 'abc'"), which tells a user nothing; these raise ``ArgumentTypeError``
with what was expected instead.
"""

from __future__ import annotations

import argparse

__all__ = ["count", "positive", "seconds"]


def _whole(value: str, least: int) -> int:
    expected = f"expected a whole number >= {least}, got {value!r}"
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(expected) from None
    if number < least:
        raise argparse.ArgumentTypeError(expected)
    return number


def count(value: str) -> int:
    """A count given on the command line: a whole number >= 0."""
    return _whole(value, 0)


def positive(value: str) -> int:
    """A limit given on the command line: a whole number >= 1."""
    return _whole(value, 1)


def seconds(value: str) -> float:
    """A duration in seconds given on the command line: a finite number >= 0."""
    expected = f"expected seconds (a number >= 0), got {value!r}"
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(expected) from None
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(expected)
    return number


def port(value: str) -> int:
    """A TCP port given on the command line: 0 (any free one) to 65535."""
    expected = f"expected a port number from 0 to 65535, got {value!r}"
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(expected) from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(expected)
    return number
