"""No secret from the corpus is stored or sent on the paths redaction covers.

Checkpoints, spaces (writes and restores), recalled entries and the prompt a
turn would send. Each test reads what Redis really holds (every key of the
test's namespace), not just what the API hands back.
"""

from __future__ import annotations

import json
from typing import Any

from jarvismem.recall.models import MemoryEntry
from jarvismem.recall.policy import MemoryPolicy
from jarvismem.redaction import REDACTED
from jarvismem.runtime import RecallSetup
from jarvismem.settings import Settings
from jarvismem.spaces.store import SpacesStore
from tests.conftest import Factory, MakeSettings
from tests.secret_corpus import (
    AWS_SECRET,
    GITHUB_FINE,
    HUGGING_FACE,
    JWT,
    PEM_LINE,
    PEM_RSA,
    SECRETS,
    SLACK_BOT,
    STRIPE_LIVE,
)


async def _stored_text(redis: Any, settings: Settings) -> str:
    """Everything Redis holds under the test's namespace, as one text."""
    parts: list[str] = []
    async for key in redis.scan_iter(match=f"jm:{settings.jarvismem_namespace}:*"):
        kind = (await redis.type(key)).decode()
        if kind == "string":
            parts.append((await redis.get(key)).decode("utf-8", "replace"))
        elif kind == "hash":
            for field, value in (await redis.hgetall(key)).items():
                parts += [field.decode("utf-8", "replace"), value.decode("utf-8", "replace")]
        elif kind == "stream":
            for _id, fields in await redis.xrange(key):
                parts += [v.decode("utf-8", "replace") for v in fields.values()]
        elif kind == "list":
            parts += [v.decode("utf-8", "replace") for v in await redis.lrange(key, 0, -1)]
        elif kind == "zset":
            parts += [v.decode("utf-8", "replace") for v in await redis.zrange(key, 0, -1)]
        elif kind == "set":
            parts += [v.decode("utf-8", "replace") for v in await redis.smembers(key)]
    return "\n".join(parts)


# --- checkpoints -------------------------------------------------------------------------


