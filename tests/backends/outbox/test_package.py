"""The package re-exports every name imported from jarvismem.backends.outbox elsewhere."""

from __future__ import annotations

import jarvismem.backends.outbox as outbox
from jarvismem.backends.outbox import drain, scan, store


def test_reexports_are_the_parts_objects() -> None:
    assert outbox.Outbox is store.Outbox
    assert outbox.OutboxDrainer is drain.OutboxDrainer
    assert outbox.deliver_pending is drain.deliver_pending
    assert outbox.scan_outboxes is scan.scan_outboxes
    assert sorted(outbox.__all__) == ["Outbox", "OutboxDrainer", "deliver_pending", "scan_outboxes"]
