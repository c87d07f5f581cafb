"""The reference venv builder: a finished venv is reused, an unfinished one is not trusted.

The real install (``jarviscore-framework`` from PyPI, ~200 MB) is exercised by the
tests that drive the reference and by ``python -m benchmarks --with-reference``;
these tests check the bookkeeping around it without installing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.testing import reference
from jarvismem.testing.reference import ReferenceUnavailableError, build_reference_venv


def _fake_venv(venv: Path, marker: str | None) -> Path:
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    if marker is not None:
        (venv / ".installed").write_text(marker, encoding="utf-8")
    return python


def test_a_finished_venv_of_the_same_requirements_is_reused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = _fake_venv(venv, "pkg==1\nredis")
    assert build_reference_venv(venv, requirements=("pkg==1", "redis")) == python


def test_an_unfinished_or_different_venv_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []

    def fail(cmd: list[str], timeout: float) -> None:
        ran.append(cmd)
        raise ReferenceUnavailableError("no network here")

    monkeypatch.setattr(reference, "_run", fail)
    for marker in (None, "pkg==0\nredis"):
        venv = tmp_path / f"venv-{marker is None}"
        _fake_venv(venv, marker)
        with pytest.raises(ReferenceUnavailableError, match="no network"):
            build_reference_venv(venv, requirements=("pkg==1", "redis"))
        assert not venv.exists()  # the untrusted venv was removed before the rebuild
    assert len(ran) == 2 and all("venv" in cmd for cmd in ran)
