"""LangGraph on jarvismem: a checkpointer and a long-term store on plain Redis 7.

* :class:`JarvisMemSaver`: a ``BaseCheckpointSaver`` (async first); every key
  of a thread shares one hash tag, so it runs on Redis Cluster too.
* :class:`JarvisMemStore`: a ``BaseStore`` whose items live in Redis and whose
  text is searched through jarvismem's recall tier.

Needs the ``langgraph`` extra: ``pip install 'jarvismem[langgraph]'``.
"""

from jarvismem.integrations.langgraph.saver import JarvisMemSaver
from jarvismem.integrations.langgraph.store import JarvisMemStore, StoreIndex

__all__ = ["JarvisMemSaver", "JarvisMemStore", "StoreIndex"]
