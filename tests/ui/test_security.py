"""Attacks on the inspector over real HTTP: token, loopback, Host, verbs, ids, markup, secrets."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import pytest

from jarvismem.errors import ConfigError
from jarvismem.ui.security import COOKIE, allowed_host, check_bind, is_loopback
from tests.ui.conftest import Serve

pytestmark = pytest.mark.integration

TOKEN = "correct-horse-battery-staple-42"


async def _mine(redis: Any, rt: Any) -> dict[bytes, bytes]:
    """This test's keys (its namespace; other tests write in parallel) and their values."""
    keys = await redis.keys(f"*{rt.keyspace.namespace}*")
    return {key: await redis.dump(key) for key in sorted(keys)}


async def _seed(rt: Any, workflow: str = "wf-sec") -> Any:
    mem = rt.memory(workflow, "s1", "a1")
    await mem.log_turn(1, "plan", {"tool": "search"}, "ok", 5)
    return mem


async def test_without_the_token_every_page_is_refused(real_runtime: Any, serve: Serve) -> None:
    await _seed(real_runtime)
    async with serve(real_runtime, token=TOKEN) as base, httpx.AsyncClient(base_url=base) as http:
        for path in ("/", "/health", "/w/wf-sec", "/w/wf-sec/tail", "/static/ui.css"):
            assert (await http.get(path)).status_code == 401, path
            wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
            assert (await http.get(path, headers=wrong)).status_code == 401, path
            assert (await http.get(path, params={"token": TOKEN.upper()})).status_code == 401
        ok = await http.get("/w/wf-sec", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and "plan" in ok.text


async def test_a_token_in_the_address_becomes_a_cookie_and_leaves_the_url(
    real_runtime: Any, serve: Serve
) -> None:
    await _seed(real_runtime)
    async with serve(real_runtime, token=TOKEN) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            first = await http.get("/w/wf-sec", params={"token": TOKEN, "agent": "a1"})
            assert first.status_code == 303
            assert TOKEN not in first.headers["location"]
            assert first.headers["location"] == "/w/wf-sec?agent=a1"
            cookie = first.headers["set-cookie"]
            assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        async with httpx.AsyncClient(base_url=base, cookies={COOKIE: TOKEN}) as http:
            assert (await http.get("/w/wf-sec")).status_code == 200


def test_binding_beyond_loopback_needs_a_token() -> None:
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        with pytest.raises(ConfigError, match="JARVISMEM_UI_TOKEN"):
            check_bind(host, None)
        check_bind(host, TOKEN)
    with pytest.raises(ConfigError, match="16 characters"):
        check_bind("0.0.0.0", "short")
    for host in ("127.0.0.1", "127.8.0.1", "::1", "localhost", "[::1]"):
        assert is_loopback(host)
        check_bind(host, None)


def test_the_command_refuses_a_public_bind_before_listening(tmp_path: Any) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "REDIS_URL": "memory://"}
    done = subprocess.run(
        [sys.executable, "-m", "jarvismem", "ui", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done
    assert "JARVISMEM_UI_TOKEN" in done.stderr


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil.example", ""],
)
async def test_on_loopback_only_loopback_host_names_are_answered(
    real_runtime: Any, serve: Serve, host: str
) -> None:
    # DNS rebinding: a page elsewhere whose name now resolves to 127.0.0.1 sends its own name.
    assert not allowed_host(host)
    await _seed(real_runtime)
    async with serve(real_runtime) as base, httpx.AsyncClient(base_url=base) as http:
        refused = await http.get("/w/wf-sec", headers={"Host": host})
        assert refused.status_code == 421
        assert "plan" not in refused.text
        for good in ("127.0.0.1", "localhost:8765", "[::1]:8765"):
            assert (await http.get("/", headers={"Host": good})).status_code == 200


async def test_no_verb_but_get_is_answered(
    real_runtime: Any, real_redis: Any, serve: Serve
) -> None:
    await _seed(real_runtime)
    before = await _mine(real_redis, real_runtime)
    async with serve(real_runtime) as base, httpx.AsyncClient(base_url=base) as http:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            for path in ("/", "/w/wf-sec", "/w/wf-sec/step/s1?agent=a1"):
                answer = await http.request(method, path, content=b'{"turn": 2}')
                assert answer.status_code == 405, (method, path)
    assert await _mine(real_redis, real_runtime) == before


@pytest.mark.parametrize(
    "path",
    [
        "/w/a%20b",
        "/w/x%00y",
        "/w/%2e%2e",
        "/w/wf-sec/step/%2e%2e?agent=a1",
        "/w/wf-sec/step/s1?agent=..%2F..",
        "/w/wf-sec/step/s1?agent=a%3Ab",
        "/w/wf-sec/spaces/%2e%2e",
        "/w/wf-sec/recall/a%0Ab?q=x",
        "/w/wf-sec?after=1-2-3",
        "/w/wf-sec?agent=*",
        "/w/" + "a" * 300,
    ],
)
async def test_hostile_ids_get_a_client_error_and_touch_nothing(
    real_runtime: Any, real_redis: Any, serve: Serve, path: str
) -> None:
    await _seed(real_runtime)
    before = await _mine(real_redis, real_runtime)
    async with serve(real_runtime) as base, httpx.AsyncClient(base_url=base) as http:
        page = await http.get(path)
        assert 400 <= page.status_code < 500, (path, page.status_code, page.text[:200])
        as_json = await http.get(path, headers={"Accept": "application/json"})
        assert 400 <= as_json.status_code < 500
    assert await _mine(real_redis, real_runtime) == before


async def test_an_agents_markup_is_shown_as_text(real_runtime: Any, serve: Serve) -> None:
    mem = real_runtime.memory("wf-xss", "s1", "a1")
    hostile = '<script>document.title="owned"</script><img src=x onerror=alert(1)>'
    await mem.log_turn(1, hostile, {"x": hostile}, hostile, 1)
    await mem.save_checkpoint('{"note": "' + hostile.replace('"', "'") + '"}')
    async with serve(real_runtime) as base, httpx.AsyncClient(base_url=base) as http:
        for path in ("/w/wf-xss", "/w/wf-xss/step/s1?agent=a1", "/?q=<script>"):
            page = await http.get(path)
            assert page.status_code == 200
            assert "<script>document" not in page.text and "<img src=x" not in page.text
            assert "&lt;script&gt;" in page.text or "&lt;" in page.text
            assert "default-src 'self'" in page.headers["content-security-policy"]


async def test_secrets_are_shown_redacted_as_stored(real_runtime: Any, serve: Serve) -> None:
    mem = real_runtime.memory("wf-secret", "s1", "a1")
    secret = "sk-live-0123456789abcdefSECRET"
    await mem.log_turn(1, f"calling with api_key={secret}", {"api_key": secret}, "ok", 1)
    await mem.save_checkpoint('{"password": "' + secret + '"}')
    await mem.remember(f"the token is token={secret}")
    async with serve(real_runtime) as base, httpx.AsyncClient(base_url=base) as http:
        for path in (
            "/w/wf-secret",
            "/w/wf-secret?format=json",
            "/w/wf-secret/step/s1?agent=a1",
            "/w/wf-secret/step/s1?agent=a1&format=json",
            "/w/wf-secret/recall/a1?q=token",
            "/health?format=json",
        ):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert secret not in page.text, path
