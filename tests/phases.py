"""The suite's two phases: most tests in parallel (pytest-xdist), the ``serial`` ones after.

A test marked ``@pytest.mark.serial`` cannot share the machine with other tests (it
measures contention, or loads the cores on purpose). ``scripts/test`` runs pytest
twice with the same arguments:

1. ``JARVISMEM_TEST_PHASE=parallel`` with ``-n``: every selected test but the serial
   ones, which are deselected and their node ids written to the file named by
   ``JARVISMEM_SERIAL_LIST``;
2. ``JARVISMEM_TEST_PHASE=serial`` without xdist, only when that file names a test:
   the serial tests alone, collecting only the files that hold them.

Without ``JARVISMEM_TEST_PHASE`` (plain ``pytest``) every selected test runs, serial
ones included, as before.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest

PHASE_ENV = "JARVISMEM_TEST_PHASE"
LIST_ENV = "JARVISMEM_SERIAL_LIST"
PARALLEL = "parallel"
SERIAL = "serial"
MARKER = "serial"


_PHASE_KEY = pytest.StashKey[str | None]()
_LIST_KEY = pytest.StashKey[Path | None]()


def configure(config: pytest.Config) -> None:
    """``pytest_configure`` (run first): read the phase and the list's path into ``config``.

    The serial phase writes a ``--junitxml`` report beside the parallel one's
    (``report.xml`` → ``report.serial.xml``), so this must run before junitxml's hook.

    A process that runs tests (an xdist worker, or a pytest without workers) also
    removes both variables from its environment: a test that runs pytest or
    scripts/test in a subprocess must not inherit this run's phase, nor write its list.
    The xdist controller keeps them, as the workers it starts inherit its environment.
    """
    value = os.environ.get(PHASE_ENV, "")
    if value not in ("", PARALLEL, SERIAL):
        raise pytest.UsageError(f"{PHASE_ENV} must be {PARALLEL!r} or {SERIAL!r}, got {value!r}")
    listing = os.environ.get(LIST_ENV)
    config.stash[_PHASE_KEY] = value or None
    config.stash[_LIST_KEY] = Path(listing) if listing else None
    xmlpath = getattr(config.option, "xmlpath", None)
    if value == SERIAL and xmlpath:
        # Both phases get the same --junitxml; the second would overwrite the first's.
        path = Path(xmlpath)
        config.option.xmlpath = str(path.with_name(f"{path.stem}.{SERIAL}{path.suffix}"))
    controller = not hasattr(config, "workerinput") and bool(
        getattr(config.option, "numprocesses", None)
    )
    if not controller:
        os.environ.pop(PHASE_ENV, None)
        os.environ.pop(LIST_ENV, None)


def phase(config: pytest.Config) -> str | None:
    """The phase this pytest runs (``parallel``, ``serial``), or None for all tests."""
    return config.stash.get(_PHASE_KEY, None)


def is_serial(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def split(
    items: list[pytest.Item], current: str | None
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)`` for the phase ``current``."""
    if current is None:
        return items, []
    wanted = current == SERIAL
    kept = [i for i in items if is_serial(i) == wanted]
    return kept, [i for i in items if is_serial(i) != wanted]


def write_list(path: Path, node_ids: list[str]) -> None:
    """Write the serial tests' ids; atomic, as every xdist worker writes the same list."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{n}\n" for n in node_ids), encoding="utf-8")
    tmp.replace(path)


@cache
def listed_files(path: Path, rootdir: Path) -> frozenset[Path]:
    """The test files that hold the listed tests (absolute); read once per run."""
    ids = path.read_text(encoding="utf-8").split()
    return frozenset((rootdir / n.split("::", 1)[0]).resolve() for n in ids)


def modify_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``pytest_collection_modifyitems``: keep this phase's tests, note the serial ones."""
    current = phase(config)
    kept, dropped = split(items, current)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    listing = config.stash.get(_LIST_KEY, None)
    if current == PARALLEL and listing is not None:
        write_list(listing, [i.nodeid for i in dropped])


def ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``pytest_ignore_collect``: in the serial phase, skip files with no serial test."""
    listing = config.stash.get(_LIST_KEY, None)
    if phase(config) != SERIAL or listing is None or not listing.is_file():
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    files = listed_files(listing, config.rootpath)
    return True if collection_path.resolve() not in files else None


WORKERS_ENV = "JARVISMEM_TEST_WORKERS"
WORKERS_PER_CORE = 3
"""Most tests wait on servers and subprocesses, so a core keeps several workers busy."""
FILES_PER_WORKER = 4
"""A worker costs a pytest start-up (seconds): a selection of a few files runs in-process."""


def selected_test_files(config: pytest.Config) -> int:
    """How many test files the command line's paths (or ``testpaths``) hold."""
    count = 0
    for arg in config.args:
        path = config.invocation_params.dir / arg.split("::", 1)[0]
        if path.is_dir():
            count += sum(1 for _ in path.rglob("test_*.py"))
        elif path.is_file():
            count += 1
    return count


def auto_workers(config: pytest.Config) -> int:
    """``pytest_xdist_auto_num_workers`` (``-n auto``): ``JARVISMEM_TEST_WORKERS`` when
    set, else three per core, but none (in-process) for a selection of a few files."""
    given = os.environ.get(WORKERS_ENV, "")
    if given:
        if not given.isdigit():
            raise pytest.UsageError(f"{WORKERS_ENV} must be a number of workers, got {given!r}")
        return int(given)
    cores = len(os.sched_getaffinity(0)) or 1
    return min(WORKERS_PER_CORE * cores, selected_test_files(config) // FILES_PER_WORKER)
