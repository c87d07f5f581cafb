"""The docs document every setting (docs/configuration.md) and every CLI command (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.cli import build_parser
from jarvismem.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text(encoding="utf-8")
CLI = (DOCS / "cli.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(n.upper() for n in Settings.model_fields))
def test_every_setting_is_in_the_configuration_table(name: str) -> None:
    assert f"| `{name}` |" in CONFIGURATION


def test_every_cli_command_is_in_the_cli_reference() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    commands = set(sub.choices)  # type: ignore[attr-defined]
    assert commands, "the CLI has no commands"
    missing = [c for c in sorted(commands) if f"jarvismem {c}" not in CLI]
    assert missing == []
