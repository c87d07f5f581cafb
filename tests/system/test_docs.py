"""The docs document every setting (docs/configuration.md) and every CLI command (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.cli import build_parser
from jarvismem.settings import SETTING_GROUPS, Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text(encoding="utf-8")
CLI = (DOCS / "cli.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(n.upper() for n in Settings.model_fields))
def test_every_setting_is_in_the_configuration_table(name: str) -> None:
    assert f"| `{name}` |" in CONFIGURATION


@pytest.mark.parametrize("group", list(SETTING_GROUPS))
def test_every_setting_is_listed_under_its_group(group: str) -> None:
    section = CONFIGURATION.split(f"(`settings.{group}`)\n", 1)[1].split("\n### ", 1)[0]
    for name, attribute in SETTING_GROUPS[group].items():
        if attribute in Settings.model_fields:
            assert f"| `{attribute.upper()}` | `{group}.{name}` |" in section
        else:
            assert f"`{group}.{name}`" in section  # a derived value, named beside its setting


def test_every_cli_command_is_in_the_cli_reference() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    commands = set(sub.choices)  # type: ignore[attr-defined]
    assert commands, "the CLI has no commands"
    missing = [c for c in sorted(commands) if f"jarvismem {c}" not in CLI]
    assert missing == []
