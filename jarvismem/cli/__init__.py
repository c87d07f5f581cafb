"""The ``jarvismem`` command line: demo, inspection, export/import, setup, the MCP server.

``main(argv)`` parses the arguments, runs one command on a fresh event loop
and returns its exit code: 0 success, 1 a failure the command detected (an
unreachable backend, a failed verification), 2 bad usage or configuration,
130 interrupted. Expected failures print one ``jarvismem: error: ...`` line on
stderr and never a traceback (``-vv`` shows one for debugging). Failures are
told apart by :mod:`jarvismem.errors` class alone; any other exception is a
bug and says so, on one line too. Output cut short by its reader (``jarvismem
tail | head``) ends the command quietly with 141 (128 + SIGPIPE), as a Unix tool
killed by SIGPIPE would report.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from jarvismem import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see jarvismem/__init__)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import NoReturn

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away."""

COMMAND_MODULES = (
    "demo",
    "inspect",
    "athena",
    "transfer",
    "migrate",
    "setup",
    "bench",
    "manage",
    "server",
    "mcp",
    "ui",
    "completion",
)
"""The modules under jarvismem.cli that register commands, in the order ``--help`` lists them."""


def _command_modules() -> list[ModuleType]:
    """Import the command modules. Not at import time: they bring the runtime and
    its clients, which ``--version`` and a bare ``import jarvismem.cli`` do not need."""
    return [importlib.import_module(f"jarvismem.cli.{name}") for name in COMMAND_MODULES]


