"""Bridges from jarvismem to agent ecosystems, each behind its own optional extra."""
