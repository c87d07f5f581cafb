"""Tests of jarvismem.backends.llm, one file per module."""
