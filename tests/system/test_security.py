"""Security: tenant isolation, redaction in every tier, credentials kept home, TLS to Redis.

(docker-compose's loopback-only ports are checked in tests/system/test_compose.py.)
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jarvismem.backends.athena import AthenaClient
from jarvismem.errors import AthenaError, BackendUnavailableError, JarvisMemError
from jarvismem.runtime import Lifecycle, MemoryRuntime
from jarvismem.testing.fake_athena import FakeAthenaServer
from tests.conftest import Factory
from tests.harness.redis_server import free_port

pytestmark = pytest.mark.integration


SECRET_KEY = "sk-" + "Zq9Xw8Vu7Ts6Rq5P" * 2
SECRET_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJlLXNlY3JldA"


def _ns() -> str:
    return "sec" + uuid.uuid4().hex[:10]


# --- tenant isolation -----------------------------------------------------------------------------


@pytest.fixture
def check_isolation(
    tmp_path: Path,
    real_redis: Any,
    local_blob: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_settings: Factory,
    make_runtime: Factory,
) -> Callable[..., Awaitable[None]]:
    """``await check_isolation(same_athena_tenant=...)``: two namespaces, each with its own
    runtime on the same Redis, blob folder and Athena, write under the same ids; each
    sees only its own data, keys, scratchpad and Athena session."""

    async def check(*, same_athena_tenant: bool) -> None:
        namespaces = [_ns(), _ns()]
        runtimes = [
            make_runtime(
                settings=make_settings(
                    jarvismem_namespace=ns,
                    athena_tenant_id="shared" if same_athena_tenant else ns,
                    outbox_path=tmp_path / "outbox" / ns,
                ),
                redis=real_redis,
                blob=local_blob,
                athena=make_athena_client(athena_server.url, max_retries=0),
            )
            for ns in namespaces
        ]
        mems = [rt.memory("wf-same", "s1", "agent-same") for rt in runtimes]
        for ns, mem in zip(namespaces, mems, strict=True):
            await mem.log_turn(1, f"private thought of {ns}", "act", "res")
            await mem.save_checkpoint(json.dumps({"owner": ns}))
            assert mem.ltm is not None
            await mem.ltm.save_summary(f"summary of {ns}")
        sessions = []
        for ns, other, mem in zip(namespaces, reversed(namespaces), mems, strict=True):
            bundle = await mem.rehydrate_bundle()
            text = json.dumps(bundle)
            assert ns in text and other not in text
            assert json.loads(bundle["checkpoint"]) == {"owner": ns}
            athena_mem = await mem.runtime.athena_memory("agent-same")
            assert athena_mem is not None
            sessions.append(athena_mem.session_id)
            keys = [k.decode() async for k in real_redis.scan_iter(match=f"jm:{ns}:*")]
            assert keys and all(other not in k for k in keys)
        assert sessions[0] != sessions[1]
        paths = {mem.working.path for mem in mems if mem.working is not None}
        assert len(paths) == 2

    return check


async def test_two_namespaces_with_the_same_ids_never_see_each_others_data(
    check_isolation: Callable[..., Awaitable[None]],
) -> None:
    await check_isolation(same_athena_tenant=False)


async def test_two_namespaces_sharing_an_athena_tenant_do_not_share_athena_context(
    check_isolation: Callable[..., Awaitable[None]],
) -> None:
    await check_isolation(same_athena_tenant=True)


# --- redaction before anything leaves the process -------------------------------------------------


async def test_secrets_are_redacted_in_ledger_scratchpad_summary_and_athena_events(
    real_redis: Any,
    local_blob: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_memory: Factory,
) -> None:
    client = make_athena_client(athena_server.url, max_retries=0)
    mem = make_memory(redis=real_redis, blob=local_blob, athena=client)
    rt = mem.runtime
    assert await rt.athena_memory("a1") is not None
    await mem.log_turn(
        1,
        f"my key is {SECRET_KEY}",
        f"Authorization: Bearer {SECRET_JWT}",
        "password=hunter22secret",
    )
    assert mem.working is not None and mem.ltm is not None
    await mem.working.write("note", {"token": SECRET_KEY}, scope="goal")
    await mem.ltm.save_summary(f"the agent used {SECRET_KEY} and token={SECRET_JWT}")
    athena_mem = await rt.athena_memory("a1")
    assert athena_mem is not None
    await athena_mem.flush(timeout=5)

    stored: list[str] = [json.dumps(await mem.episodic.full_history())]  # type: ignore[union-attr]
    for path in await local_blob.list(""):
        stored.append((await local_blob.read(path)).decode("utf-8", "replace"))
    stored.append(
        json.dumps(
            {k.decode(): v.decode() for k, v in (await real_redis.hgetall(mem.ltm.key)).items()}
        )
    )
    stored.append(json.dumps([r.json for r in athena_server.requests]))
    assert any("REDACTED" in chunk for chunk in stored[-1:])  # events reached Athena
    for chunk in stored:
        for secret in (SECRET_KEY, SECRET_JWT, "hunter22secret"):
            assert secret not in chunk


async def test_secrets_nested_in_structured_turn_fields_are_redacted(
    real_redis: Any, local_blob: Any, make_memory: Factory
) -> None:
    mem = make_memory(redis=real_redis, blob=local_blob)
    await mem.log_turn(
        1,
        "t",
        {"tool": "http", "headers": [f"Bearer {SECRET_JWT}"]},
        {"note": f"key {SECRET_KEY}"},
    )
    stored = json.dumps(await mem.episodic.full_history())  # type: ignore[union-attr]
    assert SECRET_KEY not in stored and SECRET_JWT not in stored


# --- credentials only to the configured host ------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []
    location = ""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.location:
            self.send_response(307)
            self.send_header("Location", self.location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            body = b'{"status": "healthy"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def serve() -> Iterator[Callable[[type[BaseHTTPRequestHandler], str], ThreadingHTTPServer]]:
    """``serve(handler, host)``: an HTTP server on ``host`` (any port), shut down afterwards."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[BaseHTTPRequestHandler], host: str) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer((host, 0), handler)
        servers.append(server)
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


