"""OpenTelemetry spans, metrics and log ids, read back through the SDK's in-memory exporters.

Each test reports to fresh SDK providers (``telemetry.use_providers``), so
nothing is set in the process's global slots and tests do not see each
other's spans. The memory runs on the real Redis server (and the fake Athena
server over real HTTP where Athena is part of the picture).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvismem import telemetry
from jarvismem.backends.outbox import Deliverer, Outbox
from jarvismem.errors import InvalidPayloadError
from jarvismem.resilience import Backoff
from jarvismem.settings import Settings
from jarvismem.testing.fake_athena import FakeAthenaServer
from jarvismem.tiers.athena.circuit import DeliveryCircuit
from jarvismem.tiers.durable import DurableWriter, WriterPolicy
from tests.conftest import REAL_REDIS_URL, REQUIRE_INTEGRATION, Factory, MakeSettings

if not REQUIRE_INTEGRATION:
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

ROOT = Path(__file__).resolve().parents[1]

# Turn content a test writes; no exported attribute may carry any of it.
SECRET = "sk-proj-" + "Zq7" * 12
CONTENT = {
    "thought": "ponder the zanzibar-walrus invoice",
    "action": f"call billing api with key {SECRET}",
    "result": "found the quetzal-marmalade ledger",
    "user_message": "please reconcile the aardvark-trombone account",
    "query": "which heliotrope-cobbler facts matter",
    "fact": "the customer prefers vermilion-porcupine invoices",
}


class Otel:
    """Fresh SDK providers with in-memory exporters, in use by jarvismem for one test."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str) -> list[Any]:
        """Every data point of ``metric`` in one collection."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def value(self, metric: str, **attributes: Any) -> Any:
        """The value (sum/gauge) of ``metric``'s point with exactly these attributes, or None."""
        want = {_attribute_key(k): v for k, v in attributes.items()}
        for point in self.points(metric):
            if dict(point.attributes or {}) == want:
                return point
        return None


def _attribute_key(name: str) -> str:
    return {"error_type": "error.type"}.get(name, f"jarvismem.{name}")


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    telemetry.use_providers(o.tracer_provider, o.meter_provider)
    try:
        yield o
    finally:
        telemetry.use_providers()
        o.tracer_provider.shutdown()
        o.meter_provider.shutdown()


@pytest.fixture
def settings(make_settings: MakeSettings) -> Settings:
    """Short tier timeouts (an outage test waits them out) and a tenant for Athena."""
    return make_settings(
        tier_timeout_episodic=0.5,
        tier_timeout_checkpoint=0.5,
        tier_timeout_ltm=0.5,
        tier_timeout_athena=1.0,
        athena_tenant_id="acme",
    )


def _exported_values(o: Otel) -> list[str]:
    """Every attribute value of every span, span event, link and metric point, as text."""
    values: list[Any] = []
    for s in o.finished():
        values.extend((s.attributes or {}).values())
        values.append(s.status.description or "")
        for event in s.events:
            values.extend((event.attributes or {}).values())
        for link in s.links:
            values.extend((link.attributes or {}).values())
    data = o.reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for m in scope.metrics:
                for point in m.data.data_points:
                    values.extend((point.attributes or {}).values())
    flat: list[str] = []
    for v in values:
        flat.extend(str(x) for x in v) if isinstance(v, tuple | list) else flat.append(str(v))
    return flat


# --- spans --------------------------------------------------------------------------------


async def test_log_turn_spans_carry_the_ids_and_the_turns_are_counted(
    otel: Otel, real_runtime: Any, workflow_id: str
) -> None:
    mem = real_runtime.memory(workflow_id, "s1", "a1")
    for turn in range(4):
        await mem.log_turn(turn, "t", "a", "r", tokens=3)
    spans = otel.finished(telemetry.SPAN_LOG_TURN)
    assert len(spans) == 4
    attrs = dict(spans[-1].attributes or {})
    namespace = real_runtime.keyspace.namespace
    assert attrs[telemetry.WORKFLOW_ID] == workflow_id
    assert attrs[telemetry.STEP_ID] == "s1"
    assert attrs[telemetry.AGENT_ID] == "a1"
    assert attrs[telemetry.NAMESPACE] == namespace
    assert attrs[telemetry.TURN_ID] == "3"
    assert telemetry.OUTCOME not in attrs  # set on failure only (the hot path stays lean)
    counted = otel.value(telemetry.METRIC_TURNS, namespace=namespace)
    assert counted is not None and counted.value == 4


