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


def test_progress_off_a_terminal_is_a_line_per_quarter() -> None:
    err = io.StringIO()
    bar = ProgressBar("copying", err)
    for done in range(101):
        bar(done, 100)
    bar.close()
    assert err.getvalue().splitlines() == [
        "copying: 0/100 (0%)",
        "copying: 25/100 (25%)",
        "copying: 50/100 (50%)",
        "copying: 75/100 (75%)",
        "copying: 100/100 (100%)",
    ]


def test_progress_on_a_terminal_redraws_in_place() -> None:
    err = _Tty()
    bar = ProgressBar("copying", err)
    bar(2, 2)
    bar.close()
    assert err.getvalue() == f"\rcopying [{'#' * 30}] 100% 2/2\n"


def test_disabled_progress_prints_nothing() -> None:
    err = io.StringIO()
    bar = ProgressBar("copying", err, enabled=False)
    bar(1, 2)
    bar.close()
    assert err.getvalue() == ""
