"""What the conformance suites share: ``raises``, unique names and the check runner."""

from __future__ import annotations

import pytest

from jarvismem.keys import validate_id
from jarvismem.testing._conformance import PYTEST_MARKS, raises, run_checks, unique_name


def test_raises_passes_on_the_expected_error_and_fails_without_one() -> None:
    with raises(KeyError, "lookup"):
        {}["x"]
    with (
        pytest.raises(AssertionError, match="lookup: expected KeyError"),
        raises(KeyError, "lookup"),
    ):
        pass


def test_raises_lets_another_error_through() -> None:
    with pytest.raises(ValueError), raises(KeyError, "lookup"):
        raise ValueError("not a key error")


def test_unique_names_are_fresh_and_valid_ids() -> None:
    names = {unique_name() for _ in range(100)}
    assert len(names) == 100
    for name in names:
        assert name.startswith("conf-") and validate_id(name, "agent_id") == name


class _Suite:
    def __init__(self) -> None:
        self.ran: list[tuple[str, object]] = []

    async def test_one(self, subject: object) -> None:
        self.ran.append(("one", subject))

    async def test_two(self, subject: object) -> None:
        assert subject == "good", "subject is bad"

    async def helper(self, subject: object) -> None:
        raise AssertionError("not a check: never run")


async def test_run_checks_awaits_every_check_and_names_the_failing_one() -> None:
    suite = _Suite()
    await run_checks(suite, "good")
    assert suite.ran == [("one", "good")]
    with pytest.raises(AssertionError, match="test_two: subject is bad"):
        await run_checks(suite, "bad")


def test_the_checks_are_marked_for_pytest_asyncio() -> None:
    assert [mark.name for mark in PYTEST_MARKS] == ["asyncio"]
