"""``jarvismem bench``: where it runs the suite from."""

from __future__ import annotations

from pathlib import Path

from jarvismem.cli.bench import benchmarks_available
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]


def test_bench_outside_a_checkout_says_where_to_run_it(cli: Cli) -> None:
    proc = cli.run("bench")
    assert proc.returncode == 2
    assert "run `jarvismem bench` from the root of a jarvismem checkout" in proc.stderr


def test_benchmarks_are_found_in_a_checkout() -> None:
    assert benchmarks_available(str(ROOT))
