"""Recall: facts remembered across turns and sessions, recalled into the prompt by policy.

* :class:`MemoryPolicy`: whether/how recall and capture happen.
* Models: :class:`MemoryEntry`, :class:`RecallRequest`, :class:`WriteRequest`,
  :class:`RecallResult` (with its :data:`RecallSource`).
* Stores (:class:`RecallStore` protocol): :class:`InMemoryRecallStore`,
  :class:`RedisRecallStore` (BM25, the embedded default), :class:`AthenaRecallStore`.
* Prompt: :func:`build_messages`, :func:`preflight`, :func:`recall_for_turn`,
  :func:`capture_conversation`, :func:`conversation_capture_text`.
"""

from jarvismem.recall.athena_store import AthenaRecallStore, similarity_from_distance
from jarvismem.recall.models import (
    MemoryEntry,
    RecallRequest,
    RecallResult,
    RecallSource,
    WriteRequest,
)
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.recall.prompt import (
    Preflight,
    build_messages,
    capture_conversation,
    conversation_capture_text,
    preflight,
    recall_for_turn,
)
from jarvismem.recall.redis_store import RedisRecallStore
from jarvismem.recall.stores import DeletableRecallStore, InMemoryRecallStore, RecallStore

__all__ = [
    "AthenaRecallStore",
    "DeletableRecallStore",
    "InMemoryRecallStore",
    "MemoryEntry",
    "MemoryPolicy",
    "Preflight",
    "RecallRequest",
    "RecallResult",
    "RecallSource",
    "RecallStore",
    "RedisRecallStore",
    "WriteRequest",
    "build_messages",
    "capture_conversation",
    "conversation_capture_text",
    "preflight",
    "recall_for_turn",
    "similarity_from_distance",
]
