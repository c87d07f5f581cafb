"""``jarvismem ui`` as a user runs it: prints its URL, serves, stops on SIGINT with exit 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REAL_REDIS_URL, env_without_settings

pytestmark = pytest.mark.integration


def test_the_command_serves_until_interrupted(real_redis: Any, tmp_path: Path) -> None:
    env = {
        **env_without_settings(),
        "REDIS_URL": REAL_REDIS_URL,
        "JARVISMEM_NAMESPACE": "uicmd" + tmp_path.name[-8:].replace("_", ""),
        "STORAGE_BASE_PATH": str(tmp_path / "blobs"),
        "OUTBOX_PATH": str(tmp_path / "outbox"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvismem", "ui", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        text = ""
        while True:  # one JSON object, printed once it serves (indented: several lines)
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "no output"
            text += line
            if line.startswith("}"):
                break
        info = json.loads(text)
        assert info["url"].startswith("http://127.0.0.1:") and info["token_required"] is False
        page = httpx.get(info["url"], timeout=10)
        assert page.status_code == 200 and "Workflows" in page.text
        assert httpx.get(info["url"] + "health?format=json", timeout=10).json()["backends"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
