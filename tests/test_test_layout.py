"""The tests mirror the package: every module of jarvismem has a test file named after it.

``jarvismem/<path>/<mod>.py`` is tested in ``tests/<path>/test_<mod>.py`` (a private
module ``_mod.py`` in ``test_mod.py`` or ``test__mod.py``). A package's ``__init__.py``
is tested in ``tests/<parent>/test_<pkg>.py`` or by the test files of its mirror
directory ``tests/<path>/``. Test directories carry an ``__init__.py`` so that test
files of the same name in different directories (``tests/recall/test_models.py``,
``tests/spaces/test_models.py``) import as distinct modules.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jarvismem"
TESTS = ROOT / "tests"

# Modules without a test file of their own, each with the test file that exercises
# it and a string that file must contain, so an exemption cannot outlive its reason.
# Keys ending in "/" exempt every module under that folder.
EXEMPT: dict[str, tuple[str, str]] = {
    # Two lines delegating to jarvismem.cli.main; the CLI tests run it as `python -m jarvismem`.
    "jarvismem/__main__.py": ("tests/cli/test_cli.py", '"-m", "jarvismem"'),
    # Only a docstring: the package that ships test helpers to users.
    "jarvismem/testing/__init__.py": (
        "tests/recall/test_recall_conformance.py",
        "jarvismem.testing",
    ),
    # Conformance suites: run against every shipped backend by these files.
    "jarvismem/testing/_conformance.py": (
        "tests/backends/blob/test_conformance.py",
        "jarvismem.testing.blob_conformance",
    ),
    "jarvismem/testing/blob_conformance.py": (
        "tests/backends/blob/test_conformance.py",
        "jarvismem.testing.blob_conformance",
    ),
    "jarvismem/testing/recall_conformance.py": (
        "tests/recall/test_recall_conformance.py",
        "jarvismem.testing.recall_conformance",
    ),
    # Fake servers: every Athena and LLM test talks to them over real HTTP.
    "jarvismem/testing/fake_athena.py": (
        "tests/backends/test_athena.py",
        "jarvismem.testing.fake_athena",
    ),
    "jarvismem/testing/fake_llm.py": (
        "tests/backends/llm/test_client.py",
        "jarvismem.testing.fake_llm",
    ),
}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _is_exempt(module: Path) -> bool:
    rel = _rel(module)
    return any(rel == key or (key.endswith("/") and rel.startswith(key)) for key in EXEMPT)


def expected_test_files(module: Path) -> list[Path]:
    """Where the tests of ``module`` may live (any one of them is enough)."""
    inner = module.relative_to(PACKAGE)
    mirror = TESTS / inner.parent
    if module.name == "__init__.py":
        if module.parent == PACKAGE:
            return [TESTS / "test_jarvismem.py"]
        return [mirror.parent / f"test_{module.parent.name}.py", mirror]
    stem = module.stem
    names = [f"test_{stem}.py"]
    if stem.startswith("_"):
        names.insert(0, f"test_{stem.lstrip('_')}.py")
    return [mirror / name for name in names]


def _has_tests(candidate: Path) -> bool:
    if candidate.is_dir():
        return any(candidate.glob("test_*.py"))
    return candidate.is_file()


def missing_test_files() -> list[str]:
    """One line per module without a test file, naming where it should be."""
    missing = []
    for module in _modules():
        if module == PACKAGE / "__init__.py" or _is_exempt(module):
            # The package __init__ only re-exports; tests/test_architecture.py pins
            # its public names.
            continue
        candidates = expected_test_files(module)
        if not any(_has_tests(c) for c in candidates):
            missing.append(f"{_rel(module)} -> {_rel(candidates[0])}")
    return missing


def test_every_module_has_its_own_test_file() -> None:
    missing = missing_test_files()
    assert not missing, "modules without a test file:\n" + "\n".join(missing)


def test_every_exemption_names_an_existing_module_and_the_test_that_exercises_it() -> None:
    stale = []
    for key, (test_file, marker) in EXEMPT.items():
        target = ROOT / key
        if not (target.is_dir() if key.endswith("/") else target.is_file()):
            stale.append(f"{key}: no such module")
            continue
        path = ROOT / test_file
        if not path.is_file() or marker not in path.read_text(encoding="utf-8"):
            stale.append(f"{key}: {test_file} does not exercise it ({marker!r} not found)")
    assert not stale, "\n".join(stale)


def test_test_directories_mirror_packages_and_are_packages() -> None:
    problems = []
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        if not any(folder.glob("*.py")):
            continue  # e.g. a leftover folder holding only __pycache__
        if not (folder / "__init__.py").is_file():
            problems.append(f"{_rel(folder)} has no __init__.py")
        inner = folder.relative_to(TESTS)
        # tests/system/ holds whole-system tests (crash, outage, security, chaos);
        # tests/harness/ this repository's test beds (servers, fault injectors), which
        # the installed package does not ship.
        mirrored = (PACKAGE / inner / "__init__.py").is_file()
        if inner.parts[0] not in ("system", "harness") and not mirrored:
            problems.append(f"{_rel(folder)} mirrors no package jarvismem/{inner.as_posix()}/")
    assert not problems, "\n".join(problems)


# --- the mapping itself, so the check above cannot pass by mapping to nothing -------------


def test_a_module_maps_to_a_test_file_in_the_mirror_directory() -> None:
    assert expected_test_files(PACKAGE / "recall" / "redis_store.py") == [
        TESTS / "recall" / "test_redis_store.py"
    ]
    assert expected_test_files(PACKAGE / "keys.py") == [TESTS / "test_keys.py"]


def test_a_private_module_may_drop_its_underscore() -> None:
    assert expected_test_files(PACKAGE / "cli" / "_render.py") == [
        TESTS / "cli" / "test_render.py",
        TESTS / "cli" / "test__render.py",
    ]


def test_a_package_maps_to_its_named_test_file_or_its_mirror_directory() -> None:
    assert expected_test_files(PACKAGE / "recall" / "__init__.py") == [
        TESTS / "test_recall.py",
        TESTS / "recall",
    ]


def test_a_module_missing_its_test_file_is_reported(tmp_path: Path) -> None:
    assert not _has_tests(tmp_path / "test_nothing.py")
    assert not _has_tests(tmp_path)
    (tmp_path / "test_x.py").write_text("", encoding="utf-8")
    assert _has_tests(tmp_path) and _has_tests(tmp_path / "test_x.py")
