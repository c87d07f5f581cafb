"""The worker's process speaks the frame protocol: ready, a reply per request, an error
frame for a request the summarizer refuses, and a clean exit when stdin closes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from jarvismem.backends.llm import ExtractiveSummarizer
from jarvismem.backends.llm.worker import HEADER, frame


def _read(stream: Any) -> Any:
    (size,) = HEADER.unpack(stream.read(HEADER.size))
    return json.loads(stream.read(size))


def _summarize(text: str, previous: str | None, max_chars: int) -> bytes:
    return frame(
        {
            "op": "summarize",
            "texts": [text],
            "redact": None,
            "previous": previous,
            "max_chars": max_chars,
        }
    )


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "jarvismem.backends.llm.worker_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_the_child_answers_requests_in_order_and_exits_on_eof() -> None:
    proc = _child()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    assert _read(proc.stdout) == {"ready": proc.pid}
    text = "[turn 1] the cache shard failed.\n[turn 2] rollback of the cache shard worked."
    local = ExtractiveSummarizer()
    proc.stdin.write(_summarize(text, None, 60) + _summarize(text, "older summary line.", 4000))
    proc.stdin.write(_summarize("x", None, 0) + _summarize(text, None, 60))
    proc.stdin.flush()
    assert _read(proc.stdout) == {"ok": local.summarize_now(text, max_chars=60)}
    assert _read(proc.stdout) == {
        "ok": local.summarize_now(text, previous_summary="older summary line.", max_chars=4000)
    }
    refused = _read(proc.stdout)
    assert "max_chars must be >= 1" in refused["error"]
    # A refused request does not end the child: the next one is answered.
    assert _read(proc.stdout) == {"ok": local.summarize_now(text, max_chars=60)}
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert proc.stdout.read() == b""


def test_a_malformed_request_gets_an_error_frame() -> None:
    proc = _child()
    assert proc.stdin is not None and proc.stdout is not None
    _read(proc.stdout)
    body = b"{not json"
    proc.stdin.write(HEADER.pack(len(body)) + body + _summarize("[turn 1] ok.", None, 100))
    proc.stdin.flush()
    assert "JSONDecodeError" in _read(proc.stdout)["error"]
    assert _read(proc.stdout) == {"ok": "[turn 1] ok."}
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_a_truncated_request_ends_the_child() -> None:
    proc = _child()
    assert proc.stdin is not None and proc.stdout is not None
    _read(proc.stdout)
    proc.stdin.write(HEADER.pack(100) + b"short")
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert proc.stdout.read() == b""  # nothing half-answered


def test_the_child_redacts_with_the_named_redactor() -> None:
    from jarvismem.redaction import build_redactor
    from tests.secret_corpus import SECRETS

    texts = [text for _, text, _ in SECRETS]
    names = ("password", "client_secret")
    proc = _child()
    assert proc.stdin is not None and proc.stdout is not None
    _read(proc.stdout)
    request = {"op": "summarize", "texts": texts, "redact": list(names)}
    proc.stdin.write(frame({**request, "previous": None, "max_chars": 10**6}))
    proc.stdin.write(frame({"op": "shred", "texts": texts}))
    proc.stdin.flush()
    redactor = build_redactor(names)
    want = ExtractiveSummarizer().summarize_now(
        "\n".join(redactor(t) for t in texts), max_chars=10**6
    )
    assert _read(proc.stdout) == {"ok": want}
    assert "unknown op 'shred'" in _read(proc.stdout)["error"]
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
