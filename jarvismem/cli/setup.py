"""``jarvismem init``: write a ``.env`` from flags or answers, and say how to start backends."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jarvismem.cli._context import CliContext
from jarvismem.errors import ConfigError
from jarvismem.settings import Settings, load_settings

# (flag dest, env variable, prompt, secret)
_FIELDS: tuple[tuple[str, str, str, bool], ...] = (
    ("redis_url", "REDIS_URL", "Redis URL (empty: the embedded server, persistent)", True),
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


_BACKENDS = ("local", "azure", "none")

# Prompt defaults: flag dest -> the setting's own default.
_DEFAULTS = {
    "storage_backend": _setting_default("storage_backend"),
    "storage_path": _setting_default("storage_base_path"),
    "llm_model": _setting_default("llm_model"),
}


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``init`` to the ``jarvismem`` parser (``--redis-url`` is the global flag)."""
    p = sub.add_parser(
        "init",
        parents=[common],
        help="write a .env (flags, prompts, or answers piped one per line)",
        description="Writes a settings file. Values come from flags; anything not given is "
        "asked (prompts on stderr; piped stdin answers one prompt per line). --redis-url "
        "gives the REDIS_URL to write. With --non-interactive nothing is asked.",
    )
    p.add_argument(
        "--storage-backend", choices=_BACKENDS, help="blob storage: local, azure or none"
    )
    p.add_argument("--storage-path", metavar="PATH", help="folder of local blob storage")
    p.add_argument(
        "--azure-connection-string",
        metavar="STRING",
        help="Azure Blob connection string (needed with --storage-backend azure)",
    )
    p.add_argument("--athena-url", metavar="URL", help="Athena memory service URL")
    p.add_argument(
        "--llm-base-url", metavar="URL", help="OpenAI-compatible LLM base URL (summaries)"
    )
    p.add_argument("--llm-model", metavar="NAME", help="LLM model name")
    p.add_argument("--output", metavar="PATH", default=".env", help="file to write (default .env)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument(
        "--non-interactive",
        action="store_true",
        help="never prompt: flags and defaults only",
    )
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


class _Answers:
    """Where answers come from: a terminal (re-asks a bad answer) or piped stdin
    (one line per prompt; a bad or missing answer is an error at once, since
    re-asking would read the next prompt's line). Prompts go to stderr, so
    stdout holds only the result."""

    def __init__(self) -> None:
        self.tty = sys.stdin.isatty()

    def ask(self, prompt: str, default: str, *, secret: bool) -> str:
        shown = f" [{default}]" if default else ""
        text = f"{prompt}{shown}: "
        if self.tty and secret:
            answer = getpass.getpass(text, stream=sys.stderr)
        else:
            sys.stderr.write(text)
            sys.stderr.flush()
            line = sys.stdin.readline()
            if not line:
                sys.stderr.write("\n")
                raise ConfigError(
                    f"stdin ended before an answer to {prompt!r}: pipe one line per prompt, "
                    "or pass flags with --non-interactive"
                )
            if not self.tty:
                sys.stderr.write("\n")  # the answer is not echoed: end the prompt's line
            answer = line
        return answer.strip() or default

    def refuse(self, message: str) -> None:
        """A bad answer: say so and re-ask on a terminal, or fail when piped."""
        if not self.tty:
            raise ConfigError(message)
        sys.stderr.write(f"{message}\n")


def _wanted(dest: str, values: dict[str, str]) -> bool:
    """Whether ``dest`` is worth asking, given the answers so far."""
    backend = values.get("STORAGE_BACKEND")
    if dest == "storage_path":
        return backend == "local"
    if dest == "azure_connection_string":
        return backend == "azure"
    if dest == "llm_model":
        return bool(values.get("LLM_BASE_URL"))
    return True


def _collect(args: argparse.Namespace, answers: _Answers | None) -> dict[str, str]:
    """The values to write: flags first, then answers (``answers`` None: never ask)."""
    values: dict[str, str] = {}
    for dest, env, prompt, secret in _FIELDS:
        given = getattr(args, dest, None)
        if given is None and answers is not None and _wanted(dest, values):
            default = _DEFAULTS.get(dest, "")
            while True:
                given = answers.ask(prompt, default, secret=secret)
                if dest == "storage_backend" and given not in _BACKENDS:
                    answers.refuse(f"STORAGE_BACKEND must be one of {', '.join(_BACKENDS)}")
                elif dest == "azure_connection_string" and not given:
                    answers.refuse(_NEEDS_AZURE)
                else:
                    break
        if given is None and _wanted(dest, values):
            given = _DEFAULTS.get(dest, "")
        values[env] = str(given or "")
    if values.get("STORAGE_BACKEND") == "azure" and not values.get(
        "AZURE_STORAGE_CONNECTION_STRING"
    ):
        raise ConfigError(_NEEDS_AZURE)
    return values


