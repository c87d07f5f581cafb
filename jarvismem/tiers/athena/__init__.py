"""Tier 4: the Athena service, split by job.

* :mod:`.config`: :class:`AthenaTierConfig`, the tunables and their defaults;
* :mod:`.gate`: the per-client limit on write requests, and what close() waits for;
* :mod:`.session`: one session per (tenant, user, agent), created once;
* :mod:`.delivery`: the outbox delivery loop, circuit breaker and effectively-once markers;
* :mod:`.reads`: context and search reads;
* :mod:`.memory`: :class:`AthenaMemory`, composing them, with the writes.

This package only re-exports; the parts import each other directly.
"""

from jarvismem.tiers.athena.config import (
    ATHENA_CONCURRENT_WRITES,
    CLAIM_LEASE_SECONDS,
    CLOSE_GRACE_SECONDS,
    DEFAULT_DEDUPE_TTL,
    KERNEL_BUSY_GAP,
    MARKER_TIMEOUT,
    AthenaTierConfig,
)
from jarvismem.tiers.athena.delivery import CircuitState
from jarvismem.tiers.athena.memory import AthenaMemory

__all__ = [
    "ATHENA_CONCURRENT_WRITES",
    "CLAIM_LEASE_SECONDS",
    "CLOSE_GRACE_SECONDS",
    "DEFAULT_DEDUPE_TTL",
    "KERNEL_BUSY_GAP",
    "MARKER_TIMEOUT",
    "AthenaMemory",
    "AthenaTierConfig",
    "CircuitState",
]
