"""The reference venv builder: what counts as installed, what a failure says, the driver env."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import reference
from tests.harness.reference import (
    ReferenceUnavailableError,
    _installed,
    build_reference_venv,
    driver_env,
)


def _fake_venv(path: Path, marker: str | None) -> Path:
    python = path / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    if marker is not None:
        (path / ".installed").write_text(marker)
    return python


def test_only_a_finished_install_of_the_same_requirements_counts(tmp_path: Path) -> None:
    _fake_venv(tmp_path / "done", "pkg==1\nredis\n")
    _fake_venv(tmp_path / "interrupted", None)  # killed before the marker was written
    _fake_venv(tmp_path / "other", "pkg==2\nredis\n")
    assert _installed(tmp_path / "done", ("pkg==1", "redis"))
    assert not _installed(tmp_path / "interrupted", ("pkg==1", "redis"))
    assert not _installed(tmp_path / "other", ("pkg==1", "redis"))


def test_a_failed_install_says_why_and_leaves_no_marker(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    missing = tmp_path / "no-such-package"  # a local path: pip fails without the network
    with pytest.raises(ReferenceUnavailableError, match=r"pip install.*exited"):
        build_reference_venv(venv, requirements=(str(missing),))
    assert not (venv / ".installed").exists()


def test_the_driver_environment_carries_no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://secret@host/0")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("JARVISMEM_NAMESPACE", "ns")
    env = driver_env(EXTRA="1")
    assert "REDIS_URL" not in env and "PYTHONPATH" not in env and "JARVISMEM_NAMESPACE" not in env
    assert env["EXTRA"] == "1" and env["PATH"]


def test_a_finished_venv_of_the_same_requirements_is_reused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = _fake_venv(venv, "pkg==1\nredis\n")
    assert build_reference_venv(venv, requirements=("pkg==1", "redis")) == python


def test_an_unfinished_or_different_venv_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []

    def fail(cmd: list[str], timeout: float) -> None:
        ran.append(cmd)
        raise ReferenceUnavailableError("no network here")

    monkeypatch.setattr(reference, "_run", fail)
    for marker in (None, "pkg==0\nredis\n"):
        venv = tmp_path / f"venv-{marker is None}"
        _fake_venv(venv, marker)
        with pytest.raises(ReferenceUnavailableError, match="no network"):
            build_reference_venv(venv, requirements=("pkg==1", "redis"))
        assert not venv.exists()  # the untrusted venv was removed before the rebuild
    assert len(ran) == 2 and all("venv" in cmd for cmd in ran)
