"""The summary worker's own process: serves extractive summaries on stdin/stdout.

Started by :class:`~jarvismem.backends.llm.worker.SummaryWorker`; the frames are
described there. It exits when its stdin closes, so it never outlives the agent
process that started it. It imports only :mod:`~jarvismem.backends.llm.extractive`,
:mod:`~jarvismem.redaction` and what they need (see
:data:`~jarvismem.backends.llm.worker.CHILD_BOOT`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from jarvismem.backends.llm.extractive import ExtractiveSummarizer
from jarvismem.backends.llm.worker import HEADER, MAX_FRAME, frame
from jarvismem.redaction import redactor_for

__all__ = ["main", "serve"]


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Answer each request frame on ``stdin`` with a reply frame on ``stdout`` until EOF."""
    summarizer = ExtractiveSummarizer()

    def send(body: Any) -> None:
        stdout.write(frame(body))
        stdout.flush()

    send({"ready": os.getpid()})
    while True:
        header = stdin.read(HEADER.size)
        if len(header) < HEADER.size:
            return  # the parent closed our stdin: it is done or gone
        (size,) = HEADER.unpack(header)
        if size > MAX_FRAME:
            return  # not a frame of ours: the parent kills and replaces us
        body = stdin.read(size)
        if len(body) < size:
            return
        try:
            request = json.loads(body)
            if request["op"] == "summarize":
                texts = request["texts"]
                if request["redact"] is not None:
                    redact = redactor_for(tuple(request["redact"]))
                    texts = [redact(text) for text in texts]
                summary = summarizer.summarize_now(
                    "\n".join(texts),
                    previous_summary=request["previous"],
                    max_chars=request["max_chars"],
                )
                send({"ok": summary})
            else:
                send({"error": f"unknown op {request['op']!r}"})
        except Exception as exc:  # the parent retries in-process and raises it there
            send({"error": f"{type(exc).__name__}: {exc}"})


def main() -> None:
    """Serve summaries on stdin/stdout until stdin closes."""
    # The frames own the real stdout; anything else printed (a warning) goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
