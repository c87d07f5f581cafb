"""Adapters that plug jarvismem into agent ecosystems, each behind its own optional extra.

* :mod:`jarvismem.integrations.langgraph`: a LangGraph checkpointer and store
  (``pip install 'jarvismem[langgraph]'``).
* :mod:`jarvismem.integrations.mcp`: an MCP server over one agent's memory
  (``pip install 'jarvismem[mcp]'``; ``jarvismem mcp``).
"""
