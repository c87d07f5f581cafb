"""Tier 4: the Athena service, split by job.

* :mod:`.config`: :class:`AthenaTierConfig`, the tunables and their defaults;
* :mod:`.gate`: the per-client limit on write requests, and what close() waits for;
* :mod:`.session`: one session per (tenant, user, agent), created once;
* :mod:`.circuit`: closed/open/half-open, with backoff and cooldown;
* :mod:`.markers`: effectively-once claims and sent-marks in Redis;
* :mod:`.delivery`: the outbox delivery loop, using both;
* :mod:`.writes`: the outbox records of writes (validated, redacted, keyed);
* :mod:`.reads`: context and search reads;
* :mod:`.memory`: :class:`AthenaMemory`, composing them.

This package only re-exports; the parts import each other directly.
"""

from jarvismem.tiers.athena.circuit import CircuitState
from jarvismem.tiers.athena.config import (
    ATHENA_CONCURRENT_WRITES,
    CLAIM_LEASE_SECONDS,
    CLOSE_GRACE_SECONDS,
    KERNEL_BUSY_GAP,
    MARKER_TIMEOUT,
    AthenaTierConfig,
)
from jarvismem.tiers.athena.memory import AthenaMemory
from jarvismem.tiers.athena.writes import TurnOrigin

__all__ = [
    "ATHENA_CONCURRENT_WRITES",
    "CLAIM_LEASE_SECONDS",
    "CLOSE_GRACE_SECONDS",
    "KERNEL_BUSY_GAP",
    "MARKER_TIMEOUT",
    "AthenaMemory",
    "AthenaTierConfig",
    "CircuitState",
    "TurnOrigin",
]
