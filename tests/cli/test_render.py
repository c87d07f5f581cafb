"""``jarvismem.cli._render`` only re-exports :mod:`jarvismem.render` (kept until
``cli/inspect.py`` imports the renderings from there); the renderings themselves
are tested in tests/test_render.py."""

from __future__ import annotations

import jarvismem.render
from jarvismem.cli import _render


def test_every_name_is_the_rendering_itself() -> None:
    assert _render.__all__
    for name in _render.__all__:
        assert getattr(_render, name) is getattr(jarvismem.render, name)
