"""jarvismem: an asyncio tiered-memory runtime for AI agent kernels."""

from jarvismem.errors import JarvisMemError
from jarvismem.keys import KeySpace, validate_id
from jarvismem.settings import Settings, load_settings

__all__ = ["JarvisMemError", "KeySpace", "Settings", "load_settings", "validate_id"]
__version__ = "0.1.0"
