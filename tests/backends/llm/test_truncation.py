"""truncate(): the bound every summary obeys, and its visible marker."""

from __future__ import annotations

import pytest

from jarvismem.backends.llm.truncation import TRUNCATION_MARKER, truncate


def test_text_that_fits_is_unchanged() -> None:
    assert truncate("abc", 10) == "abc"
    assert truncate("a" * 10, 10) == "a" * 10


def test_truncate_marks_the_cut() -> None:
    cut = truncate("a" * 100, 40)
    assert len(cut) == 40
    assert cut.endswith(TRUNCATION_MARKER)
    assert cut.startswith("a" * (40 - len(TRUNCATION_MARKER)))


def test_trailing_spaces_before_the_marker_are_dropped() -> None:
    # The head is "word " (five characters): the space is not kept before the marker.
    cut = truncate("word " * 20, len(TRUNCATION_MARKER) + 5)
    assert cut == "word" + TRUNCATION_MARKER


def test_a_budget_smaller_than_the_marker_gets_a_bare_head() -> None:
    assert truncate("abcdefghijklmnopqrstuvwxyz", 5) == "abcde"


@pytest.mark.parametrize("max_chars", [0, -3])
def test_no_budget_gives_nothing(max_chars: int) -> None:
    assert truncate("abc", max_chars) == ""


@pytest.mark.parametrize("max_chars", [1, 5, len(TRUNCATION_MARKER), 30, 99, 100, 101])
def test_never_longer_than_max_chars(max_chars: int) -> None:
    assert len(truncate("x" * 100, max_chars)) <= max_chars
