"""LangGraph on jarvismem: a checkpointer on plain Redis 7 (no modules).

* :class:`JarvisMemSaver`: a ``BaseCheckpointSaver`` (async first); every key
  of a thread shares one hash tag, so it runs on Redis Cluster too.

Needs the ``langgraph`` extra: ``pip install 'jarvismem[langgraph]'``.
"""

from jarvismem.integrations.langgraph.saver import JarvisMemSaver

__all__ = ["JarvisMemSaver"]
