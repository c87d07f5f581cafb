"""Cognitive spaces: an agent's beliefs (``world``), agenda (``tasks``) and custom spaces.

:class:`MemoryContainer` is the pure model; :class:`SpacesStore` persists it in
Redis with a compare-and-set per space.
"""

from jarvismem.errors import SpaceItemNotFoundError
from jarvismem.spaces.models import (
    RESERVED_SPACES,
    TASKS,
    WORLD,
    MemoryContainer,
    Space,
    SpaceData,
    SpaceKind,
)
from jarvismem.spaces.store import SpacesStore

__all__ = [
    "RESERVED_SPACES",
    "TASKS",
    "WORLD",
    "MemoryContainer",
    "Space",
    "SpaceData",
    "SpaceItemNotFoundError",
    "SpaceKind",
    "SpacesStore",
]
