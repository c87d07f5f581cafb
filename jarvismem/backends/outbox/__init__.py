"""A durable, bounded, ordered local outbox: JSON lines on disk plus a cursor file.

Writes that cannot reach a remote backend right now (Athena events, ledger
turns while Redis is down) are appended here and replayed later, in order.
The package is split by job:

* :mod:`.format`: the on-disk encodings (record lines, destination stamps,
  cursor, dead letters);
* :mod:`.locks`: the per-object state, the file lock and the delivery claim;
* :mod:`.store`: :class:`Outbox` (append, peek, ack, dead-letter, compaction);
* :mod:`.deliver`: :class:`Deliverer`, the one deliverer of every outbox
  (apply in order, retry outages, dead-letter refusals);
* :mod:`.scan`: :func:`scan_outboxes`, for ``jarvismem status``.

This module only re-exports; the parts import each other directly.
"""

from __future__ import annotations

from jarvismem.backends.outbox.deliver import (
    Apply,
    ApplyMany,
    Deliverer,
    DeliveryPacing,
    RecordDestination,
    RunApplier,
)
from jarvismem.backends.outbox.scan import scan_outboxes
from jarvismem.backends.outbox.store import Outbox

__all__ = [
    "Apply",
    "ApplyMany",
    "Deliverer",
    "DeliveryPacing",
    "Outbox",
    "RecordDestination",
    "RunApplier",
    "scan_outboxes",
]