def _common_options() -> argparse.ArgumentParser:
    """Options accepted before and after the command name.

    Defaults are SUPPRESS so a value given after the command is not reset by
    the parent parser's default (``jarvismem --json status`` and ``jarvismem
    status --json`` both work).
    """
    common = argparse.ArgumentParser(add_help=False)
    sup = argparse.SUPPRESS
    common.add_argument(
        "--env-file",
        metavar="PATH",
        default=sup,
        help="settings file to read (default: .env if present; /dev/null reads none)",
    )
    common.add_argument(
        "--namespace", default=sup, help="tenant namespace (overrides JARVISMEM_NAMESPACE)"
    )
    common.add_argument(
        "--redis-url",
        metavar="URL",
        default=sup,
        help="Redis server to use (overrides REDIS_URL; for init: the value to write)",
    )
    common.add_argument("--json", action="store_true", default=sup, help="machine-readable output")
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=sup,
        help="more log output on stderr (-v info, -vv debug)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every command registers its own sub-parser)."""
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="jarvismem",
        description="Tiered memory for AI agent kernels: inspect, export, import, demo, MCP.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"jarvismem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _command_modules():
        module.register(sub, common)
    # `jarvismem COMMAND --help` opens with what the command list says of it.
    for choice in sub._choices_actions:
        command_parser = sub.choices[choice.dest]
        if command_parser.description is None:
            command_parser.description = choice.help
    # `completion` generates its script from this very parser.
    parser.set_defaults(root_parser=parser)
    return parser


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-parser of every command of ``parser``, by command name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_strings(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """``parser``'s option strings, and those of them that take a value."""
    options: set[str] = set()
    with_value: set[str] = set()
    for action in parser._actions:
        options.update(action.option_strings)
        if action.option_strings and action.nargs != 0:
            with_value.update(action.option_strings)
    return options, with_value


def _unknown_option(argv: Sequence[str], parser: argparse.ArgumentParser) -> None:
    """Report the first unknown ``--option`` of ``argv`` before argparse parses it.

    argparse checks required options before it reports unknown ones, so a typo
    (``--workfow W``) would otherwise read "the following arguments are
    required: --workflow". Only long options are checked; a unique prefix of a
    known one is accepted, as argparse accepts it.
    """
    commands = command_parsers(parser)
    current = parser
    options, with_value = _option_strings(parser)
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token == "--":
            return
        if token in commands:  # a command, or an action of one (`outbox replay`)
            current = commands[token]
            commands = command_parsers(current)
            options, with_value = _option_strings(current)
            continue
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        matches = [o for o in options if o.startswith(name)]
        if name in options or len(matches) == 1:
            exact = name if name in options else matches[0]
            skip = "=" not in token and exact in with_value
            continue
        if len(matches) > 1:
            return  # ambiguous: argparse says which options it could be
        import difflib  # only when an option is misspelt

        close = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        current.error(f"unrecognized argument: {name}{hint}")


class _NotVersion(Exception):
    """The arguments are not a plain ``--version`` request (see :func:`_asks_for_version`)."""


class _VersionProbe(argparse.ArgumentParser):
    """The root options alone, raising instead of printing a usage error."""

    def error(self, message: str) -> NoReturn:
        raise _NotVersion(message)


def _asks_for_version(argv: Sequence[str]) -> bool:
    """True when the full parser would print the version: ``--version`` among the
    options before the command name, with no option it does not know.

    The probe knows the same root options (abbreviations are resolved the same
    way) and stops at the first positional, so ``jarvismem status --version``
    still reaches the full parser and its error.
    """
    probe = _VersionProbe(prog="jarvismem", add_help=False, parents=[_common_options()])
    probe.add_argument("--version", action="store_true", default=False)
    probe.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        args, unknown = probe.parse_known_args(list(argv))
    except _NotVersion:
        return False
    return bool(args.version) and not unknown


def _configure_logging(verbosity: int) -> None:
    import logging  # not at the top: `--version` answers without it

    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("jarvismem: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Client libraries are chatty at INFO; keep them at WARNING unless -vv.
    for noisy in ("httpx", "httpcore", "azure", "asyncio", "fakeredis"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= 2 else logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _asks_for_version(argv):
        # Answered before the command modules (and the runtime they import) load.
        print(f"jarvismem {__version__}")
        return EXIT_OK
    import asyncio

    from jarvismem.cli._context import CliContext, resolve_env_file
    from jarvismem.cli._output import Output, error_line
    from jarvismem.errors import ConfigError, InvalidIdError, JarvisMemError, WorkflowNotFoundError

    parser = build_parser()
    try:
        _unknown_option(argv, parser)
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help/--version/usage errors
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    verbosity = int(getattr(args, "verbose", 0) or 0)
    _configure_logging(verbosity)
    out = Output(bool(getattr(args, "json", False)))
    try:
        ctx = CliContext(args, out, resolve_env_file(getattr(args, "env_file", None)))
        code: int = asyncio.run(args.handler(ctx))
        _flush_stdout()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        # Ctrl-C is the normal way to end `tail --follow`; elsewhere it is an interruption.
        code = int(getattr(args, "interrupt_exit", EXIT_INTERRUPTED))
        if code:
            error_line("interrupted")
        return code
    except (ConfigError, InvalidIdError) as exc:
        _report(_describe(exc), verbosity)
        return EXIT_USAGE
    except WorkflowNotFoundError as exc:
        if out.json_mode:
            # Scripts read stdout: the refusal is a JSON object there too.
            out.result(
                {
                    "error": "workflow_not_found",
                    "message": str(exc),
                    "workflow_id": exc.workflow_id,
                    "namespace": exc.namespace,
                    "did_you_mean": list(exc.suggestions),
                },
                str,
            )
        _report(_describe(exc), verbosity)
        return EXIT_FAILED
    except JarvisMemError as exc:
        _report(_describe(exc), verbosity)
        return EXIT_FAILED
    except OSError as exc:
        # The one foreign error a command expects: it reads and writes local
        # files itself (export --output, import, init), and a missing folder or
        # a full disk is the user's to fix, not a bug.
        _report(f"{type(exc).__name__}: {_describe(exc)}", verbosity)
        return EXIT_FAILED
    except Exception as exc:
        # Backends translate their clients' errors into jarvismem.errors, so
        # anything else reaching here is a bug: still one line, but named as one.
        _report(
            f"internal error: {type(exc).__name__}: {_describe(exc)} "
            "(a bug; -vv shows the traceback)",
            verbosity,
        )
        return EXIT_FAILED


def _flush_stdout() -> None:
    """Flush stdout now, so a closed pipe is seen here rather than at interpreter exit."""
    sys.stdout.flush()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and Python's final flush
    would otherwise print "Exception ignored ... BrokenPipeError" on stderr."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (tests, StringIO)
        pass


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _report(text: str, verbosity: int) -> None:
    """One redacted error line on stderr, and the traceback under ``-vv``."""
    from jarvismem.cli._output import error_line
    from jarvismem.redaction import default_redactor

    if verbosity >= 2:
        import logging

        logging.getLogger("jarvismem.cli").exception("command failed")
    error_line(default_redactor(text))
