"""Adapters that plug jarvismem into agent frameworks (each behind its own extra).

* :mod:`jarvismem.integrations.langgraph`: a LangGraph checkpointer and store
  (``pip install 'jarvismem[langgraph]'``).
"""
