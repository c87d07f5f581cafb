"""Fixtures of the engine tests: settings isolated in a tmp folder and namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.keys import KeySpace
from jarvismem.settings import Settings, load_settings


@pytest.fixture
def settings(tmp_path: Path, keyspace: KeySpace) -> Settings:
    """No ``.env``, a fresh namespace, outboxes under tmp, no background compaction."""
    return load_settings(
        _env_file=None,
        jarvismem_namespace=keyspace.namespace,
        outbox_path=tmp_path / "outbox",
        storage_base_path=tmp_path / "blobs",
        compaction_enabled=False,
    )
