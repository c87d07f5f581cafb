"""AthenaMemory: writes queued redacted and validated, config, lifecycle, health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.backends.outbox import Outbox
from jarvismem.errors import AthenaAuthError, InvalidPayloadError, JarvisMemError
from jarvismem.keys import KeySpace
from jarvismem.redaction import default_redactor
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena import AthenaMemory, AthenaTierConfig
from tests.tiers.athena.conftest import AGENT, TENANT, USER, MakeMemory, wait_for


async def test_redaction_applied_before_queueing(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any, tmp_path: Path
) -> None:
    mem = await make_memory(
        redis_client, outbox=Outbox(tmp_path / "athena.jsonl"), redactor=default_redactor
    )
    secret = "sk-" + "A" * 30
    server.mode = "error500"
    await mem.record_observation(f"the key is {secret}")
    on_disk = (tmp_path / "athena.jsonl").read_text()
    assert secret not in on_disk and "[REDACTED]" in on_disk
    server.mode = "ok"
    await wait_for(lambda: len(server.events) == 1)
    assert secret not in server.events[0][1]["content"]


async def test_memory_created_while_athena_down_queues_writes(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    server.mode = "error500"
    mem = await make_memory(redis_client)
    assert mem.session_id == ""
    await mem.record_thought("early")
    server.mode = "ok"
    await wait_for(lambda: len(server.events) == 1)
    assert mem.session_id and server.sessions_created == 1


async def test_non_string_metadata_refused_before_queueing(
    make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    with pytest.raises(InvalidPayloadError):
        await mem.record_thought("x", count=3)  # type: ignore[arg-type]
    assert mem.health()["pending"] == 0


async def test_health_has_no_secrets(
    server: FakeAthenaServer, make_memory: MakeMemory, redis_client: Any
) -> None:
    c = AthenaClient(server.url.replace("http://", "http://user:pw-secret@"), api_key="k-secret-1")
    try:
        mem = await make_memory(redis_client, client=c)
        text = str(mem.health())
        assert "pw-secret" not in text and "k-secret-1" not in text
        await mem.close()
    finally:
        await c.aclose()


async def test_config_object_and_overrides_name_the_session(
    server: FakeAthenaServer, client: AthenaClient, keyspace: KeySpace, tmp_path: Path
) -> None:
    config = AthenaTierConfig(tenant_id="globex", user_id="bob")
    mem = await AthenaMemory.create(
        AGENT,
        client,
        keyspace=keyspace,
        config=config,
        user_id="carol",  # an override wins over the config
        outbox=Outbox(tmp_path / "a.jsonl"),
    )
    try:
        assert mem.config == AthenaTierConfig(tenant_id="globex", user_id="carol")
        assert mem.destination.split("/")[:3] == ["globex", "carol", AGENT]
    finally:
        await mem.close()


def test_unknown_override_is_refused(client: AthenaClient) -> None:
    with pytest.raises(TypeError):
        AthenaMemory(AGENT, client, retry_bsae=0.1)


async def test_default_outbox_lives_under_the_configured_dir(
    client: AthenaClient, keyspace: KeySpace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The environment is not read: the config alone says where the outbox goes.
    monkeypatch.setenv("OUTBOX_PATH", str(tmp_path / "from-env"))
    config = AthenaTierConfig(outbox_dir=tmp_path / "boxes", outbox_max_entries=7)
    mem = AthenaMemory(AGENT, client, keyspace=keyspace, config=config)
    assert mem.outbox.path.is_relative_to(tmp_path / "boxes")
    assert mem.outbox.max_entries == 7
    await mem.close()


async def test_refused_credentials_raise_when_strict_and_queue_otherwise(
    server: FakeAthenaServer, redis_client: Any, keyspace: KeySpace, tmp_path: Path
) -> None:
    server.api_key = "right-key"
    async with AthenaClient(server.url, api_key="wrong-key", max_retries=0) as c:
        with pytest.raises(AthenaAuthError):
            await AthenaMemory.create(
                AGENT, c, redis_client, keyspace=keyspace, outbox=Outbox(tmp_path / "a.jsonl")
            )
        mem = await AthenaMemory.create(
            AGENT,
            c,
            redis_client,
            keyspace=keyspace,
            outbox=Outbox(tmp_path / "b.jsonl"),
            strict=False,
            tenant_id=TENANT,
            user_id=USER,
        )
        try:
            await mem.record_thought("kept for later")
            health = mem.health()
            assert health["consecutive_failures"] == 1
            assert "AthenaAuthError" in (health["last_error"] or "")
            assert health["pending"] == 1
        finally:
            await mem.close()


async def test_closed_memory_refuses_writes_and_closes_once(
    make_memory: MakeMemory, redis_client: Any
) -> None:
    mem = await make_memory(redis_client)
    await mem.close()
    await mem.close()  # a second close is a no-op
    with pytest.raises(JarvisMemError, match="closed"):
        await mem.record_thought("too late")


async def test_start_resolves_in_the_background(
    server: FakeAthenaServer, client: AthenaClient, keyspace: KeySpace, tmp_path: Path
) -> None:
    mem = AthenaMemory(
        AGENT, client, keyspace=keyspace, outbox=Outbox(tmp_path / "a.jsonl"), tenant_id=TENANT
    )
    assert mem.session_id == ""  # no I/O in the constructor
    await mem.record_thought("queued before the session")
    assert await mem.start() is mem
    await wait_for(lambda: len(server.events) == 1)
    assert server.events[0][0] == mem.session_id
    await mem.close()