async def test_a_checkpoint_with_secrets_is_stored_redacted_and_stays_json(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    state = {
        "step": 3,
        "password": "hunter2",
        "api_key": 918273645,
        "credentials": {"user": "bob", "pin": 1234},
        "notes": [f"deploy with {STRIPE_LIVE}", f"aws_secret_access_key={AWS_SECRET}"],
        "log": f"curl -H 'Authorization: Bearer {JWT}'",
    }
    await mem.save_checkpoint(json.dumps(state))
    loaded = json.loads(await mem.load_checkpoint())
    assert loaded["step"] == 3
    assert loaded["password"] == REDACTED
    assert loaded["api_key"] == REDACTED
    assert loaded["credentials"] == REDACTED
    stored = await _stored_text(fake_redis, settings)
    for secret in ("hunter2", "918273645", "1234", STRIPE_LIVE, AWS_SECRET, JWT):
        assert secret not in stored


async def test_every_corpus_secret_in_a_checkpoint_is_hidden(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    await mem.save_checkpoint(json.dumps({f"sample{i}": c[1] for i, c in enumerate(SECRETS)}))
    stored = await _stored_text(fake_redis, settings)
    assert [f for f, _, secret in SECRETS if secret in stored] == []


async def test_a_checkpoint_without_secrets_is_kept_byte_for_byte(
    fake_redis: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    state = '{ "step" : 3,\n  "token_count": 812, "ratio": 1.50, "text": "the token budget" }'
    await mem.save_checkpoint(state)
    assert await mem.load_checkpoint() == state


async def test_a_plain_text_checkpoint_is_redacted_by_pattern(
    fake_redis: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    await mem.save_checkpoint(f"resume at step 4; key file:\n{PEM_RSA}\n")
    loaded = await mem.load_checkpoint()
    assert PEM_LINE not in loaded
    assert loaded.startswith("resume at step 4; key file:\n[REDACTED]")


async def test_redact_checkpoints_false_keeps_exact_state(
    fake_redis: Any, make_settings: MakeSettings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis, settings=make_settings(redact_checkpoints=False))
    state = json.dumps({"password": "hunter2"})
    await mem.save_checkpoint(state)
    assert await mem.load_checkpoint() == state


async def test_a_conditional_checkpoint_save_is_redacted_too(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    rev = await mem.save_checkpoint(json.dumps({"secret": "s3cr3t-one"}))
    await mem.save_checkpoint(json.dumps({"secret": "s3cr3t-two"}), expected_rev=rev)
    assert "s3cr3t" not in await _stored_text(fake_redis, settings)


async def test_a_large_checkpoint_is_redacted_off_the_event_loop(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    state = {"rows": [{"id": i, "text": "ordinary row " * 4} for i in range(2000)]}
    state["rows"][1234]["db_password"] = "row-s3cret"
    await mem.save_checkpoint(json.dumps(state))
    loaded = json.loads(await mem.load_checkpoint())
    assert loaded["rows"][1234]["db_password"] == REDACTED
    assert len(loaded["rows"]) == 2000


async def test_custom_redaction_keys_apply_to_checkpoints(
    fake_redis: Any, make_settings: MakeSettings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis, settings=make_settings(redaction_keys="password, card_pin"))
    await mem.save_checkpoint(json.dumps({"card_pin": 4321, "password": "x1", "token": "t"}))
    loaded = json.loads(await mem.load_checkpoint())
    assert loaded == {"card_pin": REDACTED, "password": REDACTED, "token": "t"}


# --- spaces --------------------------------------------------------------------------------


async def test_spaces_writes_store_no_secret(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    spaces = make_memory(redis=fake_redis).spaces
    await spaces.world_put("api_key", "zyx987-live")
    await spaces.world_put("db", {"host": "db1", "password": 55667788})
    await spaces.world_put("note", f"deploy with {STRIPE_LIVE}")
    await spaces.world_put(f"token {SLACK_BOT}", "a key holding a token")
    await spaces.tasks_add(f"rotate {HUGGING_FACE}")
    await spaces.put_space("ops", {"ok": 1}, metadata={"owner_token": GITHUB_FINE})
    await spaces.ensure_space("creds", {"secret": "ens-s3cret"})
    await spaces.put_space("log", [f"login {PEM_RSA}"])
    stored = await _stored_text(fake_redis, settings)
    for secret in (
        "zyx987-live",
        "55667788",
        STRIPE_LIVE,
        SLACK_BOT,
        HUGGING_FACE,
        GITHUB_FINE,
        "ens-s3cret",
        PEM_LINE,
    ):
        assert secret not in stored
    world = await spaces.world_items()
    assert world["api_key"] == REDACTED
    assert world["db"] == {"host": "db1", "password": REDACTED}


async def test_a_restored_snapshot_is_redacted(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    spaces = make_memory(redis=fake_redis).spaces
    await spaces.world_put("customer", "ACME")
    snapshot = await spaces.snapshot()
    snapshot["spaces"]["world"]["data"]["secret_key"] = "imported-s3cret"
    snapshot["spaces"]["world"]["data"]["note"] = f"use {STRIPE_LIVE}"
    await spaces.restore(snapshot)
    stored = await _stored_text(fake_redis, settings)
    assert "imported-s3cret" not in stored and STRIPE_LIVE not in stored
    assert (await spaces.world_items())["customer"] == "ACME"


# --- recall and the prompt -----------------------------------------------------------------


async def _plant_entry(mem: Any, content: str) -> None:
    """Write an entry straight into the store, as a process without a pattern for it did."""
    request = mem.runtime.policy.write_request(agent_id=mem.agent_id, content=content)
    await mem.runtime.recall_store.write(request)


async def test_an_entry_stored_before_a_pattern_existed_does_not_reach_the_prompt(
    fake_redis: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis, recall=RecallSetup(policy=MemoryPolicy(max_entries=5)))
    await _plant_entry(mem, f"deploy key for billing: {STRIPE_LIVE} (billing deploy)")
    await _plant_entry(mem, f"billing deploy uses this key {PEM_RSA}")
    recalled = await mem.recall("billing deploy key")
    assert recalled, "the planted entries are recalled"
    for result in recalled:
        assert STRIPE_LIVE not in result.entry.content and PEM_LINE not in result.entry.content
    pre = await mem.preflight("You are a billing agent.", "billing deploy key?")
    sent = json.dumps(pre.model_dump())
    assert STRIPE_LIVE not in sent and PEM_LINE not in sent
    assert REDACTED in sent


async def test_spaces_and_summary_stored_unredacted_are_redacted_in_the_prompt(
    fake_redis: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis, recall=RecallSetup(policy=MemoryPolicy(enabled=False)))
    # A store without a redactor: what an older version wrote.
    raw = SpacesStore(
        fake_redis, mem.runtime.keyspace, mem.workflow_id, mem.agent_id, ttl_seconds=None
    )
    await raw.world_put("password", 99887766)
    await raw.world_put("note", f"token is {HUGGING_FACE}")
    await raw.tasks_add(f"revoke {GITHUB_FINE}")
    pre = await mem.preflight("sys", "hi")
    sent = json.dumps(pre.model_dump())
    for secret in ("99887766", HUGGING_FACE, GITHUB_FINE):
        assert secret not in sent


async def test_remembered_content_and_metadata_are_redacted(
    fake_redis: Any, settings: Settings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis)
    entry = await mem.remember(
        f"the staging key is {HUGGING_FACE}",
        metadata={"source": "chat", "api_token": "meta-s3cret", "link": f"x {SLACK_BOT}"},
    )
    assert isinstance(entry, MemoryEntry)
    stored = await _stored_text(fake_redis, settings)
    for secret in (HUGGING_FACE, "meta-s3cret", SLACK_BOT):
        assert secret not in stored
    assert "chat" in stored


async def test_redaction_disabled_stores_checkpoints_and_spaces_as_given(
    fake_redis: Any, make_settings: MakeSettings, make_memory: Factory
) -> None:
    mem = make_memory(redis=fake_redis, settings=make_settings(redaction_enabled=False))
    state = json.dumps({"password": "hunter2"})
    await mem.save_checkpoint(state)
    assert await mem.load_checkpoint() == state
    await mem.spaces.world_put("api_key", "zyx987-live")
    assert (await mem.spaces.world_items())["api_key"] == "zyx987-live"
