"""The package re-exports every name imported from jarvismem.backends.outbox elsewhere."""

from __future__ import annotations

import jarvismem.backends.outbox as outbox
from jarvismem.backends.outbox import deliver, scan, store


def test_reexports_are_the_parts_objects() -> None:
    assert outbox.Outbox is store.Outbox
    assert outbox.Deliverer is deliver.Deliverer
    assert outbox.Apply is deliver.Apply and outbox.ApplyMany is deliver.ApplyMany
    assert outbox.scan_outboxes is scan.scan_outboxes
    assert outbox.DeliveryPacing is deliver.DeliveryPacing
    assert outbox.RunApplier is deliver.RunApplier
    assert outbox.RecordDestination is deliver.RecordDestination
    assert sorted(outbox.__all__) == [
        "Apply",
        "ApplyMany",
        "Deliverer",
        "DeliveryPacing",
        "Outbox",
        "RecordDestination",
        "RunApplier",
        "scan_outboxes",
    ]
