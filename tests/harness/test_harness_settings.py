"""harness_settings: the crash and checker harnesses' settings, no .env read."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.defaults import CONTEXT_TTL_DAYS
from tests.harness.harness_settings import HARNESS_TIER_TIMEOUT, harness_settings


def test_a_private_store_with_short_timeouts_and_no_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("REDIS_CONTEXT_TTL_DAYS=3\n")
    s = harness_settings(
        "redis://127.0.0.1:1/0",
        blob_root=tmp_path / "b",
        outbox_path=tmp_path / "o",
        namespace="harness",
    )
    assert (s.redis_url, s.storage_backend) == ("redis://127.0.0.1:1/0", "local")
    assert (s.storage_base_path, s.outbox_path) == (tmp_path / "b", tmp_path / "o")
    assert s.jarvismem_namespace == "harness"
    assert s.redis_context_ttl_days == CONTEXT_TTL_DAYS  # the .env is not read
    assert not s.compaction_enabled
    timeouts = (s.tier_timeout_episodic, s.tier_timeout_working, s.tier_timeout_checkpoint)
    assert timeouts == (HARNESS_TIER_TIMEOUT,) * 3


def test_overrides_are_applied_last(tmp_path: Path) -> None:
    s = harness_settings(
        "redis://127.0.0.1:1/0",
        blob_root=tmp_path,
        outbox_path=tmp_path,
        namespace="harness",
        tier_timeout_working=3.0,
        redis_connect_retries=40,
    )
    assert (s.tier_timeout_working, s.redis_connect_retries) == (3.0, 40)
