"""OpenTelemetry traces and metrics, and the workflow/step/agent ids on log records.

jarvismem reports to the OpenTelemetry providers of the process (the global
ones, unless :func:`use_providers` names others), through the API package alone
(the ``[otel]`` extra). Without that package every helper here is a no-op that
costs one call; with the API but no SDK configured, spans are non-recording and
are dropped at once, before any attribute is built. jarvismem never configures a
provider or an exporter itself: that is the application's choice.

What is reported (docs/integrations.md lists it too):

* spans: ``jarvismem.log_turn``; ``jarvismem.rehydrate_bundle`` with one child
  ``jarvismem.rehydrate_bundle.<tier>`` per tier read; ``jarvismem.compaction``;
  ``jarvismem.outbox.deliver`` (a replay of a local outbox); ``jarvismem.athena.request``.
  Background work (compaction, outbox delivery) starts a new trace *linked* to
  the span that was current when it started: a kernel's turn that triggered a
  compaction is not held open by it.
* attributes: ids, counts, sizes, outcomes, error class names. Never a turn's
  content, a query, a summary, an exception message or a URL: an exception's
  text may quote the value that caused it.
* metrics (see the ``METRIC_*`` names): turns logged, outbox depth and drops,
  degraded tier reads, Athena circuit states, compaction runs and duration.
* log records: the records of jarvismem's loggers (:func:`logger`) carry
  ``workflow_id``, ``step_id`` and ``agent_id`` attributes while a turn, a
  bundle or a compaction of that workflow runs (set only when known, so a
  formatter naming them needs ``defaults=``). Add :class:`ContextFilter` to a
  handler to stamp every record that passes through it.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

from jarvismem.errors import LockNotAcquiredError

try:
    from opentelemetry import context as _otel_context
    from opentelemetry import metrics as _otel_metrics
    from opentelemetry import trace as _otel_trace
except ImportError:  # the [otel] extra is not installed: every helper below is a no-op
    _otel_context = None  # type: ignore[assignment]
    _otel_metrics = None  # type: ignore[assignment]
    _otel_trace = None  # type: ignore[assignment]

__all__ = [
    "AVAILABLE",
    "ContextFilter",
    "SpanHandle",
    "athena_request",
    "compaction",
    "degraded",
    "enabled",
    "log_ids",
    "log_turn",
    "logger",
    "note",
    "outbox_delivery",
    "outbox_dropped",
    "rehydrate_bundle",
    "set_enabled",
    "span",
    "use_providers",
    "watch_circuit",
    "watch_outbox",
]

AVAILABLE: bool = _otel_trace is not None
"""True when the OpenTelemetry API can be imported (the ``[otel]`` extra)."""

# What the helpers check: the API is there and reporting is not switched off.
_enabled: bool = AVAILABLE

INSTRUMENTATION_NAME = "jarvismem"

SPAN_LOG_TURN = "jarvismem.log_turn"
SPAN_REHYDRATE = "jarvismem.rehydrate_bundle"
SPAN_REHYDRATE_TIER = "jarvismem.rehydrate_bundle."  # + the tier name
SPAN_COMPACTION = "jarvismem.compaction"
SPAN_OUTBOX_DELIVERY = "jarvismem.outbox.deliver"
SPAN_ATHENA = "jarvismem.athena.request"

METRIC_TURNS = "jarvismem.turns.logged"
METRIC_OUTBOX_DEPTH = "jarvismem.outbox.depth"
METRIC_OUTBOX_DROPPED = "jarvismem.outbox.dropped"
METRIC_DEGRADED = "jarvismem.tier.degraded"
METRIC_CIRCUIT = "jarvismem.athena.circuit"
METRIC_COMPACTION_RUNS = "jarvismem.compaction.runs"
METRIC_COMPACTION_DURATION = "jarvismem.compaction.duration"

# Attribute keys. Values are ids, counts, sizes, outcomes and class names only.
WORKFLOW_ID = "jarvismem.workflow_id"
STEP_ID = "jarvismem.step_id"
AGENT_ID = "jarvismem.agent_id"
NAMESPACE = "jarvismem.namespace"
TURN_ID = "jarvismem.turn_id"
TIER = "jarvismem.tier"
OUTBOX = "jarvismem.outbox"
OUTCOME = "jarvismem.outcome"
CIRCUIT_STATE = "jarvismem.circuit.state"
ERROR_TYPE = "error.type"

AttrValue = str | bool | int | float
Attributes = Mapping[str, AttrValue]

P = ParamSpec("P")
R = TypeVar("R")

# --- log records ---------------------------------------------------------------------------

LOG_FIELDS = ("workflow_id", "step_id", "agent_id")

_IDS: contextvars.ContextVar[tuple[str | None, str | None, str | None] | None] = (
    contextvars.ContextVar("jarvismem_log_ids", default=None)
)


class ContextFilter(logging.Filter):
    """Stamps ``workflow_id``, ``step_id``, ``agent_id`` on a record (those known).

    Keeps a value the caller passed with ``extra=``. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ids = _IDS.get()
        if ids is not None:
            for field, value in zip(LOG_FIELDS, ids, strict=True):
                if value is not None and not hasattr(record, field):
                    setattr(record, field, value)
        return True


