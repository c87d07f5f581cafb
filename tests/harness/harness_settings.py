"""The settings of a process the crash and checker harnesses start.

Both harnesses run runtimes against a private redis-server and a local blob
folder, with no ``.env`` read and no background compaction (it would write on
its own schedule and blur what a crash did), and with short tier timeouts so a
stalled backend shows as a degraded read within the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jarvismem.settings import Settings, load_settings

HARNESS_TIER_TIMEOUT = 1.0
"""Seconds a tier read may take in a harness run before it counts as degraded."""


def harness_settings(
    redis_url: str,
    *,
    blob_root: Path,
    outbox_path: Path,
    namespace: str,
    **overrides: Any,
) -> Settings:
    """Settings on ``redis_url`` with local blobs under ``blob_root``.

    ``overrides``: further settings fields (retries, Athena...), applied last.
    """
    fields: dict[str, Any] = {
        "redis_url": redis_url,
        "storage_backend": "local",
        "storage_base_path": blob_root,
        "outbox_path": outbox_path,
        "jarvismem_namespace": namespace,
        "compaction_enabled": False,
        "tier_timeout_episodic": HARNESS_TIER_TIMEOUT,
        "tier_timeout_working": HARNESS_TIER_TIMEOUT,
        "tier_timeout_checkpoint": HARNESS_TIER_TIMEOUT,
    }
    fields.update(overrides)
    return load_settings(_env_file=None, **fields)
