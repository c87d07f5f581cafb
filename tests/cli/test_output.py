"""Where command results, errors and progress go."""

from __future__ import annotations

import io
import json

from jarvismem.cli._output import Output, ProgressBar, error_line


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_result_is_json_or_human_text() -> None:
    human, machine = io.StringIO(), io.StringIO()
    Output(False, human).result({"a": 1}, lambda d: f"a is {d['a']}\n\n")
    Output(True, machine).result({"a": 1}, lambda d: "unused")
    assert human.getvalue() == "a is 1\n"
    assert json.loads(machine.getvalue()) == {"a": 1}


def test_stream_lines_are_compact_json() -> None:
    out = io.StringIO()
    Output(True, out).line({"a": "é"}, str)
    assert out.getvalue() == '{"a":"é"}\n'


def test_text_is_only_for_humans() -> None:
    human, machine = io.StringIO(), io.StringIO()
    Output(False, human).text("hello")
    Output(True, machine).text("hello")
    assert human.getvalue() == "hello\n" and machine.getvalue() == ""


def test_error_line_is_one_line() -> None:
    err = io.StringIO()
    error_line("first\n  second", err)
    assert err.getvalue() == "jarvismem: error: first second\n"


def test_progress_off_a_terminal_is_a_line_per_quarter_and_100_only_at_finish() -> None:
    err = io.StringIO()
    bar = ProgressBar("copying", err)
    for done in range(101):
        bar(done, 100)
    assert err.getvalue().splitlines() == [
        "copying: 0/100 (0%)",
        "copying: 25/100 (25%)",
        "copying: 50/100 (50%)",
        "copying: 75/100 (75%)",
    ]
    bar.finish()
    assert err.getvalue().splitlines()[-1] == "copying: 100/100 (100%)"


def test_progress_that_fails_after_the_last_item_never_shows_100() -> None:
    for err in (io.StringIO(), _Tty()):
        bar = ProgressBar("importing", err)
        bar(1, 2)
        bar(2, 2)  # every item staged, and then the command fails
        bar.close()
        assert "100%" not in err.getvalue()


def test_progress_of_an_unknown_total_is_a_count() -> None:
    err = io.StringIO()
    bar = ProgressBar("compacting", err)
    for done in range(1, 11):
        bar(done, 0)
    bar.finish()
    assert err.getvalue().splitlines() == [
        "compacting: 1 so far",
        "compacting: 2 so far",
        "compacting: 4 so far",
        "compacting: 8 so far",
        "compacting: 10 done",
    ]


def test_progress_on_a_terminal_redraws_in_place() -> None:
    err = _Tty()
    bar = ProgressBar("copying", err)
    bar(1, 2)
    bar(2, 2)
    bar.finish()
    assert err.getvalue() == (
        f"\rcopying [{'#' * 15}{'-' * 15}]  50% 1/2\rcopying [{'#' * 30}] 100% 2/2\n"
    )


def test_disabled_progress_prints_nothing() -> None:
    err = io.StringIO()
    bar = ProgressBar("copying", err, enabled=False)
    bar(1, 2)
    bar.close()
    assert err.getvalue() == ""
