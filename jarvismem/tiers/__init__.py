"""Tiers: what is remembered (scratchpad, ledger, long-term summary, Athena, checkpoints)."""
