"""Every blob backend against the shared conformance suite (local dir, then Azurite)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.testing.blob_conformance import BlobStorageConformance, run_blob_conformance


class TestBlobConformance(BlobStorageConformance):
    """The suite, parametrized over the ``blob_storage`` fixture's backends."""

    @pytest.fixture
    def storage(self, blob_storage: Any) -> Any:
        return blob_storage


class _TailReadsEverything(LocalBlobStorage):
    """A deliberately broken backend: tail ignores ``max_bytes``."""

    async def tail(self, path: str, max_bytes: int) -> bytes:
        return await self.read(path)


async def test_run_blob_conformance_passes_on_a_conforming_backend(
    local_blob: LocalBlobStorage,
) -> None:
    await run_blob_conformance(local_blob)


async def test_run_blob_conformance_names_the_check_a_broken_backend_fails(
    tmp_path: Path,
) -> None:
    storage = _TailReadsEverything(tmp_path / "broken")
    with pytest.raises(AssertionError, match="test_tail_"):
        await run_blob_conformance(storage)
