"""Human text renderings of jarvismem data: ledger entries, bundles, spaces, health.

Pure functions from plain data (the dicts the runtime and its tiers return) to
text, shared by the CLI and the demo. Nothing here does I/O.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "fmt_ms",
    "fmt_ts",
    "render_athena_context",
    "render_bundle",
    "render_entry",
    "render_health",
    "render_hits",
    "render_spaces",
    "short",
    "to_json",
]


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """``data`` as JSON text (non-JSON values such as paths become strings)."""
    return json.dumps(data, ensure_ascii=False, indent=indent, default=str)


def fmt_ms(value: Any) -> str:
    """A latency in ms for humans (``-`` when unknown)."""
    return "-" if value is None else f"{float(value):.1f} ms"


def fmt_bytes(value: int) -> str:
    """A size in bytes for humans (``512 B``, ``3.4 KiB``, ``12.0 MiB``)."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_ts(value: Any) -> str:
    """An epoch-seconds timestamp as local ``YYYY-mm-dd HH:MM:SS`` (``-`` when unknown)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(value)))
    except (TypeError, ValueError, OverflowError):
        return "-"


def short(value: Any, limit: int = 100) -> str:
    """A value on one line, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else to_json(value, indent=None)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_entry(entry: Mapping[str, Any], width: int = 100) -> str:
    """One ledger entry on one line: id, time, turn, step/agent, thought → action = result."""
    if "turn_id" not in entry:
        fields = {k: v for k, v in entry.items() if k != "id"}
        return f"{entry.get('id', '?')}  {short(fields, width)}"
    body = " → ".join(
        short(entry[name], width // 2)
        for name in ("thought", "action")
        if entry.get(name) not in (None, "")
    )
    if entry.get("result") not in (None, ""):
        body += f" = {short(entry['result'], width // 2)}"
    who = f"{entry.get('step_id', '?')}/{entry.get('agent_id', '?')}"
    return (
        f"{entry.get('id', '?')}  {fmt_ts(entry.get('ts'))}  turn {entry['turn_id']:<4} "
        f"{who}  {body}"
    )


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def render_spaces(snapshot: Mapping[str, Any] | None) -> str:
    """A spaces snapshot: world map, task agenda with status, custom spaces, revisions."""
    if not snapshot:
        return "(no spaces written yet)"
    lines = [f"container {snapshot.get('id', '?')}  rev {snapshot.get('rev', 0)}"]
    spaces: Mapping[str, Any] = snapshot.get("spaces") or {}
    for name, space in spaces.items():
        data = space.get("data")
        kind = "map" if isinstance(data, dict) else "list"
        lines.append(f"  {name} ({kind}, rev {space.get('rev', 0)})")
        if name == "tasks" and isinstance(data, list):
            if not data:
                lines.append("      (no tasks)")
            for i, task in enumerate(data, 1):
                if isinstance(task, dict):
                    mark = "x" if task.get("status") == "done" else " "
                    lines.append(
                        f"      {i}. [{mark}] {short(task.get('text', ''), 80)}"
                        f"  ({task.get('id', '?')})"
                    )
                else:
                    lines.append(f"      {i}. {short(task, 80)}")
        elif isinstance(data, dict):
            if not data:
                lines.append("      (empty)")
            for key, value in data.items():
                lines.append(f"      {key}: {short(value, 80)}")
        elif isinstance(data, list):
            if not data:
                lines.append("      (empty)")
            for i, item in enumerate(data):
                lines.append(f"      [{i}] {short(item, 80)}")
    return "\n".join(lines)


def render_bundle(bundle: Mapping[str, Any]) -> str:
    """The rehydrate bundle in readable sections."""
    out: list[str] = []
    summary = bundle.get("ltm_summary")
    out.append("== Long-term summary ==")
    out.append(_indent(summary) if summary else "    (none yet)")
    turns = bundle.get("recent_turns") or []
    out.append(f"== Recent turns ({len(turns)}) ==")
    out.extend("    " + render_entry(t) for t in turns)
    if not turns:
        out.append("    (none)")
    out.append("== Checkpoint ==")
    checkpoint = bundle.get("checkpoint")
    out.append(f"    {checkpoint}" if checkpoint is not None else "    (none)")
    out.append("== Scratchpad ==")
    scratchpad = bundle.get("scratchpad") or ""
    out.append(_indent(scratchpad) if scratchpad else "    (empty)")
    athena = bundle.get("athena_context")
    out.append("== Athena context ==")
    if athena is None:
        out.append("    (not configured or unavailable)")
    else:
        out.append(_indent(render_athena_context(athena)))
    out.append("== Spaces ==")
    out.append(_indent(render_spaces(bundle.get("spaces"))))
    degraded = bundle.get("degraded") or {}
    out.append("== Degraded ==")
    if degraded:
        out.extend(f"    {tier}: {reason}" for tier, reason in degraded.items())
    else:
        out.append("    none: every configured tier answered")
    return "\n".join(out)


def render_athena_context(ctx: Mapping[str, Any]) -> str:
    """Athena short-term events and mid-term chains."""
    lines = [f"session {ctx.get('session_id', '?')}"]
    events = ctx.get("short_term") or []
    lines.append(f"short-term events ({len(events)}):")
    for ev in events:
        kind = ev.get("type") or ev.get("role") or "?"
        lines.append(f"  [{kind}] {short(ev.get('content', ''), 90)}")
    chains = ctx.get("mid_term") or []
    lines.append(f"mid-term chains ({len(chains)}):")
    for chain in chains:
        topic = chain.get("topic") or chain.get("id") or "?"
        lines.append(f"  - {short(topic, 40)}: {short(chain.get('summary', ''), 80)}")
    if ctx.get("user_persona"):
        lines.append(f"user persona: {short(ctx['user_persona'], 90)}")
    return "\n".join(lines)


def render_hits(hits: list[Mapping[str, Any]]) -> str:
    """Athena search results, best first."""
    if not hits:
        return "(no results)"
    lines = []
    for i, hit in enumerate(hits, 1):
        sim = hit.get("similarity")
        score = f"{sim:.3f}" if isinstance(sim, int | float) else "?"
        text = (
            hit.get("content") or hit.get("text") or hit.get("title") or to_json(hit, indent=None)
        )
        lines.append(f"{i:>2}. [{score}] {short(text, 100)}")
    return "\n".join(lines)


def embedded_server_lines(server: Mapping[str, Any]) -> list[str]:
    """The embedded Redis server in words: what runs, where its data is, how big its AOF."""
    running = (
        f"running, pid {server.get('pid')}, {server.get('clients')} client(s) connected"
        if server.get("running")
        else "not running"
        + (f" (pid {server['pid']} does not answer)" if server.get("pid") else "")
    )
    return [
        f"server: {server.get('version') or 'version unknown'} ({running})",
        f"binary: {server.get('binary') or 'none found'}",
        f"socket: {server.get('socket')}",
        f"data:   {server.get('folder')} (AOF {fmt_bytes(int(server.get('aof_bytes') or 0))})",
    ]


def write_check_lines(check: Mapping[str, Any]) -> list[str]:
    """``status --write-check``: the verdict, then one line per step with its time.

    ``write check: ok in 1.2 ms`` (or ``FAILED at <step>``, or ``not run (<why>)``),
    then e.g. ``  read back  ok  0.3 ms``, or ``  write  FAILED  <reason>``; a step
    after a failure reads ``not run``.
    """
    if check.get("ok") is None:
        return [f"write check: not run ({check.get('why') or 'no result'})"]
    steps = check.get("steps") or []
    if check["ok"]:
        head = f"write check: ok in {fmt_ms(check.get('ms'))}"
    else:
        head = f"write check: FAILED at {check.get('failed_step')}"  # the step line says why
    lines = [head]
    width = max((len(str(s.get("step"))) for s in steps), default=0)
    for s in steps:
        name = str(s.get("step")).ljust(width)
        if s.get("ok") is None:
            lines.append(f"  {name}  not run")
        elif s["ok"]:
            lines.append(f"  {name}  ok      {fmt_ms(s.get('ms'))}")
        else:
            lines.append(f"  {name}  FAILED  {s.get('reason') or ''}".rstrip())
    return lines


def render_health(health: Mapping[str, Any]) -> str:
    """``jarvismem status``: one line per backend, then the verdict and reasons."""
    lines = [f"namespace: {health.get('namespace')}"]
    for name, b in (health.get("backends") or {}).items():
        if not b.get("configured"):
            extra = f" (summarizer: {b['summarizer']})" if b.get("summarizer") else ""
            lines.append(f"  {name:<7} not configured{extra}")
            continue
        state = "reachable" if b.get("reachable") else "UNREACHABLE"
        if b.get("reachable") and b.get("writable") is False:
            state = "NOT WRITABLE"  # answers reads, refuses writes: not healthy
        backend = b.get("backend") or b.get("summarizer") or name
        where = b.get("where") or ""
        lines.append(
            f"  {name:<7} {backend:<12} {state:<12} {fmt_ms(b.get('latency_ms')):>10}  {where}"
        )
        if b.get("server"):
            lines.extend(f"          {line}" for line in embedded_server_lines(b["server"]))
        if b.get("model"):
            lines.append(f"          model: {b['model']}")
        if b.get("status"):
            lines.append(f"          status: {b['status']}")
        for dep, dep_state in (b.get("dependencies") or {}).items():
            lines.append(f"          - {dep}: {dep_state}")
        if b.get("reason"):
            lines.append(f"          reason: {b['reason']}")
        if b.get("write_check"):
            lines.extend(f"          {line}" for line in write_check_lines(b["write_check"]))
    if health.get("in_process"):
        lines.append(
            "note: Redis is the in-process stand-in of this command only "
            "(REDIS_URL=memory://, ephemeral); unset REDIS_URL for the embedded server"
        )
    reasons = health.get("reasons") or []
    lines.append("degraded: " + ("; ".join(reasons) if reasons else "no"))
    lines.append("OK" if health.get("ok") else "NOT OK")
    return "\n".join(lines)
