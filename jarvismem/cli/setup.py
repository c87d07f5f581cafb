"""``jarvismem init``: write a ``.env`` from flags or answers, and say how to start backends."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError
from jarvismem.settings import Settings, load_settings

# (flag dest, env variable, prompt, secret)
_FIELDS: tuple[tuple[str, str, str, bool], ...] = (
    ("redis_url", "REDIS_URL", "Redis URL (empty: embedded, ephemeral)", True),
    ("storage_backend", "STORAGE_BACKEND", "Blob storage backend: local | azure | none", False),
    ("storage_path", "STORAGE_BASE_PATH", "Local blob folder", False),
    (
        "azure_connection_string",
        "AZURE_STORAGE_CONNECTION_STRING",
        "Azure Blob connection string",
        True,
    ),
    ("athena_url", "ATHENA_URL", "Athena URL (empty: no Athena)", False),
    ("llm_base_url", "LLM_BASE_URL", "OpenAI-compatible LLM base URL (empty: extractive)", False),
    ("llm_model", "LLM_MODEL", "LLM model name", False),
)


def _setting_default(name: str) -> str:
    """The default of setting ``name``, as Settings defines it (never a second copy)."""
    return str(Settings.model_fields[name].default)


# Prompt defaults: flag dest -> the setting's own default.
_DEFAULTS = {
    "storage_backend": _setting_default("storage_backend"),
    "storage_path": _setting_default("storage_base_path"),
    "llm_model": _setting_default("llm_model"),
}


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``init`` to the ``jarvismem`` parser."""
    p = sub.add_parser("init", parents=[common], help="write a .env (flags or prompts)")
    p.add_argument("--redis-url")
    p.add_argument("--storage-backend", choices=["local", "azure", "none"])
    p.add_argument("--storage-path")
    p.add_argument("--azure-connection-string")
    p.add_argument("--athena-url")
    p.add_argument("--llm-base-url")
    p.add_argument("--llm-model")
    p.add_argument("--output", default=".env", help="file to write (default .env)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument("--non-interactive", action="store_true", help="never prompt")
    p.set_defaults(handler=init)


def _quote(value: str) -> str:
    # dotenv: quote values holding spaces, '#' or quotes so they read back unchanged.
    if any(c in value for c in " #'\"\t"):
        return "'" + value.replace("'", "\\'") + "'"
    return value


def render_env(values: dict[str, str]) -> str:
    """The ``.env`` text for ``values`` (env variable -> value; empty ones left out)."""
    lines = [
        "# jarvismem settings, written by `jarvismem init`. Every variable is documented",
        "# in .env.example; anything unset keeps its default.",
    ]
    for _dest, env, prompt, _secret in _FIELDS:
        value = values.get(env, "")
        if value:
            lines.append(f"# {prompt}")
            lines.append(f"{env}={_quote(value)}")
    return "\n".join(lines) + "\n"


def _collect(args: argparse.Namespace) -> dict[str, str]:
    interactive = not args.non_interactive and sys.stdin.isatty()
    values: dict[str, str] = {}
    for dest, env, prompt, secret in _FIELDS:
        given = getattr(args, dest)
        if given is None and interactive:
            if dest == "azure_connection_string" and values.get("STORAGE_BACKEND") != "azure":
                continue
            default = _DEFAULTS.get(dest, "")
            shown = f" [{default}]" if default else ""
            if secret:
                answer = getpass.getpass(f"{prompt}{shown}: ")
            else:
                answer = input(f"{prompt}{shown}: ")
            given = answer.strip() or default
        if given is None:
            given = _DEFAULTS.get(dest, "")
        values[env] = str(given)
    return values


def _check(values: dict[str, str]) -> None:
    """Refuse values the runtime would refuse, before writing the file."""
    overrides: dict[str, Any] = {"_env_file": None}
    for _dest, env, _prompt, _secret in _FIELDS:
        if values.get(env):
            overrides[env.lower()] = values[env]
    load_settings(**overrides)


async def init(ctx: CliContext) -> int:
    """Write the file (never over an existing one without ``--force``) and print next steps."""
    a = ctx.args
    target = Path(a.output)
    if await asyncio.to_thread(target.exists) and not a.force:
        raise ConfigError(f"{target} already exists; pass --force to overwrite it")
    values = await asyncio.to_thread(_collect, a)
    _check(values)
    text = render_env(values)

    def write() -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        # Owner-only: the file may hold credentials.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)

    await asyncio.to_thread(write)
    athena = bool(values.get("ATHENA_URL"))
    data = {
        "written": str(target),
        "variables": sorted(k for k, v in values.items() if v),
        "next_steps": [
            "docker compose up -d" + ("  # Redis (with AOF) and Azurite" if not athena else ""),
            *(
                ["docker compose --profile athena up -d  # Athena and its datastores"]
                if athena
                else []
            ),
            "jarvismem status",
            "jarvismem demo",
        ],
    }

    def human(d: dict[str, Any]) -> str:
        lines = [
            f"wrote {d['written']} ({', '.join(d['variables']) or 'defaults only'})",
            "",
            "Start the backends (Docker) and check them:",
        ]
        lines += [f"  {step}" for step in d["next_steps"]]
        if not athena:
            lines.append(
                "  (Athena too: set ATHENA_URL, then `docker compose --profile athena up -d`)"
            )
        return "\n".join(lines)

    ctx.out.result(data, human)
    return 0