async def test_athena_credentials_are_not_sent_along_a_redirect_to_another_host(
    serve: Callable[[type[BaseHTTPRequestHandler], str], ThreadingHTTPServer],
    make_athena_client: Factory,
) -> None:
    other: type[_Recorder] = type("Other", (_Recorder,), {"seen": [], "location": ""})
    target = serve(other, "127.0.0.2")
    redirector: type[_Recorder] = type(
        "Redirector",
        (_Recorder,),
        {"seen": [], "location": f"http://127.0.0.2:{target.server_address[1]}"},
    )
    origin = serve(redirector, "127.0.0.1")
    client = make_athena_client(
        f"http://127.0.0.1:{origin.server_address[1]}",
        api_key=SECRET_KEY,
        jwt_token=SECRET_JWT,
        max_retries=0,
        timeout=2,
    )
    with pytest.raises(AthenaError) as info:
        await client.create_session("t", "u", "a")
    assert SECRET_KEY not in str(info.value) and SECRET_JWT not in str(info.value)
    assert redirector.seen and redirector.seen[0].get("x-api-key") == SECRET_KEY
    assert other.seen == []  # the other host never received anything, let alone the key


# --- no secret in logs, health or exceptions ------------------------------------------------------


async def test_no_secret_reaches_logs_health_or_exceptions_when_backends_fail(
    make_settings: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dead = free_port()
    azure_key = "QWxhZGRpbjpvcGVuIHNlc2FtZQ" * 3 + "=="
    s = make_settings(
        redis_url=f"redis://:redis-pass-{SECRET_KEY}@127.0.0.1:{dead}/0",
        redis_connect_retries=1,
        athena_url=f"http://127.0.0.1:{dead}",
        athena_api_key=SECRET_KEY,
        athena_jwt_token=SECRET_JWT,
        athena_http_timeout=0.5,
        llm_base_url=f"http://127.0.0.1:{dead}/v1",
        llm_api_key=SECRET_KEY,
        storage_backend="azure",
        azure_storage_connection_string=(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={azure_key};BlobEndpoint=http://127.0.0.1:{dead}/devstoreaccount1;"
        ),
        tier_timeout_episodic=0.3,
        tier_timeout_working=0.3,
        tier_timeout_ltm=0.3,
        tier_timeout_checkpoint=0.3,
        tier_timeout_athena=0.3,
    )
    secrets = (SECRET_KEY, SECRET_JWT, azure_key, "redis-pass")
    seen: list[str] = [repr(s), str(s), json.dumps(s.public_dict())]
    with pytest.raises(BackendUnavailableError) as info:
        await MemoryRuntime.from_env(s, require_redis=True)
    seen.append(str(info.value))

    # The same settings with Redis left out (so the runtime can start) and every
    # other backend dead: health and a failing turn must not leak either.
    from jarvismem.backends.blob import create_blob_storage
    from jarvismem.backends.redis_connect import create_redis

    rt = MemoryRuntime(
        s,
        redis=create_redis(s),
        blob=create_blob_storage(s),
        athena=AthenaClient.from_settings(s),
        lifecycle=Lifecycle(owns_clients=True),
    )
    mem = rt.memory("wf", "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")
    seen.append(json.dumps(await mem.health(), default=str))
    seen.append(json.dumps(await mem.rehydrate_bundle(), default=str))
    seen.append(repr(rt.athena))
    try:
        await rt.athena.create_session("t", "u", "a")  # type: ignore[union-attr]
    except JarvisMemError as exc:
        seen.append(str(exc) + repr(exc))
    await rt.close()
    seen += [r.getMessage() for r in caplog.records]
    seen += [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    for text in seen:
        for secret in secrets:
            assert secret not in text, text[:200]


# --- TLS ------------------------------------------------------------------------------------------


@pytest.fixture
def tls_redis(tmp_path: Path) -> Any:
    if not shutil.which("redis-server") or not shutil.which("openssl"):
        pytest.skip("redis-server or openssl missing")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(cert),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    import socket
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            pytest.skip(f"this redis-server build has no TLS support: {out[-200:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield port, cert
    proc.kill()
    proc.wait()


async def test_rediss_url_makes_a_real_tls_round_trip(
    tls_redis: Any, make_settings: Factory, make_runtime: Factory
) -> None:
    from jarvismem.backends.redis_connect import connect_redis

    port, cert = tls_redis
    s = make_settings(redis_url=f"rediss://127.0.0.1:{port}/0", redis_ssl_ca_certs=cert)
    client = await connect_redis(s)
    rt = make_runtime(settings=s, redis=client, lifecycle=Lifecycle(owns_clients=True))
    mem = rt.memory("wf-tls", "s1", "a1")
    await mem.log_turn(1, "over tls", "a", "r")
    assert [t["thought"] for t in await mem.episodic.tail(1)] == ["over tls"]  # type: ignore[union-attr]
    assert (await mem.health())["backends"]["redis"]["reachable"]


async def test_rediss_refuses_a_server_whose_certificate_is_not_trusted(
    tls_redis: Any, make_settings: Factory
) -> None:
    from jarvismem.backends.redis_connect import connect_redis

    port, _ = tls_redis
    s = make_settings(redis_url=f"rediss://127.0.0.1:{port}/0", redis_connect_retries=0)
    with pytest.raises(BackendUnavailableError):
        await connect_redis(s)
