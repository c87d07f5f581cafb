"""What the conformance suites share: pytest marks, a pytest-free ``raises``, the runner."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:  # mark the checks for pytest-asyncio in strict mode too; pytest stays optional
    import pytest

    PYTEST_MARKS: list[Any] = [pytest.mark.asyncio]
except ImportError:  # pragma: no cover - pytest absent
    PYTEST_MARKS = []


@contextmanager
def raises(kind: type[BaseException], what: str) -> Iterator[None]:
    """Like ``pytest.raises`` without needing pytest."""
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")


async def run_checks(suite: object, subject: object) -> None:
    """Await every ``test_*`` coroutine method of ``suite`` with ``subject``.

    Raises ``AssertionError`` naming the first failing check.
    """
    for name, method in inspect.getmembers(suite, inspect.iscoroutinefunction):
        if not name.startswith("test_"):
            continue
        try:
            await method(subject)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