async def test_a_refused_turn_is_an_error_span_that_names_the_error_class_only(
    otel: Otel, real_runtime: Any, workflow_id: str
) -> None:
    mem = real_runtime.memory(workflow_id, "s1", "a1")
    with pytest.raises(ValueError):
        await mem.log_turn(1, "t", "a", "r", tokens=-1)
    (span,) = otel.finished(telemetry.SPAN_LOG_TURN)
    attrs = dict(span.attributes or {})
    assert attrs[telemetry.OUTCOME] == "error"
    assert attrs["error.type"] == "ValueError"
    assert span.status.description == "ValueError"
    assert otel.value(telemetry.METRIC_TURNS, namespace=real_runtime.keyspace.namespace) is None


async def test_rehydrate_bundle_has_one_child_span_per_tier_read(
    otel: Otel,
    real_redis: Any,
    local_blob: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
    workflow_id: str,
) -> None:
    client = make_athena_client(athena_server.url, timeout=2.0)
    rt = make_runtime(redis=real_redis, blob=local_blob, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(1, "t", "a", "r")
    await mem.save_checkpoint('{"step": 1}')
    otel.spans.clear()

    bundle = await mem.rehydrate_bundle(ledger_tail=5)

    (root,) = otel.finished(telemetry.SPAN_REHYDRATE)
    assert root.parent is None
    children = [s for s in otel.finished() if s.parent and s.parent.span_id == root.context.span_id]
    tiers = {s.name.removeprefix(telemetry.SPAN_REHYDRATE_TIER) for s in children}
    assert tiers == {"ltm", "episodic", "checkpoint", "working", "athena", "spaces"}
    for child in children:
        assert child.context.trace_id == root.context.trace_id
        assert child.attributes is not None
        assert child.attributes[telemetry.TIER] == child.name.rsplit(".", 1)[1]
        assert child.attributes[telemetry.OUTCOME] == "ok"
    # Athena's HTTP calls of the bundle are children of the Athena tier's span.
    (athena_tier,) = [s for s in children if s.name.endswith(".athena")]
    requests = [
        s
        for s in otel.finished(telemetry.SPAN_ATHENA)
        if s.parent and s.parent.span_id == athena_tier.context.span_id
    ]
    assert requests and all(
        (s.attributes or {}).get("http.request.method") in {"GET", "POST"} for s in requests
    )
    attrs = dict(root.attributes or {})
    assert attrs[telemetry.WORKFLOW_ID] == workflow_id
    assert attrs["jarvismem.bundle.recent_turns"] == len(bundle["recent_turns"]) == 1
    assert attrs["jarvismem.bundle.checkpoint"] is True
    assert attrs["jarvismem.bundle.ledger_tail"] == 5
    assert attrs[telemetry.OUTCOME] == "ok"


async def test_no_exported_attribute_carries_turn_content_queries_summaries_or_secrets(
    otel: Otel,
    real_redis: Any,
    local_blob: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
    workflow_id: str,
) -> None:
    client = make_athena_client(athena_server.url, timeout=2.0)
    rt = make_runtime(redis=real_redis, blob=local_blob, athena=client)
    mem = rt.memory(workflow_id, "s1", "a1")
    for turn in range(3):
        await mem.log_turn(
            turn,
            CONTENT["thought"],
            CONTENT["action"],
            CONTENT["result"],
            user_message=CONTENT["user_message"],
        )
    deep: Any = CONTENT["thought"]
    for _ in range(200):  # deeper than any payload depth limit: refused, with the content
        deep = [deep]
    with pytest.raises(InvalidPayloadError):
        await mem.log_turn(9, deep, "", "")
    await mem.remember(CONTENT["fact"])
    await mem.recall(CONTENT["query"])
    await mem.save_checkpoint(json.dumps({"note": CONTENT["thought"]}))
    summary = await mem.compact_now()
    assert summary["compacted"], summary
    athena = await rt.athena_memory("a1")
    assert athena is not None
    await athena.flush(timeout=5.0)
    bundle = await mem.rehydrate_bundle(query=CONTENT["query"])
    assert bundle["ltm_summary"]  # a summary exists, and it must not be exported either

    values = _exported_values(otel)
    assert values, "nothing was exported"
    forbidden = [*CONTENT.values(), SECRET, bundle["ltm_summary"]]
    # Content words too, in case a value were cut or reworded.
    forbidden += [w for text in CONTENT.values() for w in text.split() if "-" in w]
    leaks = [(v, f) for v in values for f in forbidden if f in v]
    assert not leaks, leaks[:5]
    names = {s.name for s in otel.finished()}
    assert {telemetry.SPAN_LOG_TURN, telemetry.SPAN_REHYDRATE, telemetry.SPAN_COMPACTION} <= names
    assert telemetry.SPAN_ATHENA in names


async def test_an_athena_request_span_counts_retries_and_names_a_refusal_by_status(
    otel: Otel, athena_server: FakeAthenaServer, make_athena_client: Factory
) -> None:
    client = make_athena_client(athena_server.url, timeout=2.0, max_retries=2, backoff=0.0)
    athena_server.fail_next(1, status=503)
    await client.health()  # a read: retried once, then answered
    athena_server.fail_next(3, status=503)
    with pytest.raises(Exception) as refused:
        await client.health()
    retried, failed = otel.finished(telemetry.SPAN_ATHENA)
    first = dict(retried.attributes or {})
    assert first["http.request.method"] == "GET"
    assert first["jarvismem.athena.path"] == "/health"
    assert first["jarvismem.athena.retries"] == 1
    assert first[telemetry.OUTCOME] == "ok"
    second = dict(failed.attributes or {})
    assert second[telemetry.OUTCOME] == "error"
    assert second["error.type"] == type(refused.value).__name__
    assert second["http.response.status_code"] == 503
    assert second["jarvismem.athena.retries"] == 2


# --- compaction ---------------------------------------------------------------------------


async def test_a_compaction_run_is_a_linked_span_and_its_run_and_duration_are_recorded(
    otel: Otel, real_runtime: Any, workflow_id: str
) -> None:
    mem = real_runtime.memory(workflow_id, "s1", "a1")
    for turn in range(5):
        await mem.log_turn(turn, "t", "a", "r")
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("kernel step") as caller:
        result = await mem.compact_now()
    assert result["compacted"]

    (span,) = otel.finished(telemetry.SPAN_COMPACTION)
    # Background work: a trace of its own, linked to what started it.
    assert span.parent is None
    assert [link.context.span_id for link in span.links] == [caller.get_span_context().span_id]
    attrs = dict(span.attributes or {})
    assert attrs[telemetry.WORKFLOW_ID] == workflow_id
    assert attrs[telemetry.OUTCOME] == "compacted"
    assert attrs["jarvismem.compaction.entries"] == 5
    runs = otel.value(telemetry.METRIC_COMPACTION_RUNS, outcome="compacted")
    assert runs is not None and runs.value == 1
    duration = otel.value(telemetry.METRIC_COMPACTION_DURATION, outcome="compacted")
    assert duration is not None and duration.count == 1 and duration.sum > 0

    await mem.compact_now()  # nothing new: a run of its own outcome
    again = otel.value(telemetry.METRIC_COMPACTION_RUNS, outcome="nothing_new")
    assert again is not None and again.value == 1


# --- outboxes -----------------------------------------------------------------------------


async def test_outbox_depth_drops_and_delivery_spans(
    otel: Otel, unreachable_redis: Any, real_redis: Any, tmp_path: Path, keyspace: Any
) -> None:
    target = [unreachable_redis]
    key = keyspace.scratchpad("wf-telemetry", "s", "a")  # any key of the test's namespace

    async def apply(record: dict[str, Any]) -> Any:
        return await target[0].set(key, record["n"])

    writer = DurableWriter(
        "redis[wf-telemetry]",
        Outbox(tmp_path / "box.jsonl", max_entries=2),
        apply,
        policy=WriterPolicy(timeout=1.0),
    )
    try:
        for n in range(3):  # two queued during the outage, the third dropped: the outbox is full
            assert await writer.submit({"n": n}) is None
        depth = otel.value(telemetry.METRIC_OUTBOX_DEPTH, outbox="redis")
        assert depth is not None and depth.value == 2
        dropped = otel.value(telemetry.METRIC_OUTBOX_DROPPED, outbox="redis")
        assert dropped is not None and dropped.value == 1

        assert not await writer.flush(5.0, stop_at_failure=True)
        failed = otel.finished(telemetry.SPAN_OUTBOX_DELIVERY)
        assert failed, "no delivery span for the failed replay"
        attrs = dict(failed[-1].attributes or {})
        assert attrs[telemetry.OUTBOX] == "redis"
        assert attrs[telemetry.WORKFLOW_ID] == "wf-telemetry"
        assert attrs[telemetry.OUTCOME] == "error"
        assert attrs["error.type"] == "ConnectionError"

        target[0] = real_redis  # the backend is back
        otel.spans.clear()
        assert await writer.flush(5.0)
        delivered = [
            dict(s.attributes or {}) for s in otel.finished(telemetry.SPAN_OUTBOX_DELIVERY)
        ]
        assert delivered[-1][telemetry.OUTCOME] == "ok"
        assert sum(a["jarvismem.outbox.delivered"] for a in delivered) == 2
        depth = otel.value(telemetry.METRIC_OUTBOX_DEPTH, outbox="redis")
        assert depth is not None and depth.value == 0
    finally:
        await writer.close()


async def test_a_delivery_pass_is_a_span_with_its_count(otel: Otel, tmp_path: Path) -> None:
    # The depth gauge sums every live "athena" outbox of the process (weakly held):
    # collect an earlier test's unreachable ones first, and count from what is left.
    gc.collect()
    earlier = otel.value(telemetry.METRIC_OUTBOX_DEPTH, outbox="athena")
    base = earlier.value if earlier is not None else 0
    outbox = Outbox(tmp_path / "athena.jsonl")
    sent: list[dict[str, Any]] = []

    async def send(record: dict[str, Any]) -> None:
        sent.append(record)

    drainer = Deliverer(outbox, send, name="athena")
    try:
        await outbox.load()
        for n in range(3):
            await outbox.put({"n": n})
        assert otel.value(telemetry.METRIC_OUTBOX_DEPTH, outbox="athena").value == base + 3
        assert await drainer.run_once() == 3
        (span,) = otel.finished(telemetry.SPAN_OUTBOX_DELIVERY)
        attrs = dict(span.attributes or {})
        assert attrs[telemetry.OUTBOX] == "athena"
        assert attrs["jarvismem.outbox.pending"] == 3
        assert attrs["jarvismem.outbox.delivered"] == 3
        assert await drainer.run_once() == 0  # an empty pass makes no span
        assert len(otel.finished(telemetry.SPAN_OUTBOX_DELIVERY)) == 1
    finally:
        await outbox.close()


# --- degraded tiers and log ids -----------------------------------------------------------


async def test_an_outage_counts_degraded_tiers_and_log_records_carry_the_ids(
    otel: Otel,
    unreachable_redis: Any,
    local_blob: Any,
    make_runtime: Factory,
    workflow_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = make_runtime(redis=unreachable_redis, blob=local_blob)
    mem = rt.memory(workflow_id, "s1", "a1")
    with caplog.at_level(logging.WARNING, logger="jarvismem"):
        await mem.log_turn(1, "t", "a", "r")
        bundle = await mem.rehydrate_bundle()
    assert "episodic" in bundle["degraded"] and "redis_outbox" in bundle["degraded"]

    queued = otel.value(telemetry.METRIC_DEGRADED, tier="redis_outbox", reason="queued")
    assert queued is not None and queued.value == 1
    failed = otel.value(telemetry.METRIC_DEGRADED, tier="episodic", reason="error")
    assert failed is not None and failed.value == 1
    tier_spans = {s.name: s for s in otel.finished() if s.name.startswith("jarvismem.rehydrate_")}
    episodic = dict(tier_spans[telemetry.SPAN_REHYDRATE_TIER + "episodic"].attributes or {})
    assert episodic[telemetry.OUTCOME] == "error" and "error.type" in episodic
    root = dict(tier_spans[telemetry.SPAN_REHYDRATE].attributes or {})
    assert root[telemetry.OUTCOME] == "degraded"
    assert "episodic" in root["jarvismem.bundle.degraded_tiers"]

    # The outage warning was logged inside log_turn; the tier warning inside the bundle.
    outage = [r for r in caplog.records if "queueing writes" in r.getMessage()]
    tier = [r for r in caplog.records if "episodic tier degraded" in r.getMessage()]
    for record in (outage[0], tier[0]):
        assert (record.workflow_id, record.step_id, record.agent_id) == (workflow_id, "s1", "a1")


def test_a_handler_filter_stamps_the_ids_on_any_logger_and_keeps_an_explicit_extra(
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = logging.getLogger("an.application")
    stamp = telemetry.ContextFilter()
    caplog.handler.addFilter(stamp)
    token = telemetry.log_ids("wf-9", "s9", None)
    try:
        with caplog.at_level(logging.INFO, logger="an.application"):
            other.info("one")
            other.info("two", extra={"step_id": "given"})
    finally:
        telemetry.reset_log_ids(token)
        caplog.handler.removeFilter(stamp)
    first, second = caplog.records
    assert (first.workflow_id, first.step_id) == ("wf-9", "s9")
    assert not hasattr(first, "agent_id")  # unknown ids are not set
    assert second.step_id == "given"
    other.info("outside")
    assert telemetry._IDS.get() is None


def _athena_outbox_folder_becomes_a_file(root: Path) -> None:
    [data] = [p for p in root.rglob("*.jsonl") if "athena" in p.parts]
    for path in data.parent.iterdir():
        path.unlink()
    data.parent.rmdir()
    data.parent.write_text("not a folder")


async def test_an_athena_outbox_that_cannot_keep_a_record_counts_a_drop(
    otel: Otel,
    settings: Settings,
    real_redis: Any,
    athena_server: FakeAthenaServer,
    make_athena_client: Factory,
    make_runtime: Factory,
    workflow_id: str,
) -> None:
    rt = make_runtime(redis=real_redis, athena=make_athena_client(athena_server.url, timeout=2.0))
    mem = rt.memory(workflow_id, "s1", "a1")
    await mem.log_turn(0, "before", "", "")
    athena = await rt.athena_memory("a1")
    assert athena is not None
    await athena.flush(timeout=5.0)
    # The Athena outbox's folder becomes a file: every append fails, each a counted drop.
    await asyncio.to_thread(_athena_outbox_folder_becomes_a_file, Path(settings.outbox_path))
    for i in range(1, 3):
        await mem.log_turn(i, f"during {i}", "", "")
    dropped = otel.value(telemetry.METRIC_OUTBOX_DROPPED, outbox="athena")
    assert dropped is not None and dropped.value == 2


# --- the Athena circuit -------------------------------------------------------------------


def test_the_circuit_gauge_counts_circuits_per_state(otel: Otel) -> None:
    gc.collect()  # circuits of runtimes earlier tests closed are gone from the gauge

    def state(s: str) -> int:
        point = otel.value(telemetry.METRIC_CIRCUIT, **{"circuit.state": s})
        return 0 if point is None else int(point.value)

    before = {s: state(s) for s in ("closed", "half_open", "open")}
    now = [0.0]
    circuits = [
        DeliveryCircuit(
            failure_threshold=2,
            cooldown=10.0,
            backoff=Backoff(base=0.1, cap=1.0),
            clock=lambda: now[0],
        )
        for _ in range(3)
    ]
    # No watch_circuit() here: every DeliveryCircuit registers itself when made.
    circuits[0].record_failure()
    circuits[0].record_failure()  # open
    circuits[1].record_failure()
    circuits[1].record_failure()
    now[0] = 11.0  # circuit 1 is past its cooldown: half-open
    circuits[0].open_until = 20.0  # circuit 0 still open

    after = {s: state(s) - before[s] for s in before}
    assert after == {"closed": 1, "half_open": 1, "open": 1}


# --- without the SDK, and without the API -------------------------------------------------


async def test_the_api_without_an_sdk_records_nothing_and_costs_no_span(
    real_runtime: Any, workflow_id: str
) -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    telemetry.use_providers(NoOpTracerProvider(), NoOpMeterProvider())
    try:
        assert telemetry.span("x") is telemetry.NO_SPAN
        mem = real_runtime.memory(workflow_id, "s1", "a1")
        await mem.log_turn(1, "t", "a", "r")
        bundle = await mem.rehydrate_bundle()
        assert len(bundle["recent_turns"]) == 1
    finally:
        telemetry.use_providers()


async def test_switched_off_nothing_is_reported_even_to_an_sdk(
    otel: Otel, real_runtime: Any, workflow_id: str
) -> None:
    telemetry.set_enabled(False)
    try:
        assert not telemetry.enabled()
        mem = real_runtime.memory(workflow_id, "s1", "a1")
        await mem.log_turn(1, "t", "a", "r")
        await mem.rehydrate_bundle()
        assert otel.finished() == []
    finally:
        telemetry.set_enabled(True)
    await mem.log_turn(2, "t", "a", "r")
    assert [s.name for s in otel.finished()] == [telemetry.SPAN_LOG_TURN]


NO_OTEL_SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys, tempfile, uuid
    sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed

    from jarvismem import telemetry
    from jarvismem.runtime import MemoryRuntime
    from jarvismem.settings import load_settings

    assert telemetry.AVAILABLE is False
    assert telemetry.span("x") is telemetry.NO_SPAN
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logging.getLogger("jarvismem").addHandler(Keep())

    async def main():
        tmp = tempfile.mkdtemp()
        ns = "t" + uuid.uuid4().hex[:12]
        settings = load_settings(
            _env_file=None, redis_url=sys.argv[1], jarvismem_namespace=ns,
            outbox_path=tmp + "/outbox", storage_base_path=tmp + "/blobs",
            compaction_enabled=False,
        )
        async with await MemoryRuntime.from_env(settings) as rt:
            mem = rt.memory("wf-1", "s1", "a1")
            for turn in range(3):
                await mem.log_turn(turn, "t", "a", "r")
            assert (await mem.compact_now())["compacted"]
            bundle = await mem.rehydrate_bundle()
            assert len(bundle["recent_turns"]) == 3 and not bundle["degraded"]
            keys = [k async for k in rt.redis.scan_iter(match=f"jm:{ns}:*")]
            if keys:
                await rt.redis.delete(*keys)
        telemetry.degraded("episodic", "error")
        telemetry.outbox_dropped("redis[wf-1]")

    asyncio.run(main())
    loaded = [m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v]
    assert not loaded, loaded
    print("ok")
    """
)


def test_without_opentelemetry_everything_works_and_nothing_is_loaded(real_redis: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL_SCRIPT, REAL_REDIS_URL],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


async def test_switching_providers_back_and_forth_never_counts_a_turn_twice(
    otel: Otel, real_runtime: Any, workflow_id: str
) -> None:
    telemetry.use_providers()
    telemetry.set_enabled(False)
    telemetry.set_enabled(True)
    telemetry.use_providers(otel.tracer_provider, otel.meter_provider)
    telemetry.use_providers(otel.tracer_provider, otel.meter_provider)
    await real_runtime.memory(workflow_id, "s1", "a1").log_turn(1, "t", "a", "r")
    counted = otel.value(telemetry.METRIC_TURNS, namespace=real_runtime.keyspace.namespace)
    assert counted is not None and counted.value == 1


def test_use_providers_none_goes_back_to_the_global_providers() -> None:
    telemetry.use_providers()
    first = telemetry._tracer()
    telemetry.use_providers(TracerProvider(), MeterProvider())
    assert telemetry._tracer() is not first
    telemetry.use_providers()
