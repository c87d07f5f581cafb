"""MemoryRuntime: assembling clients from settings, views, health, the shared Athena client."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from jarvismem import runtime as runtime_module
from jarvismem.backends import redis as redis_backend_module
from jarvismem.errors import BackendUnavailableError, ConfigError
from jarvismem.memory import UnifiedMemory
from jarvismem.runtime import Lifecycle, MemoryRuntime, default_settings, get_athena_client
from jarvismem.settings import Settings, load_settings
from tests.conftest import REAL_REDIS_URL, Factory

DEAD_REDIS = "redis://127.0.0.1:1/0"


def test_a_runtime_is_configured_from_the_environment_by_default() -> None:
    rt = MemoryRuntime()
    assert rt.settings is default_settings() is default_settings()
    bounded = MemoryRuntime(lifecycle=Lifecycle(recent_workflows=3, live_athena_agents=2))
    assert bounded.recent_workflows == 3


async def test_views_of_one_runtime_share_clients_and_workflow_state(
    workflow_id: str, redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    rt = make_runtime(redis=redis_client, blob=blob_storage)
    a = rt.memory(workflow_id, "s1", "a1")
    b = rt.memory(workflow_id, "s2", "a2")
    assert isinstance(a, UnifiedMemory) and a.runtime is rt
    assert a.episodic is b.episodic
    assert a.runtime.redis is b.runtime.redis
    await a.log_turn(1, "x", "y", "z")
    await b.log_turn(1, "x", "y", "z")
    assert len(await b.episodic.tail(10)) == 2  # type: ignore[union-attr]
    await a.close()  # a view handed out by a runtime leaves it open
    assert not rt.closed


async def test_from_env_connects_to_redis_and_owns_its_clients(
    settings: Settings, workflow_id: str, real_redis: Any
) -> None:
    s = settings.model_copy(update={"redis_url": REAL_REDIS_URL})
    rt = await MemoryRuntime.from_env(s, require_redis=True)
    assert rt.owns_clients and rt.blob is not None and rt.athena is None
    health = await rt.health()
    assert health["backends"]["redis"]["reachable"]
    await rt.memory(workflow_id, "s1", "a1").log_turn(1, "t", "a", "r")
    assert await real_redis.exists(rt.keyspace.ledger(workflow_id))
    await rt.close()


async def test_from_env_starts_degraded_when_redis_does_not_answer(
    settings: Settings, workflow_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS, "tier_timeout_episodic": 0.3})
    with caplog.at_level(logging.WARNING, logger="jarvismem.runtime"):
        rt = await MemoryRuntime.from_env(s)
    assert "starting degraded" in caplog.text
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")  # queued, not raised
    health = await rt.health()
    assert not health["ok"]
    assert f"redis[{workflow_id}]: 1 write(s) queued in the local outbox" in health["reasons"]
    await rt.close()


async def test_from_env_without_warn_degraded_logs_the_degraded_start_below_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS})
    with caplog.at_level(logging.INFO, logger="jarvismem.runtime"):
        rt = await MemoryRuntime.from_env(s, warn_degraded=False)
    await rt.close()
    degraded = [r for r in caplog.records if "starting degraded" in r.getMessage()]
    assert [r.levelno for r in degraded] == [logging.INFO]


async def test_from_env_with_require_redis_raises_when_redis_does_not_answer(
    settings: Settings,
) -> None:
    s = settings.model_copy(update={"redis_url": DEAD_REDIS, "redis_connect_retries": 0})
    with pytest.raises(BackendUnavailableError, match="did not answer"):
        await MemoryRuntime.from_env(s, require_redis=True)


async def test_from_env_applies_overrides_over_the_environment(tmp_path: Path) -> None:
    rt = await MemoryRuntime.from_env(
        _env_file=None, jarvismem_namespace="overridden", outbox_path=tmp_path / "ob"
    )
    assert rt.keyspace.namespace == "overridden" and rt.in_process
    await rt.close()


async def test_health_of_a_runtime_without_backends(make_runtime: Factory) -> None:
    health = await make_runtime().health()
    assert health["ok"] and health["reasons"] == []
    assert not any(b["configured"] for b in health["backends"].values())


def test_get_athena_client_is_none_without_url() -> None:
    assert get_athena_client(load_settings(_env_file=None, athena_url=None)) is None


async def test_get_athena_client_is_one_client_per_process() -> None:
    settings = load_settings(_env_file=None, athena_url="http://athena.test:8080")
    try:
        first = get_athena_client(settings)
        assert first is not None
        assert get_athena_client(settings) is first
        # Another server or credentials while it is open: refused, never a second pool.
        with pytest.raises(ConfigError, match="another URL or credentials"):
            get_athena_client(
                load_settings(
                    _env_file=None, athena_url="http://athena.test:8080", athena_api_key="k" * 12
                )
            )
        await first.aclose()
        replacement = get_athena_client(settings)
        assert replacement is not None and replacement is not first
        await runtime_module.close_athena_clients()
        assert replacement.is_closed
        other = get_athena_client(load_settings(_env_file=None, athena_url="http://other.test"))
        assert other is not None and other.base_url == "http://other.test"
    finally:
        await runtime_module.close_athena_clients()


async def test_the_refusal_never_shows_a_secret() -> None:
    secret = "s3cret-api-key-value"
    try:
        get_athena_client(load_settings(_env_file=None, athena_url="http://athena.test"))
        with pytest.raises(ConfigError) as caught:
            keyed = load_settings(
                _env_file=None, athena_url="http://athena.test", athena_api_key=secret
            )
            get_athena_client(keyed)
        assert secret not in str(caught.value) and secret not in repr(runtime_module.__dict__)
    finally:
        await runtime_module.close_athena_clients()


# --- start-up a new user meets -------------------------------------------------------


async def test_from_env_with_refused_credentials_fails_fast_instead_of_starting_degraded(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvismem.errors import ConfigError

    async def refuse(*_a: Any, **_k: Any) -> Any:
        raise ConfigError("Redis refused the credentials (NOAUTH/WRONGPASS) at redis://h:1/0")

    # A misconfiguration is not an outage: no degraded start hides it.
    monkeypatch.setattr(redis_backend_module, "connect_redis", refuse)
    with pytest.raises(ConfigError, match="refused the credentials"):
        await MemoryRuntime.from_env(settings.model_copy(update={"redis_url": DEAD_REDIS}))


async def test_from_env_with_unwritable_folders_warns_once_each_with_path_and_errno(
    settings: Settings, tmp_path: Path, workflow_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A regular file where a parent folder should be: unwritable even for root.
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    s = settings.model_copy(
        update={"storage_base_path": blocker / "blobs", "outbox_path": blocker / "outbox"}
    )
    with caplog.at_level(logging.WARNING):
        rt = await MemoryRuntime.from_env(s)
    try:
        warned = [r.getMessage() for r in caplog.records if "is not writable" in r.getMessage()]
        assert len(warned) == 2
        assert f"STORAGE_BASE_PATH {blocker / 'blobs'} is not writable" in warned[0]
        assert f"OUTBOX_PATH {blocker / 'outbox'} is not writable" in warned[1]
        assert all("(ENOTDIR)" in w for w in warned)
        # The agent keeps running: the scratchpad degrades, the ledger works.
        mem = rt.memory(workflow_id, "s1", "a1")
        await mem.log_turn(1, "t", "a", "r")
        bundle = await mem.rehydrate_bundle()
        assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1"]
    finally:
        await rt.close()


async def test_from_env_with_azure_chosen_but_the_extra_missing_is_one_config_error(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from jarvismem.errors import ConfigError

    monkeypatch.setitem(sys.modules, "jarvismem.backends.blob.azure", None)
    s = settings.model_copy(
        update={
            "storage_backend": "azure",
            "azure_storage_connection_string": SecretStr("UseDevelopmentStorage=true"),
        }
    )
    with pytest.raises(ConfigError) as info:
        await MemoryRuntime.from_env(s)
    assert str(info.value).startswith(
        "the azure extra is not installed: pip install 'jarvismem[azure]'"
    )


def _read_only_run(folder: Path, code: str) -> Any:
    """Run ``code`` with ``folder`` as a read-only working directory (EROFS), or skip.

    A private mount namespace with a read-only bind mount: real EROFS even for
    root (a chmod does not stop root). Needs unshare and CAP_SYS_ADMIN.
    """
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("unshare not available")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -r {folder} {folder}"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip("cannot make a read-only bind mount here (needs CAP_SYS_ADMIN)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "STORAGE_"))}
    env.pop("OUTBOX_PATH", None)
    env["REDIS_URL"] = "memory://"  # the folders under test are the scratchpad's and outbox's
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    script = 'mount --bind -r "$1" "$1" && cd "$1" && exec "$2" -c "$3"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(folder), sys.executable, code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_read_only_working_directory_degrades_the_scratchpad_without_crashing(
    tmp_path: Path,
) -> None:
    code = (
        "import asyncio\n"
        "from jarvismem.runtime import MemoryRuntime\n"
        "async def main():\n"
        "    async with await MemoryRuntime.from_env() as rt:\n"
        "        mem = rt.memory('wf', 's', 'a')\n"
        "        await mem.log_turn(1, 't', 'a', 'r')\n"
        "        b = await mem.rehydrate_bundle()\n"
        "        print('turns', [t['turn_id'] for t in b['recent_turns']])\n"
        "asyncio.run(main())\n"
    )
    proc = _read_only_run(tmp_path, code)
    # Before: OSError: [Errno 30] Read-only file system: '.../.jarvismem/outbox/...lock'.
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "turns ['1']" in proc.stdout
    assert (
        f"STORAGE_BASE_PATH {tmp_path}/.jarvismem/blobs is not writable "
        "(Read-only file system (EROFS))"
    ) in proc.stderr


# --- the per-workflow state, outboxes, recall store and close ---------------------------------


async def test_a_runtime_without_backends_has_no_tiers_and_closes_twice(
    workflow_id: str, make_runtime: Factory
) -> None:
    runtime = make_runtime()
    state = runtime.workflow(workflow_id)
    assert (state.ledger, state.redis_writer, state.blob_writer, state.ltm) == (None,) * 4
    assert runtime.destination("redis") is None and runtime.destination("blob") is None
    assert await runtime.athena_memory("a1") is None
    assert runtime.athena_memory_nowait("a1") is None
    with pytest.raises(ConfigError, match="ATHENA_URL"):
        runtime.athena_outbox("a1")
    assert runtime.recall_store is None and not runtime.in_process
    await runtime.close()
    assert runtime.closed
    await runtime.close()


async def test_the_embedded_recall_store_indexes_the_configured_metadata_keys(
    workflow_id: str, redis_client: Any, settings: Settings, make_runtime: Factory
) -> None:
    # RECALL_INDEXED_METADATA must reach the store the runtime builds, or it does nothing.
    runtime = make_runtime(
        redis=redis_client,
        settings=settings.model_copy(update={"recall_indexed_metadata": "topic"}),
    )
    view = UnifiedMemory(workflow_id, "s1", "a1", runtime=runtime)
    await view.remember("the launch slipped a week", metadata={"topic": "astronomy"})
    found = await view.recall("astronomy", min_score=1e-9)
    assert [r.entry.content for r in found] == ["the launch slipped a week"]


async def test_one_workflow_state_and_one_outbox_per_workflow(
    workflow_id: str, redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    runtime = make_runtime(redis=redis_client, blob=blob_storage)
    state = runtime.workflow(workflow_id)
    assert runtime.workflow(workflow_id) is state
    assert runtime.outbox("redis", workflow_id) is state.redis_writer.outbox  # type: ignore[union-attr]
    assert runtime.outbox("blob", workflow_id) is state.blob_writer.outbox  # type: ignore[union-attr]
    # Outbox files are named by the destination they deliver to.
    redis_dst = runtime.destination("redis")
    assert redis_dst is not None and redis_dst != runtime.destination("blob")
    assert redis_dst in str(runtime.outbox("redis", workflow_id).path)
    assert runtime.open_writers() == list(state.writers)


async def test_a_runtime_serves_views_and_keeps_only_recent_workflows(
    redis_client: Any, make_runtime: Factory
) -> None:
    runtime = make_runtime(redis=redis_client, lifecycle=Lifecycle(recent_workflows=8))
    for i in range(40):
        await UnifiedMemory(f"wf-{i}", "s1", "a1", runtime=runtime).log_turn(1, "t", "a", "r")
    gc.collect()
    assert len(runtime._workflows) <= 8 + 1
    kept = UnifiedMemory("wf-0", "s1", "a1", runtime=runtime)  # evicted, used again: same data
    assert [t["turn_id"] for t in await kept.episodic.tail(5)] == ["1"]  # type: ignore[union-attr]


async def test_held_idle_views_do_not_pin_their_workflow_state(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    # A kernel may hold a view per waiting workflow: thousands of them. The views
    # must not keep every workflow's state (writers, outboxes, tiers) alive.
    runtime = make_runtime(
        redis=redis_client, blob=blob_storage, lifecycle=Lifecycle(recent_workflows=8)
    )
    views = [UnifiedMemory(f"wf-{i}", "s1", "a1", runtime=runtime) for i in range(40)]
    for view in views:
        await view.log_turn(1, "t", "a", "r")
    gc.collect()
    assert len(runtime._workflows) <= 8 + 1  # was 40: each view held its state
    # A held view whose state was let go works as before: its state is made again.
    first = views[0]
    await first.log_turn(2, "t2", "a2", "r2")
    bundle = await first.rehydrate_bundle()
    assert [t["turn_id"] for t in bundle["recent_turns"]] == ["1", "2"]
    assert first.episodic is not None and await first.episodic.length() == 2


async def test_a_runtime_compacts_with_jarviscores_generate_client(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    # A JarvisCore user hands the runtime the LLM client they already have.
    class Generate:
        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def generate(self, **kwargs: Any) -> dict[str, Any]:
            self.prompts.append(kwargs["prompt"])
            return {"content": "summary by generate()", "tokens": {"total": 7}}

    client = Generate()
    runtime = make_runtime(redis=redis_client, blob=blob_storage, summarizer=client)
    mem = UnifiedMemory("wf-gen", "s1", "a1", runtime=runtime)
    await mem.log_turn(1, "look up the invoice", "search()", "found it")
    result = await mem.compact_now()
    assert result["compacted"], result
    assert mem.ltm is not None and await mem.ltm.load_summary() == "summary by generate()"
    assert client.prompts and "look up the invoice" in client.prompts[0]


async def test_closing_a_runtime_leaves_clients_it_does_not_own_open(
    redis_client: Any, blob_storage: Any, make_runtime: Factory
) -> None:
    runtime = make_runtime(redis=redis_client, blob=blob_storage)
    await UnifiedMemory("wf", "s1", "a1", runtime=runtime).log_turn(1, "t", "a", "r")
    await runtime.close()
    assert await redis_client.ping()
    await blob_storage.append("still/open.txt", b"x")


def test_defaults_follow_the_settings(settings: Settings) -> None:
    runtime = MemoryRuntime(settings.model_copy(update={"redaction_enabled": False}))
    assert runtime.redactor("api_key=sk-abcdefghijklmnopqrstuvwx") == (
        "api_key=sk-abcdefghijklmnopqrstuvwx"
    )
    assert runtime.keyspace.namespace == settings.jarvismem_namespace
    assert runtime.policy is not None


async def test_recall_embedder_setting_makes_the_runtime_recall_by_meaning(
    workflow_id: str, settings: Settings, real_redis: Any
) -> None:
    # End to end through the settings: RECALL_EMBEDDER=openai and EMBEDDINGS_BASE_URL
    # make the runtime's recall store hybrid, vectors in Redis, embeddings over HTTP
    # from the fake server (whose aliases give "automobile" and "sedan" one meaning).
    import asyncio

    from jarvismem.recall.hybrid import HybridRecallStore
    from jarvismem.runtime import MemoryRuntime
    from jarvismem.testing.fake_llm import FakeLLMServer
    from tests.conftest import REAL_REDIS_URL

    with FakeLLMServer() as llm:
        llm.embedding_aliases = {"automobile": "car", "sedan": "car"}
        s = settings.model_copy(
            update={
                "redis_url": REAL_REDIS_URL,
                "recall_embedder": "openai",
                "embeddings_base_url": llm.url,
                "embeddings_batch": 8,
                # The fake's 64 default buckets would let unrelated words collide.
                "embeddings_dimensions": 4096,
            }
        )
        rt = await MemoryRuntime.from_env(s, require_redis=True)
        store = rt.recall_store
        assert isinstance(store, HybridRecallStore) and store.batch_size == 8
        view = rt.memory(workflow_id, "s1", "a1")
        entry = await view.remember("I drove my new sedan to work")
        await view.remember("The weather was grey all week")
        await view.remember("We ate pasta for dinner")
        assert await store.flush(10)
        found = await view.recall("which automobile", min_score=1e-9)
        assert [r.entry.content for r in found] == ["I drove my new sedan to work"]
        assert llm.embedding_requests(), "the embeddings went over HTTP"
        scope = rt.keyspace.recall_scope(entry.namespace, entry.agent_id, entry.session_id)
        vectors = rt.keyspace.recall_vectors(scope)
        assert await real_redis.hlen(vectors) == 3
        await rt.close()
        assert store._closed  # the runtime stopped the background embedding

        # A runtime without background work (the inspector's) recalls by meaning from
        # the stored vectors and writes none: what it remembers stays pending.
        reader = await MemoryRuntime.from_env(s, require_redis=True, background=False)
        view = reader.memory(workflow_id, "s1", "a1")
        asked = len(llm.embedding_requests())
        found = await view.recall("which automobile", min_score=1e-9)
        assert [r.entry.content for r in found] == ["I drove my new sedan to work"]
        await view.remember("We adopted a puppy last spring")
        await asyncio.sleep(0.2)
        assert len(llm.embedding_requests()) == asked + 1  # the query's embedding only
        assert await real_redis.hlen(vectors) == 3
        await reader.close()

    lexical = await MemoryRuntime.from_env(
        settings.model_copy(update={"redis_url": REAL_REDIS_URL}), require_redis=True
    )
    assert not isinstance(lexical.recall_store, HybridRecallStore)
    await lexical.close()


async def test_a_runtime_runs_its_outbox_poller_until_it_is_closed(
    workflow_id: str, redis_client: Any, make_runtime: Factory
) -> None:
    import asyncio

    runtime = make_runtime(redis=redis_client)
    await runtime.memory(workflow_id, "s1", "a1").log_turn(1, "t", "a", "r")
    [poller] = [t for t in asyncio.all_tasks() if t.get_name() == "jarvismem-outbox-poll"]
    await runtime.close()
    with pytest.raises(asyncio.CancelledError):
        await poller
