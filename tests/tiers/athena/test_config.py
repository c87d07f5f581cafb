"""AthenaTierConfig: defaults, the mapping from settings, single-field replacement."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvismem.defaults import CONTEXT_TTL_SECONDS
from jarvismem.settings import Settings
from jarvismem.tiers.athena.config import AthenaTierConfig


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings from arguments alone, whatever the developer has exported."""
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name, raising=False)


def test_defaults_match_the_settings_defaults() -> None:
    # A memory built without settings behaves as one built from default settings.
    from_settings = AthenaTierConfig.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]
    plain = AthenaTierConfig()
    assert from_settings.tenant_id == plain.tenant_id
    assert from_settings.user_id == plain.user_id
    assert from_settings.outbox_dir == plain.outbox_dir
    assert from_settings.outbox_max_entries == plain.outbox_max_entries
    assert from_settings.outbox_max_bytes == plain.outbox_max_bytes
    assert from_settings.outbox_fsync == plain.outbox_fsync
    assert plain.dedupe_ttl == from_settings.dedupe_ttl == CONTEXT_TTL_SECONDS


def test_from_settings_carries_tenant_ttl_and_outbox(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        athena_tenant_id="acme",
        athena_user_id="alice",
        outbox_path=tmp_path,
        outbox_max_entries=10,
        outbox_fsync=True,
    )
    config = AthenaTierConfig.from_settings(settings)
    assert (config.tenant_id, config.user_id) == ("acme", "alice")
    assert config.dedupe_ttl == settings.ttl_seconds
    assert config.outbox_dir == tmp_path
    assert config.outbox_max_entries == 10 and config.outbox_fsync is True


def test_replace_changes_named_fields_only() -> None:
    base = AthenaTierConfig(tenant_id="acme")
    changed = base.replace(retry_base=0.01)
    assert changed.retry_base == 0.01 and changed.tenant_id == "acme"
    assert base.retry_base != 0.01  # frozen: the original is untouched
    assert base.replace() is base
    with pytest.raises(TypeError):
        base.replace(no_such_field=1)
