"""The scripts the README tells users to run: scripts/test stops only what it started.

Each test runs the real scripts in a temporary copy of ``scripts/`` and
``pyproject.toml``, on ports of its own (``SERVICES_REDIS_PORT``,
``SERVICES_AZURITE_PORT``), so the Redis and Azurite the rest of the suite uses are
never touched. ``.venv`` is a stand-in that runs this interpreter (no install), and
Azurite is a stand-in that only listens on its port: what is under test is the
scripts' bookkeeping, not npm. Redis is a real ``redis-server``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    _port_open,
    bootstrap_stamp,
    closed_port,
    env_without_settings,
    require_backend,
)

ROOT = Path(__file__).resolve().parents[1]

FAKE_AZURITE = """#!{python}
# Stand-in for azurite-blob: listens on --blobPort until killed.
import socket, sys
port = int(sys.argv[sys.argv.index("--blobPort") + 1])
server = socket.create_server(("127.0.0.1", port))
while True:
    conn, _ = server.accept()
    conn.close()
"""

PROBE_TEST = """
import os, socket

def test_services_are_up_during_the_run():
    for name in ("SERVICES_REDIS_PORT", "SERVICES_AZURITE_PORT"):
        socket.create_connection(("127.0.0.1", int(os.environ[name])), timeout=2).close()
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of scripts/ and pyproject.toml with a stand-in .venv and Azurite."""
    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    _executable(root / ".venv" / "bin" / "python", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    time.sleep(0.01)  # the install stamp must be newer than pyproject.toml
    (root / ".venv" / bootstrap_stamp()).touch()
    _executable(
        root / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob",
        FAKE_AZURITE.format(python=sys.executable),
    )
    (root / "test_probe.py").write_text(PROBE_TEST, encoding="utf-8")
    return root


@pytest.fixture
def ports() -> dict[str, str]:
    return {
        "SERVICES_REDIS_PORT": str(closed_port()),
        "SERVICES_AZURITE_PORT": str(closed_port()),
    }


def _run(root: Path, ports: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = env_without_settings()
    env.update(ports)
    env.pop("JARVISMEM_SKIP_SERVICES", None)
    return subprocess.run(
        [str(root / "scripts" / args[0]), *args[1:]],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        # A guard against a hang, not a speed bound: scripts/test starts Redis and
        # Azurite and pytest twice, which a loaded 2-core machine stretches past 60 s.
        timeout=240,
    )


def _up(ports: dict[str, str]) -> list[bool]:
    return [_port_open("127.0.0.1", int(port)) for port in ports.values()]


def _stop_leftovers(root: Path, ports: dict[str, str]) -> None:
    # Whatever the assertions said, leave no server behind.
    _run(root, ports, "services", "stop")


def test_scripts_test_stops_the_services_it_started(checkout: Path, ports: dict) -> None:
    try:
        assert _up(ports) == [False, False]
        proc = _run(checkout, ports, "test", "-q", "-p", "no:cacheprovider", "test_probe.py")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 passed" in proc.stdout  # both were up while pytest ran
        assert "stopped Redis" in proc.stdout and "stopped Azurite" in proc.stdout
        assert _up(ports) == [False, False]
        assert not list((checkout / ".cache").glob("*.pid"))
    finally:
        _stop_leftovers(checkout, ports)


def test_scripts_test_keeps_the_exit_status_of_pytest(checkout: Path, ports: dict) -> None:
    (checkout / "test_probe.py").write_text("def test_fails():\n    assert False\n")
    try:
        proc = _run(checkout, ports, "test", "-q", "-p", "no:cacheprovider", "test_probe.py")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert _up(ports) == [False, False]
    finally:
        _stop_leftovers(checkout, ports)


def test_scripts_test_leaves_running_services_alone(checkout: Path, ports: dict) -> None:
    try:
        started = _run(checkout, ports, "services", "start")
        assert started.returncode == 0, started.stderr
        assert _up(ports) == [True, True]
        proc = _run(checkout, ports, "test", "-q", "-p", "no:cacheprovider", "test_probe.py")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "stopped" not in proc.stdout
        assert _up(ports) == [True, True]
        stopped = _run(checkout, ports, "services", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert _up(ports) == [False, False]
    finally:
        _stop_leftovers(checkout, ports)


def test_services_stop_never_touches_a_server_it_did_not_start(checkout: Path, ports: dict) -> None:
    # A "local" Redis on the port before scripts/services ran: start reuses it,
    # stop leaves it running.
    port = ports["SERVICES_REDIS_PORT"]
    theirs = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"],
        cwd=checkout,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _port_open("127.0.0.1", int(port)):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        assert "already answers" in _run(checkout, ports, "services", "start", "redis").stdout
        _run(checkout, ports, "services", "stop")
        assert theirs.poll() is None
        assert _port_open("127.0.0.1", int(port))
    finally:
        theirs.terminate()
        theirs.wait(timeout=10)
        _stop_leftovers(checkout, ports)


def test_services_rejects_an_unknown_service(checkout: Path, ports: dict) -> None:
    proc = _run(checkout, ports, "services", "stop", "mongodb")
    assert proc.returncode == 2
    assert "usage" in proc.stderr


if os.name != "posix":  # pragma: no cover
    pytestmark = pytest.mark.skip("the scripts are bash")
