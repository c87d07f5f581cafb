"""What the conformance suites share: pytest marks, unique names, a pytest-free ``raises``,
the runner."""

from __future__ import annotations

import importlib
import inspect
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _pytest_marks() -> list[Any]:
    """The marks that let pytest-asyncio run the checks in strict mode too.

    pytest is optional for the harness (``run_checks`` needs none of it), so it
    is looked up by name rather than imported: without it there are no marks.
    """
    try:
        pytest = importlib.import_module("pytest")
    except ImportError:  # pragma: no cover - pytest absent
        return []
    return [pytest.mark.asyncio]


PYTEST_MARKS: list[Any] = _pytest_marks()


def unique_name() -> str:
    """A name no other check or run uses (``conf-`` and 12 hex digits).

    The suites run against shared, long-lived servers: a check keeps to its
    own blobs and agents instead of cleaning up after others.
    """
    return "conf-" + uuid.uuid4().hex[:12]


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
