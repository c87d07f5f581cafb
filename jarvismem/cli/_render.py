"""Compatibility re-export: the renderings moved to :mod:`jarvismem.render`.

Kept only until ``cli/inspect.py`` imports :mod:`jarvismem.render` directly;
then this module is deleted.
"""

from jarvismem.render import (
    render_athena_context,
    render_bundle,
    render_entry,
    render_health,
    render_hits,
    render_spaces,
)

__all__ = [
    "render_athena_context",
    "render_bundle",
    "render_entry",
    "render_health",
    "render_hits",
    "render_spaces",
]
