"""What every command needs: settings from ``--env-file``/flags, a runtime, output."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvismem.cli._output import Output
from jarvismem.errors import ConfigError
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings


@dataclass
class CliContext:
    """Per-invocation state handed to every command.

    ``args``: the parsed arguments; ``out``: where results go; ``env_file``:
    the ``.env`` file read (None when it does not exist or is ``/dev/null``).
    """

    args: argparse.Namespace
    out: Output
    env_file: Path | None

    def settings(self, **overrides: Any) -> Settings:
        """Settings from the environment and ``--env-file``, with ``--namespace`` and
        ``--redis-url`` applied."""
        namespace = getattr(self.args, "namespace", None)
        if namespace:
            overrides.setdefault("jarvismem_namespace", namespace)
        redis_url = getattr(self.args, "redis_url", None)
        if redis_url:
            overrides.setdefault("redis_url", redis_url)
        return load_settings(_env_file=self.env_file, **overrides)

    @contextlib.asynccontextmanager
    async def runtime(self, settings: Settings | None = None) -> AsyncIterator[MemoryRuntime]:
        """A connected runtime, closed on exit.

        One command, one connect attempt: a person at a prompt wants "Redis is
        not running" now, not after seconds of retry warnings. An explicitly
        set ``REDIS_CONNECT_RETRIES`` still applies (scripts racing a server
        that is starting).
        """
        settings = settings or self.settings()
        explicit = "redis_connect_retries" in settings.model_fields_set
        rt = await MemoryRuntime.from_env(
            settings, require_redis=True, connect_retries=None if explicit else 0
        )
        try:
            yield rt
        finally:
            await rt.close()

    @contextlib.asynccontextmanager
    async def probe_runtime(self, settings: Settings | None = None) -> AsyncIterator[MemoryRuntime]:
        """A runtime that starts even when a backend is down: for ``status``.

        ``status`` must report an unreachable backend, not die trying to
        connect to it, so Redis is tried once and the runtime starts degraded.
        The runtime's "starting degraded" warning is not raised (unless ``-v``):
        ``status`` reports each backend's state itself, on stdout.
        """
        rt = await MemoryRuntime.from_env(
            settings or self.settings(),
            require_redis=False,
            warn_degraded=bool(getattr(self.args, "verbose", 0)),
        )
        try:
            yield rt
        finally:
            await rt.close()


def resolve_env_file(value: str | None) -> Path | None:
    """The ``.env`` to read: ``value`` (default ``.env``) if it exists, else None.

    An explicitly named file that does not exist is a :class:`ConfigError`;
    the default ``.env`` may be absent.
    """
    if value is None:
        default = Path(".env")
        return default if default.is_file() else None
    path = Path(value)
    if value == os.devnull:
        return None
    if not path.exists():
        raise ConfigError(f"--env-file {value}: no such file")
    return path
