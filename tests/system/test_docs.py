"""The README documents every setting and every CLI command it promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.cli import build_parser
from jarvismem.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(n.upper() for n in Settings.model_fields))
def test_every_setting_is_in_the_readme_configuration_table(name: str) -> None:
    assert f"| `{name}` |" in README


def test_every_cli_command_is_in_the_readme() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    commands = set(sub.choices)  # type: ignore[attr-defined]
    assert commands, "the CLI has no commands"
    missing = [c for c in sorted(commands) if f"jarvismem {c}" not in README]
    assert missing == []
