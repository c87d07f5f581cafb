"""TierStatus: one place for the counters and the last error of an Athena tier."""

from __future__ import annotations

from jarvismem.errors import AthenaServerError
from jarvismem.tiers.athena.status import TierStatus, describe_error


def test_describe_error_names_the_class_and_is_bounded() -> None:
    assert describe_error(AthenaServerError("HTTP 500")) == "AthenaServerError: HTTP 500"
    assert len(describe_error(ValueError("x" * 1000))) == 300


def test_note_keeps_the_last_error() -> None:
    status = TierStatus()
    assert status.last_error is None
    assert status.note(KeyError("a")) == "KeyError: 'a'"
    status.note_text("OSError(ENOSPC): " + "y" * 500)
    assert status.last_error is not None and status.last_error.startswith("OSError(ENOSPC)")
    assert len(status.last_error) == 300


def test_counters_start_at_zero_and_sets_are_per_status() -> None:
    one, two = TierStatus(), TierStatus()
    one.unsupported.add("search")
    assert two.unsupported == set()
    assert (one.rejected, one.misdirected, one.duplicates_skipped) == (0, 0, 0)