_CONTEXT_FILTER = ContextFilter()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` whose records carry the ids of the work in progress."""
    log = logging.getLogger(name)
    if _CONTEXT_FILTER not in log.filters:
        log.addFilter(_CONTEXT_FILTER)
    return log


def log_ids(
    workflow_id: str | None, step_id: str | None = None, agent_id: str | None = None
) -> contextvars.Token[tuple[str | None, str | None, str | None] | None]:
    """Make these the ids of the records logged from here on; reset with ``.reset(token)``."""
    return _IDS.set((workflow_id, step_id, agent_id))


def reset_log_ids(
    token: contextvars.Token[tuple[str | None, str | None, str | None] | None],
) -> None:
    """Undo :func:`log_ids`."""
    _IDS.reset(token)


# --- providers, tracer, instruments ---------------------------------------------------------


class _State:
    """The providers in use and what was obtained from them (reset by :func:`use_providers`)."""

    tracer_provider: Any = None  # None: the global one
    meter_provider: Any = None
    tracer: Any = None
    instruments: _Instruments | None = None


_state = _State()


def use_providers(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Report to these providers instead of the global ones (None: back to the global ones).

    For an application that keeps its providers out of the global slots, and for
    tests (a fresh SDK provider each, with in-memory exporters).
    """
    _state.tracer_provider = tracer_provider
    _state.meter_provider = meter_provider
    _state.tracer = None
    _state.instruments = None
    if _enabled:
        _instruments()  # the observable instruments exist before the first collection


def set_enabled(on: bool) -> None:
    """Switch jarvismem's reporting off (as if the ``[otel]`` extra were absent) or back on.

    The benchmark compares the two in one process; an application that keeps
    its providers but wants jarvismem quiet may use it too.
    """
    global _enabled
    _enabled = bool(on) and AVAILABLE
    use_providers(_state.tracer_provider, _state.meter_provider)


def enabled() -> bool:
    """True when jarvismem reports spans and metrics (the API is installed and not switched off)."""
    return _enabled


def _tracer() -> Any:
    tracer = _state.tracer
    if tracer is None and _enabled:
        # Lazily, so a provider set after jarvismem was imported is used (the
        # API's proxy tracer also hands over once a global provider is set).
        tracer = _state.tracer = _otel_trace.get_tracer(
            INSTRUMENTATION_NAME, tracer_provider=_state.tracer_provider
        )
    return tracer


class _Instruments:
    """The metric instruments of one meter."""

    def __init__(self, meter: Any) -> None:
        self.outbox_dropped = meter.create_counter(
            METRIC_OUTBOX_DROPPED,
            unit="{record}",
            description="Writes a local outbox could not keep (full, or a disk error): lost",
        )
        self.degraded = meter.create_counter(
            METRIC_DEGRADED,
            unit="{read}",
            description="Tier reads of a rehydrate bundle that failed, timed out or found "
            "writes still queued locally",
        )
        self.compaction_runs = meter.create_counter(
            METRIC_COMPACTION_RUNS, unit="{run}", description="Long-term compaction runs"
        )
        self.compaction_duration = meter.create_histogram(
            METRIC_COMPACTION_DURATION, unit="s", description="Duration of a compaction run"
        )
        meter.create_observable_counter(
            METRIC_TURNS,
            callbacks=[_observe_turns],
            unit="{turn}",
            description="Turns logged by this process",
        )
        meter.create_observable_gauge(
            METRIC_OUTBOX_DEPTH,
            callbacks=[_observe_outbox_depth],
            unit="{record}",
            description="Writes queued in local outboxes, waiting for their backend",
        )
        meter.create_observable_gauge(
            METRIC_CIRCUIT,
            callbacks=[_observe_circuits],
            unit="{circuit}",
            description="Athena delivery circuits in each state (closed, half_open, open)",
        )


def _instruments() -> _Instruments | None:
    inst = _state.instruments
    if inst is None and _enabled:
        # Made again after use_providers(): the SDK hands back an instrument
        # already made on the same meter (its callbacks are not registered twice).
        meter = _otel_metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=_state.meter_provider)
        inst = _state.instruments = _Instruments(meter)
    return inst


# --- spans -----------------------------------------------------------------------------------


class SpanHandle:
    """A recording span made current, or (``NO_SPAN``) nothing: every method is then a no-op."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Any = None, token: Any = None) -> None:
        self._span = span
        self._token = token

    @property
    def recording(self) -> bool:
        """True when attributes set here are kept (build costly ones only then)."""
        return self._span is not None and bool(self._span.is_recording())

    def set(self, key: str, value: AttrValue | Sequence[str] | None) -> None:
        """Set one attribute (None: skipped)."""
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def set_many(self, attributes: Attributes) -> None:
        if self._span is not None:
            self._span.set_attributes(attributes)

    def fail(self, exc: BaseException, outcome: str = "error") -> None:
        """Mark the span failed: the error class name, never its message (it may quote content)."""
        span = self._span
        if span is None:
            return
        name = type(exc).__name__
        span.set_attribute(OUTCOME, outcome)
        span.set_attribute(ERROR_TYPE, name)
        status = getattr(exc, "status", None)  # an HTTP status (AthenaError)
        if isinstance(status, int) and not isinstance(status, bool):
            span.set_attribute("http.response.status_code", status)
        span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, name))

    def __enter__(self) -> SpanHandle:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        span = self._span
        if span is None:
            return
        try:
            if exc is not None and span.is_recording():
                if isinstance(exc, Exception):
                    self.fail(exc)
                else:  # cancelled or interrupted: not the operation's failure
                    span.set_attribute(OUTCOME, "cancelled")
        finally:
            if self._token is not None:
                _otel_context.detach(self._token)
            span.end()


NO_SPAN = SpanHandle()

_ROOT: Any = None if _otel_context is None else _otel_context.Context()


def span(name: str, attributes: Attributes | None = None, *, root: bool = False) -> SpanHandle:
    """Start span ``name`` as the current one; use as ``with span(...) as s:``.

    ``root``: start a new trace linked to the current span (work in the
    background that the current operation only triggered). Returns ``NO_SPAN``
    when there is nothing to carry: no API, or the API's no-op tracer (no SDK
    configured), whose span context is invalid. A span an SDK sampled out is
    returned (not recording, attributes skipped) and made current all the same.
    """
    tracer = _tracer()
    if tracer is None:
        return NO_SPAN
    if root:
        current = _otel_trace.get_current_span().get_span_context()
        links = [_otel_trace.Link(current)] if current.is_valid else None
        started = tracer.start_span(name, context=_ROOT, links=links, attributes=attributes)
    else:
        started = tracer.start_span(name, attributes=attributes)
    if not started.get_span_context().is_valid:
        # The no-op tracer (API without a configured SDK): nothing to carry.
        return NO_SPAN
    # A sampled-out span is still made current: its children follow its decision.
    token = _otel_context.attach(_otel_trace.set_span_in_context(started))
    return SpanHandle(started, token)


def note(key: str, value: AttrValue) -> None:
    """Set an attribute on the current span when it records (e.g. a retry count)."""
    if _enabled:
        current = _otel_trace.get_current_span()
        if current.is_recording():
            current.set_attribute(key, value)


def _traced(
    name: str,
    *,
    start: Callable[..., Attributes] | None = None,
    end: Callable[[SpanHandle, Any], None] | None = None,
    root: bool = False,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate a coroutine function with span ``name``.

    ``start(*args, **kwargs)``: attributes from the arguments; ``end(handle,
    result)``: attributes from the result. Both run only when the span records.
    """

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            handle = span(name, root=root)
            if handle is NO_SPAN:
                return await fn(*args, **kwargs)
            with handle:
                if start is not None and handle.recording:
                    handle.set_many(start(*args, **kwargs))
                result = await fn(*args, **kwargs)
                if end is not None and handle.recording:
                    end(handle, result)
                return result

        return traced

    return decorate


# --- the instrumented operations ----------------------------------------------------------------


def _view_attributes(view: Any) -> dict[str, AttrValue]:
    attrs: dict[str, AttrValue] = {
        WORKFLOW_ID: view.workflow_id,
        STEP_ID: view.step_id,
        AGENT_ID: view.agent_id,
    }
    namespace = _namespace_of(view)
    if namespace is not None:
        attrs[NAMESPACE] = namespace
    return attrs


def _namespace_of(view: Any) -> str | None:
    keyspace = getattr(getattr(view, "runtime", None), "keyspace", None)
    namespace = getattr(keyspace, "namespace", None)
    return namespace if isinstance(namespace, str) else None


# Turns logged per namespace, read by the observable counter. A plain dict bump
# on the hot path: a synchronous counter's add() costs microseconds with an SDK.
_turns: dict[str, int] = {}


def _observe_turns(options: Any) -> list[Any]:
    return [_otel_metrics.Observation(n, {NAMESPACE: ns}) for ns, n in list(_turns.items())]


def log_turn(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorates ``UnifiedMemory.log_turn``: ids on log records, a span, the turn counted."""

    @functools.wraps(fn)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
        view: Any = args[0]
        token = _IDS.set((view.workflow_id, view.step_id, view.agent_id))
        try:
            if not _enabled:
                return await fn(*args, **kwargs)
            handle = span(SPAN_LOG_TURN)
            if handle is NO_SPAN:
                result = await fn(*args, **kwargs)
            else:
                with handle:
                    if handle.recording:
                        # The hot path's span carries the ids only, in one batch:
                        # with an SDK each attribute is validated under a lock
                        # (~1-3 us each). A failure adds the outcome and error class.
                        attrs = _view_attributes(view)
                        turn = args[1] if len(args) > 1 else kwargs.get("turn_id")
                        if isinstance(turn, str | int) and not isinstance(turn, bool):
                            attrs[TURN_ID] = str(turn)
                        handle.set_many(attrs)
                    result = await fn(*args, **kwargs)
            namespace = _namespace_of(view) or ""
            _turns[namespace] = _turns.get(namespace, 0) + 1
            return result
        finally:
            _IDS.reset(token)

    return traced


def _bundle_attributes(handle: SpanHandle, bundle: Any) -> None:
    if not isinstance(bundle, Mapping):
        return
    degraded_tiers = bundle.get("degraded") or {}
    handle.set_many(
        {
            "jarvismem.bundle.recent_turns": len(bundle.get("recent_turns") or ()),
            "jarvismem.bundle.degraded": len(degraded_tiers),
            "jarvismem.bundle.checkpoint": bundle.get("checkpoint") is not None,
            "jarvismem.bundle.scratchpad_chars": len(bundle.get("scratchpad") or ""),
            "jarvismem.bundle.summary_chars": len(bundle.get("ltm_summary") or ""),
            OUTCOME: "degraded" if degraded_tiers else "ok",
        }
    )
    if degraded_tiers:
        handle.set("jarvismem.bundle.degraded_tiers", sorted(degraded_tiers))


def rehydrate_bundle(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorates ``UnifiedMemory.rehydrate_bundle``: ids on log records and a span.

    The tiers' child spans come from :func:`tier_span` in the bundle reader.
    """

    def start(view: Any, *args: Any, **kwargs: Any) -> Attributes:
        attrs = _view_attributes(view)
        tail = args[0] if args else kwargs.get("ledger_tail")
        if isinstance(tail, int) and not isinstance(tail, bool):
            attrs["jarvismem.bundle.ledger_tail"] = tail
        return attrs

    traced = _traced(SPAN_REHYDRATE, start=start, end=_bundle_attributes)(fn)

    @functools.wraps(fn)
    async def with_ids(*args: P.args, **kwargs: P.kwargs) -> R:
        view: Any = args[0]
        token = _IDS.set((view.workflow_id, view.step_id, view.agent_id))
        try:
            return await traced(*args, **kwargs)
        finally:
            _IDS.reset(token)

    return with_ids


def tier_span(tier: str) -> SpanHandle:
    """The child span of one tier's read in a rehydrate bundle."""
    if not _enabled:
        return NO_SPAN
    # "ok" until degraded() says otherwise.
    return span(SPAN_REHYDRATE_TIER + tier, {TIER: tier, OUTCOME: "ok"})


def degraded(tier: str, reason: str, handle: SpanHandle = NO_SPAN, exc: Any = None) -> None:
    """Count a degraded tier read (``reason``: timeout, error, queued) and mark its span."""
    inst = _instruments()
    if inst is None:
        return
    attrs = {TIER: tier, "jarvismem.reason": reason}
    inst.degraded.add(1, attrs)
    if handle.recording:
        if isinstance(exc, BaseException):
            handle.fail(exc, outcome=reason)
        else:
            handle.set(OUTCOME, reason)


def _compaction_outcome(result: Any) -> str:
    if getattr(result, "compacted", False):
        return "compacted"
    if getattr(result, "failed", False):
        return "failed"
    if getattr(result, "fenced", False):
        return "fenced"
    return "nothing_new"


def compaction(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorates ``Compactor.compact``: a span (a new trace, linked), run count and duration."""

    @functools.wraps(fn)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
        compactor: Any = args[0]
        workflow_id = getattr(compactor, "workflow_id", None)
        token = _IDS.set((workflow_id, None, None))
        began = time.perf_counter()
        outcome = "error"
        try:
            if not _enabled:
                return await fn(*args, **kwargs)
            with span(SPAN_COMPACTION, root=True) as handle:
                if handle.recording and isinstance(workflow_id, str):
                    handle.set(WORKFLOW_ID, workflow_id)
                try:
                    result = await fn(*args, **kwargs)
                except LockNotAcquiredError:
                    # Another process compacts this workflow: not a failure.
                    outcome = "locked"
                    handle.set(OUTCOME, outcome)
                    raise
                outcome = _compaction_outcome(result)
                if handle.recording:
                    handle.set_many(
                        {
                            OUTCOME: outcome,
                            "jarvismem.compaction.entries": int(getattr(result, "entries", 0)),
                            "jarvismem.compaction.summary_chars": int(getattr(result, "chars", 0)),
                        }
                    )
                return result
        finally:
            _IDS.reset(token)
            inst = _instruments()
            if inst is not None:
                attrs = {OUTCOME: outcome}
                inst.compaction_runs.add(1, attrs)
                inst.compaction_duration.record(time.perf_counter() - began, attrs)

    return traced


def _outbox_kind(name: str) -> tuple[str, str | None]:
    """``redis[wf-1]`` -> (``redis``, ``wf-1``): a durable writer's name, split."""
    kind, _, rest = name.partition("[")
    return kind, (rest[:-1] if rest.endswith("]") else None)


def outbox_delivery(
    kind_of: Callable[[Any], str],
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorates one replay pass of an outbox (a new trace, linked to what started it).

    ``kind_of(self)``: the outbox's name (``redis[wf]``, ``athena``). The span
    records the records pending at the start and, on success, the delivered
    count returned (an ``int`` result) or the change of ``self.replayed`` or
    ``self.delivered``.
    """

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            owner: Any = args[0]
            outbox = getattr(owner, "outbox", None)
            if not _enabled or (outbox is not None and len(outbox) == 0):
                # Nothing queued: no span for an empty pass (a poll).
                return await fn(*args, **kwargs)
            kind, workflow_id = _outbox_kind(kind_of(owner))
            with span(SPAN_OUTBOX_DELIVERY, root=True) as handle:
                if not handle.recording:
                    return await fn(*args, **kwargs)
                handle.set(OUTBOX, kind)
                handle.set(WORKFLOW_ID, workflow_id)
                handle.set("jarvismem.outbox.pending", None if outbox is None else len(outbox))
                before = _delivered_of(owner)
                result = await fn(*args, **kwargs)
                delivered = result if isinstance(result, int) else _delivered_of(owner) - before
                handle.set("jarvismem.outbox.delivered", delivered)
                error = getattr(owner, "last_error", None)
                if isinstance(error, BaseException):
                    handle.fail(error)  # the outage that stopped the pass
                else:
                    handle.set(OUTCOME, "ok")
                return result

        return traced

    return decorate


def _delivered_of(owner: Any) -> int:
    for attr in ("replayed", "delivered"):
        value = getattr(owner, attr, None)
        if isinstance(value, int):
            return value
    return 0


def athena_request(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorates ``AthenaClient._call(method, path, ...)``: one span per request (with retries).

    The path is the route with ids only (query values travel in the body or
    parameters, never recorded); the base URL is not recorded (it may carry
    credentials).
    """
    return _traced(
        SPAN_ATHENA,
        start=lambda _client, method, path, *a, **k: {
            "http.request.method": str(method),
            "jarvismem.athena.path": str(path),
            "jarvismem.athena.policy": str(k.get("policy", "")),
        },
        end=lambda handle, _result: handle.set(OUTCOME, "ok"),
    )(fn)


def outbox_dropped(name: str, count: int = 1) -> None:
    """Count writes an outbox named ``name`` (``redis[wf]``, ``athena``) could not keep."""
    inst = _instruments()
    if inst is not None:
        inst.outbox_dropped.add(count, {OUTBOX: _outbox_kind(name)[0]})


# --- observed objects (weakly held) ---------------------------------------------------------------


class _Measurable(Protocol):
    def __len__(self) -> int: ...


_outboxes: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_circuits: weakref.WeakSet[Any] = weakref.WeakSet()
CIRCUIT_STATES = ("closed", "half_open", "open")


def watch_outbox(outbox: _Measurable, name: str) -> None:
    """Report ``len(outbox)`` in the outbox depth gauge under ``name``'s kind, while it lives."""
    if _enabled:
        _outboxes[outbox] = _outbox_kind(name)[0]
        _instruments()


def _snapshot(read: Callable[[], list[R]]) -> list[R]:
    """``read()`` of a weak collection, retried if the loop's thread changed it meanwhile.

    Observable callbacks run on the metric reader's thread (a periodic reader's).
    """
    for _ in range(3):
        try:
            return read()
        except RuntimeError:  # "changed size during iteration"
            continue
    return []


def _observe_outbox_depth(options: Any) -> list[Any]:
    totals: dict[str, int] = {}
    seen: set[Any] = set()
    for outbox, kind in _snapshot(lambda: list(_outboxes.items())):
        # Two objects over one file (two runtimes in a process) count it once.
        path = getattr(outbox, "path", None) or id(outbox)
        if path in seen:
            continue
        seen.add(path)
        try:
            depth = len(outbox)
        except Exception:  # a closed outbox: nothing to report
            continue
        totals[kind] = totals.get(kind, 0) + depth
    return [_otel_metrics.Observation(n, {OUTBOX: kind}) for kind, n in totals.items()]


def watch_circuit(circuit: Any) -> None:
    """Report an Athena delivery circuit (``reported_state()``) in the circuit gauge."""
    if _enabled:
        _circuits.add(circuit)
        _instruments()


def _observe_circuits(options: Any) -> list[Any]:
    counts = dict.fromkeys(CIRCUIT_STATES, 0)
    for circuit in _snapshot(lambda: list(_circuits)):
        state = circuit.reported_state()
        counts[state] = counts.get(state, 0) + 1
    return [_otel_metrics.Observation(n, {CIRCUIT_STATE: s}) for s, n in counts.items()]
