"""The reference's own memory tests, run against jarvismem.

JarvisCore (``jarviscore-framework``) ships no tests in its wheel or sdist, so its
memory test files are fetched from its repository at a pinned commit into
``<repo>/.cache/jarviscore-tests/<commit>/`` (git-ignored; fetched once, then used
offline), or read from ``JARVISCORE_TESTS_DIR`` (a checkout's ``tests`` folder).
Nothing of the reference is committed here.

They run in a child pytest whose ``jarviscore`` package is a shim written for the
run: ``jarviscore.memory.*`` are jarvismem's classes behind JarvisCore's
constructors (a tier is the one a ``UnifiedMemory`` of those stores builds), and
``jarviscore.testing``'s stores are ones jarvismem takes: the in-process Redis
stand-in and a local blob folder. Every test passes except those listed in
``INAPPLICABLE``, each with its reason; a listed test that no longer exists, or
that passes, fails this test (so the list stays true).

Without the files (no network and no cache) the test skips with that reason, in CI
too: CI machines reach the package registries only, and the reference publishes no
tests there. Run here once with network access (or JARVISCORE_TESTS_DIR): 48 tests,
35 pass, 13 listed as not applicable.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "Prescott-Data/jarviscore-framework"
COMMIT = "c3c857cd7b79e90c6192fcb175ecc1526df717e7"
"""The reference commit whose memory tests are run (its ``tests/`` folder)."""
TEST_FILES = (
    "test_memory_unified.py",
    "test_memory_ltm.py",
    "test_memory_episodic.py",
    "test_memory_scratchpad.py",
)
"""The reference's tests of the memory API jarvismem stands in for. Its tests of
its own Redis and blob store classes (``test_redis_store.py``, ``test_storage.py``)
are not here: jarvismem takes a ``redis.asyncio`` client and its own
``BlobStorage`` instead of those classes, so none of them applies."""

_KEYS = "jarvismem keeps its own keys and paths, under a namespace (README: Coming from JarvisCore)"
_BLOB = (
    "jarvismem's blob storage is its own BlobStorage (read/write bytes), not JarvisCore's "
    "save(path, str)/read(path) store the test writes to or reads from directly"
)
INAPPLICABLE: dict[str, str] = {
    # The test asserts on the reference store's own methods or layout.
    "test_memory_ltm.py::TestSaveLoad::test_save_writes_to_redis": (
        "reads JarvisCore's 'ltm:<wf>' key through its RedisContextStore.load_ltm; " + _KEYS
    ),
    "test_memory_ltm.py::TestSaveLoad::test_save_writes_to_blob": (
        "reads JarvisCore's blob path workflows/<wf>/ltm/summary.txt; " + _KEYS
    ),
    "test_memory_ltm.py::TestLoadFallback::test_prefers_redis_over_blob": (
        "seeds JarvisCore's Redis key and blob path directly; " + _KEYS
    ),
    "test_memory_ltm.py::TestLoadFallback::test_falls_back_to_blob_when_redis_empty": (
        "seeds JarvisCore's blob path directly; " + _KEYS
    ),
    "test_memory_ltm.py::TestLoadFallback::test_blob_fallback_rehydrates_redis": (
        "seeds JarvisCore's blob path and reads its Redis key; " + _KEYS
    ),
    "test_memory_scratchpad.py::TestBlobPath::test_path_includes_role": (
        "asserts JarvisCore's private _path; " + _KEYS
    ),
    "test_memory_scratchpad.py::TestBlobPath::test_path_omits_role_when_empty": (
        "asserts JarvisCore's private _path; " + _KEYS
    ),
    "test_memory_scratchpad.py::TestWrite::test_single_write_creates_blob": _BLOB,
    "test_memory_scratchpad.py::TestReadAll::test_malformed_line_skipped": _BLOB,
    "test_memory_scratchpad.py::TestReadAll::test_blank_lines_skipped": _BLOB,
    # This commit's get_notes() rendered every entry; 3.0.0's (which jarvismem
    # answers like) renders the step's goal-scoped findings only.
    "test_memory_scratchpad.py::TestGetNotes::test_notes_contain_step_id": (
        "get_notes() renders goal-scoped findings only, as JarvisCore 3.0.0 does; this "
        "older test writes step-scoped entries and expects them in the notes"
    ),
    "test_memory_scratchpad.py::TestGetNotes::test_notes_contain_entry_types": (
        "get_notes() renders goal-scoped findings only (JarvisCore 3.0.0); see above"
    ),
    "test_memory_scratchpad.py::TestGetNotes::test_notes_is_markdown": (
        "get_notes() renders goal-scoped findings only (JarvisCore 3.0.0); see above"
    ),
}

# The shim: JarvisCore's memory import paths answered by jarvismem. Written into a
# temporary folder for the child pytest only.
_SHIM: dict[str, str] = {
    "jarviscore/__init__.py": '"""jarvismem behind JarvisCore\'s memory import paths."""\n',
    "jarviscore/memory/__init__.py": (
        "from jarviscore.memory.unified import UnifiedMemory\n"
        "from jarviscore.memory.ltm import LongTermMemory\n"
        "from jarviscore.memory.episodic import EpisodicLedger\n"
        "from jarviscore.memory.scratchpad import WorkingScratchpad\n"
    ),
    "jarviscore/memory/_shim.py": """
import os
import tempfile
import uuid

import jarvismem.memory
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.redis import in_process_redis
from jarvismem.settings import MEMORY_URL, load_settings


def settings():
    base = tempfile.mkdtemp(prefix="jarviscore-shim-")
    return load_settings(
        _env_file=None,
        redis_url=MEMORY_URL,
        jarvismem_namespace="ref" + uuid.uuid4().hex[:10],
        outbox_path=os.path.join(base, "outbox"),
        storage_base_path=os.path.join(base, "blobs"),
        compaction_enabled=False,
    )


class UnifiedMemory(jarvismem.memory.UnifiedMemory):
    def __init__(self, workflow_id, step_id, agent_id, redis_store=None,
                 blob_storage=None, athena_client=None):
        super().__init__(workflow_id, step_id, agent_id, redis_store, blob_storage,
                         athena_client, settings=settings())


def tier(name, workflow_id, redis_store=None, blob_storage=None, step_id="step",
         role=""):
    mem = UnifiedMemory(workflow_id, step_id, role or "agent", redis_store, blob_storage)
    return getattr(mem, name)


def redis_store():
    return in_process_redis()


def blob_storage():
    return LocalBlobStorage(tempfile.mkdtemp(prefix="jarviscore-shim-blob-"))
""",
    "jarviscore/memory/unified.py": "from jarviscore.memory._shim import UnifiedMemory\n",
    "jarviscore/memory/ltm.py": (
        "from jarviscore.memory._shim import tier\n\n\n"
        "def LongTermMemory(redis_store, blob_storage, workflow_id):\n"
        "    return tier('ltm', workflow_id, redis_store, blob_storage)\n"
    ),
    "jarviscore/memory/episodic.py": (
        "from jarviscore.memory._shim import tier\n\n\n"
        "def EpisodicLedger(redis_store, workflow_id):\n"
        "    return tier('episodic', workflow_id, redis_store)\n"
    ),
    "jarviscore/memory/scratchpad.py": (
        "from jarviscore.memory._shim import tier\n\n\n"
        "def WorkingScratchpad(blob_storage, workflow_id, step_id, role=''):\n"
        "    return tier('working', workflow_id, None, blob_storage, step_id, role)\n"
    ),
    "jarviscore/testing/__init__.py": (
        "from jarviscore.memory._shim import blob_storage as MockBlobStorage\n"
        "from jarviscore.memory._shim import redis_store as MockRedisContextStore\n"
    ),
}


