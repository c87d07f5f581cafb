"""The reference venv builder: what counts as installed, what a failure says, the driver env."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.testing.reference import (
    ReferenceUnavailableError,
    _installed,
    build_reference_venv,
    driver_env,
)


def _fake_venv(path: Path, marker: str | None) -> None:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    if marker is not None:
        (path / ".installed").write_text(marker)


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