_NEEDS_AZURE = (
    "STORAGE_BACKEND=azure needs an Azure Blob connection string "
    "(--azure-connection-string, or answer the prompt)"
)


def _check(values: dict[str, str]) -> None:
    """Refuse values the runtime would refuse, before writing the file."""
    overrides: dict[str, Any] = {"_env_file": None}
    for _dest, env, _prompt, _secret in _FIELDS:
        if values.get(env):
            overrides[env.lower()] = values[env]
    load_settings(**overrides)


COMPOSE_REDIS_PORT = 6380
"""Where docker-compose.yml publishes Redis on this machine (its ``REDIS_HOST_PORT``
default): not 6379, which a locally installed redis-server usually holds."""
# A URL without a port means its scheme's default one.
_SCHEME_PORTS = {"redis": 6379, "rediss": 6379, "http": 80, "https": 443}
COMPOSE_AZURITE_PORT = 10000
COMPOSE_ATHENA_PORT = 8080


def _local(url: str, port: int | None = None) -> bool:
    """Whether ``url`` names this machine (on ``port``, when given)."""
    try:
        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            return False
        return port is None or (parts.port or _SCHEME_PORTS.get(parts.scheme)) == port
    except ValueError:
        return False


def next_steps(values: dict[str, str], output: str) -> tuple[list[str], list[str]]:
    """What to run after writing ``output``, and notes on the choices made.

    ``docker compose`` is suggested only for the services the file points at
    on this machine, on the ports compose publishes them on (Redis on 6380,
    Azurite on 10000, Athena on 8080); a local Redis URL on another port gets a
    note naming the compose one instead. ``--env-file`` is added when the file
    is not ``./.env``.
    """
    services = []
    notes = []
    redis_url = values.get("REDIS_URL", "")
    if redis_url and _local(redis_url, COMPOSE_REDIS_PORT):
        services.append("redis")
    elif redis_url and _local(redis_url):
        # Not where compose publishes: a redis-server of this machine, or a mistake.
        notes.append(
            "REDIS_URL points at a Redis of this machine that is not the one of "
            "`docker compose up -d redis`, which listens on "
            f"redis://127.0.0.1:{COMPOSE_REDIS_PORT}/0; start that Redis yourself, or "
            "write that URL instead to use compose"
        )
    azure = values.get("AZURE_STORAGE_CONNECTION_STRING", "")
    azurite = (f"127.0.0.1:{COMPOSE_AZURITE_PORT}", f"localhost:{COMPOSE_AZURITE_PORT}")
    if values.get("STORAGE_BACKEND") == "azure" and any(a in azure for a in azurite):
        services.append("azurite")
    steps = []
    if services:
        steps.append(f"docker compose up -d {' '.join(services)}  # from a jarvismem checkout")
    if values.get("ATHENA_URL") and _local(values["ATHENA_URL"], COMPOSE_ATHENA_PORT):
        steps.append("docker compose --profile athena up -d  # Athena and its datastores")
    default_file = Path(output).resolve() == Path(".env").resolve()
    prefix = "jarvismem" if default_file else f"jarvismem --env-file {shlex.quote(output)}"
    steps += [f"{prefix} status", f"{prefix} demo"]
    if not values.get("REDIS_URL"):
        notes.append(
            "REDIS_URL is not set: jarvismem runs its embedded Redis server, data in "
            "EMBEDDED_REDIS_PATH (.jarvismem/redis); `jarvismem server stop` stops it"
        )
    if values.get("STORAGE_BACKEND") == "none":
        notes.append("STORAGE_BACKEND=none: no scratchpad and no long-term summary")
    return steps, notes


async def init(ctx: CliContext) -> int:
    """Write the file (never over an existing one without ``--force``) and print next steps."""
    a = ctx.args
    target = Path(a.output)
    if await asyncio.to_thread(target.exists) and not a.force:
        raise ConfigError(f"{target} already exists; pass --force to overwrite it")
    answers = None if a.non_interactive else _Answers()
    values = await asyncio.to_thread(_collect, a, answers)
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
    steps, notes = next_steps(values, a.output)
    data = {
        "written": str(target),
        "variables": sorted(k for k, v in values.items() if v),
        "next_steps": steps,
        "notes": notes,
    }

    def human(d: dict[str, Any]) -> str:
        lines = [f"wrote {d['written']} ({', '.join(d['variables']) or 'defaults only'})"]
        lines += [f"note: {note}" for note in d["notes"]]
        lines += ["", "Next steps:"]
        lines += [f"  {step}" for step in d["next_steps"]]
        return "\n".join(lines)

    ctx.out.result(data, human)
    return 0