def _unavailable(what: str) -> None:
    # Skipped, even in CI: the reference publishes no tests on PyPI (its sdist prunes
    # them), and a CI machine reaches the package registries only, never GitHub.
    # Run it where GitHub answers, or with JARVISCORE_TESTS_DIR set.
    pytest.skip(f"{what}; set JARVISCORE_TESTS_DIR to a checkout's tests folder")


def _fetch(dest: Path) -> None:
    """Download the pinned commit's memory test files into ``dest``."""
    url = f"https://codeload.github.com/{REPOSITORY}/tar.gz/{COMMIT}"
    with urllib.request.urlopen(url, timeout=20) as reply:
        archive = reply.read()
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 3 and parts[1] == "tests" and parts[2] in TEST_FILES:
                handle = tar.extractfile(member)
                if handle is not None:
                    found[parts[2]] = handle.read()
    missing = sorted(set(TEST_FILES) - set(found))
    if missing:
        raise FileNotFoundError(f"{url} has no tests/{', tests/'.join(missing)}")
    partial = dest.with_name(dest.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        (partial / name).write_bytes(data)
    partial.rename(dest)  # complete or absent, never half there


def reference_tests() -> Path:
    """The folder holding the reference's memory test files (fetched on first use)."""
    given = os.environ.get("JARVISCORE_TESTS_DIR")
    if given:
        folder = Path(given)
    else:
        folder = ROOT / ".cache" / "jarviscore-tests" / COMMIT
        if not folder.is_dir():
            try:
                _fetch(folder)
            except (OSError, tarfile.TarError) as exc:
                _unavailable(f"the reference's tests could not be fetched: {exc}")
    missing = [name for name in TEST_FILES if not (folder / name).is_file()]
    if missing:
        _unavailable(f"{folder} lacks {', '.join(missing)}")
    return folder


def _write_shim(where: Path) -> None:
    for rel, text in _SHIM.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _outcomes(junit: Path) -> dict[str, str]:
    """``file::Class::test`` -> passed / failed / error / skipped, from pytest's JUnit XML."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        if not module:  # a test function outside a class
            module, cls = cls, ""
        node = (
            f"{module.rpartition('.')[2]}.py::" + (f"{cls}::" if cls else "") + case.get("name", "")
        )
        state = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                state = tag
        out[node] = state
    return out


def test_the_reference_memory_tests_pass_against_jarvismem(tmp_path: Path) -> None:
    source = reference_tests()
    work = tmp_path / "suite"
    work.mkdir()
    for name in TEST_FILES:
        (work / name).write_bytes((source / name).read_bytes())
    shim = tmp_path / "shim"
    _write_shim(shim)
    junit = tmp_path / "junit.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]))
    env.pop("JARVISMEM_NAMESPACE", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(work),
            f"--junitxml={junit}",
            *TEST_FILES,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert junit.is_file(), proc.stdout[-4000:] + proc.stderr[-4000:]
    outcomes = _outcomes(junit)
    # Every applicable test passes...
    failing = sorted(
        n for n, state in outcomes.items() if state != "passed" and n not in INAPPLICABLE
    )
    assert not failing, f"{failing}\n{proc.stdout[-6000:]}"
    # ...and the list of the others stays true: each is still there and still fails
    # (one that passes now is applicable and comes off the list).
    gone = sorted(set(INAPPLICABLE) - set(outcomes))
    assert not gone, f"listed as inapplicable but not in the reference's tests: {gone}"
    passing = sorted(n for n in INAPPLICABLE if outcomes[n] == "passed")
    assert not passing, f"listed as inapplicable but passing: {passing}"
    assert len(outcomes) - len(INAPPLICABLE) >= 30, sorted(outcomes)  # the suite really ran
