"""Output of the CLI: human text or ``--json``, errors, and a stderr progress bar.

Results go to stdout (one JSON document, or JSON lines for streams, under
``--json``); progress, warnings and errors go to stderr so that piping stdout
(``jarvismem export > file.jsonl``) stays clean.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from jarvismem.render import to_json

__all__ = ["Output", "ProgressBar", "error_line"]

_dumps_line = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


class Output:
    """Where a command's results go.

    ``json_mode``: print machine-readable JSON instead of text. ``stream``:
    stdout by default (tests may pass a StringIO).
    """

    def __init__(self, json_mode: bool, stream: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.stream = stream or sys.stdout

    def result(self, data: Any, human: Callable[[Any], str]) -> None:
        """Print one result: ``data`` as JSON, or ``human(data)`` as text."""
        text = to_json(data) if self.json_mode else human(data)
        self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()

    def line(self, data: Any, human: Callable[[Any], str]) -> None:
        """Print one item of a stream: a compact JSON line, or ``human(data)``."""
        text = _dumps_line(data) if self.json_mode else human(data)
        self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()

    def text(self, text: str) -> None:
        """Print human-only text (suppressed under ``--json``)."""
        if not self.json_mode:
            self.stream.write(text.rstrip("\n") + "\n")
            self.stream.flush()


def error_line(message: str, stream: TextIO | None = None) -> None:
    """Print ``jarvismem: error: <message>`` as one line on stderr."""
    one_line = " ".join(str(message).split())
    (stream or sys.stderr).write(f"jarvismem: error: {one_line}\n")


class ProgressBar:
    """A progress bar on stderr: redrawn in place on a terminal, a few lines otherwise.

    ``label``: what is being counted; ``stream``: stderr by default. Call it as
    ``bar(done, total)`` (the signature ``Compactor.compact(progress=...)``
    expects); ``total`` is 0 when unknown, and then only the count is shown.
    The bar never claims 100 % by itself: the work may still fail after the
    last item (an import's final switch), so 100 % is drawn by :meth:`finish`,
    which the command calls once it has succeeded. :meth:`close` ends the line.
    """

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._done = 0
        self._total = 0
        self._last_step = -1
        self._next_count = 1
        self._last_draw = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        self._done, self._total = done, max(total, 0)
        known = self._total > 0
        if known and done >= self._total:
            return  # 100 % is finish()'s to draw, after success
        if self.tty:
            now = time.monotonic()
            # Redraw at most ~20 times a second: a terminal is slower than a loop.
            if now - self._last_draw < 0.05:
                return
            self._last_draw = now
            self._draw_tty(done, self._total, final=False)
            return
        # Not a terminal (a log, a pipe): one line per quarter, never a flood.
        if known:
            step = int(done / self._total * 4)
            if step != self._last_step:
                self._last_step = step
                self._line(f"{done}/{self._total} ({step * 25}%)")
        elif done >= self._next_count:
            # Unknown total: a line at 1, 2, 4, 8, ... items so far.
            while self._next_count <= done:
                self._next_count *= 2
            self._line(f"{done} so far")

    def _line(self, text: str) -> None:
        self.stream.write(f"{self.label}: {text}\n")
        self.stream.flush()

    def _draw_tty(self, done: int, total: int, *, final: bool) -> None:
        if total > 0:
            frac = 1.0 if final else min(done / total, 0.99)
            filled = int(frac * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            text = f"\r{self.label} [{bar}] {frac:4.0%} {done}/{total}"
        else:
            text = f"\r{self.label}: {done}" + (" done" if final else " so far")
        self.stream.write(text)
        self.stream.flush()
        self._drawn = True

    def finish(self, done: int | None = None) -> None:
        """The work succeeded: draw the final state (``done`` items, default the last
        count reported) as complete, and end the line."""
        if not self.enabled:
            return
        if done is not None:
            self._done = done
        total = max(self._total, self._done) if self._total else 0
        if self.tty:
            self._draw_tty(self._done, total, final=True)
        elif total:
            self._line(f"{self._done}/{total} (100%)")
        else:
            self._line(f"{self._done} done")
        self.close()

    def close(self) -> None:
        """End the bar's line on a terminal (as it stands: after a failure it is not 100 %)."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
