"""jarvismem: an asyncio tiered-memory runtime for AI agent kernels.

The one object a kernel awaits is :class:`UnifiedMemory`; a process builds its
connections once with :class:`MemoryRuntime` (``await MemoryRuntime.from_env()``)
and hands out cheap per-step views with ``runtime.memory(workflow, step, agent)``.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing, which `import jarvismem` and
# `jarvismem --version` need for nothing else; type checkers read it as the real one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from jarvismem.backends.athena import AthenaClient
    from jarvismem.backends.blob import BlobStorage, LocalBlobStorage, create_blob_storage
    from jarvismem.bundle import Bundle
    from jarvismem.errors import JarvisMemError
    from jarvismem.keys import KeySpace, validate_id
    from jarvismem.memory import UnifiedMemory
    from jarvismem.recall.policy import MemoryPolicy
    from jarvismem.runtime import Lifecycle, MemoryRuntime, RecallSetup, get_athena_client
    from jarvismem.settings import Settings, load_settings
    from jarvismem.tiers.athena import AthenaMemory
    from jarvismem.tiers.episodic import EpisodicLedger
    from jarvismem.tiers.longterm import LongTermMemory
    from jarvismem.tiers.working import WorkingScratchpad

__all__ = [
    "AthenaClient",
    "AthenaMemory",
    "BlobStorage",
    "Bundle",
    "EpisodicLedger",
    "JarvisMemError",
    "KeySpace",
    "Lifecycle",
    "LocalBlobStorage",
    "LongTermMemory",
    "MemoryPolicy",
    "MemoryRuntime",
    "RecallSetup",
    "Settings",
    "UnifiedMemory",
    "WorkingScratchpad",
    "create_blob_storage",
    "get_athena_client",
    "load_settings",
    "validate_id",
]
__version__ = "0.1.0"

# Where each public name lives. They are imported on first use (PEP 562) so that
# `import jarvismem` and `jarvismem --version` do not pay for every backend's client
# library; the TYPE_CHECKING imports above give type checkers the same names.
_HOMES: dict[str, str] = {
    "AthenaClient": "jarvismem.backends.athena",
    "AthenaMemory": "jarvismem.tiers.athena",
    "BlobStorage": "jarvismem.backends.blob",
    "Bundle": "jarvismem.bundle",
    "EpisodicLedger": "jarvismem.tiers.episodic",
    "JarvisMemError": "jarvismem.errors",
    "KeySpace": "jarvismem.keys",
    "Lifecycle": "jarvismem.runtime",
    "LocalBlobStorage": "jarvismem.backends.blob",
    "LongTermMemory": "jarvismem.tiers.longterm",
    "MemoryPolicy": "jarvismem.recall.policy",
    "MemoryRuntime": "jarvismem.runtime",
    "RecallSetup": "jarvismem.runtime",
    "Settings": "jarvismem.settings",
    "UnifiedMemory": "jarvismem.memory",
    "WorkingScratchpad": "jarvismem.tiers.working",
    "create_blob_storage": "jarvismem.backends.blob",
    "get_athena_client": "jarvismem.runtime",
    "load_settings": "jarvismem.settings",
    "validate_id": "jarvismem.keys",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jarvismem' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute read
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
