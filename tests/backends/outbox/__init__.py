"""Tests of jarvismem.backends.outbox, one file per module."""
