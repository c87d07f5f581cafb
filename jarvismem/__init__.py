"""jarvismem: an asyncio tiered-memory runtime for AI agent kernels.

The one object a kernel awaits is :class:`UnifiedMemory`; a process builds its
connections once with :class:`MemoryRuntime` (``await MemoryRuntime.from_env()``)
and hands out cheap per-step views with ``runtime.memory(workflow, step, agent)``.
"""

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.blob import BlobStorage, LocalBlobStorage, create_blob_storage
from jarvismem.bundle import Bundle
from jarvismem.errors import JarvisMemError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.memory import UnifiedMemory
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.runtime import MemoryRuntime, get_athena_client
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
    "LocalBlobStorage",
    "LongTermMemory",
    "MemoryPolicy",
    "MemoryRuntime",
    "Settings",
    "UnifiedMemory",
    "WorkingScratchpad",
    "create_blob_storage",
    "get_athena_client",
    "load_settings",
    "validate_id",
]
__version__ = "0.1.0"
