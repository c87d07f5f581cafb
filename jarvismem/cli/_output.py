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
    expects); ``total`` may be an estimate and may be 0 when unknown.
    """

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_step = -1
        self._last_done = -1
        self._last_draw = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        total = max(total, done)
        frac = done / total if total else 0.0
        if self.tty:
            now = time.monotonic()
            # Redraw at most ~20 times a second: a terminal is slower than a loop.
            if now - self._last_draw < 0.05 and done < total:
                return
            self._last_draw = now
            filled = int(frac * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r{self.label} [{bar}] {frac:4.0%} {done}/{total}")
            self.stream.flush()
            self._drawn = True
            return
        # Not a terminal (a log, a pipe): one line per quarter, never a flood.
        step = int(frac * 4)
        if step != self._last_step or (done == total and done != self._last_done):
            self._last_step = step
            self._last_done = done
            self.stream.write(f"{self.label}: {done}/{total} ({frac:.0%})\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
