"""The jarvismem modules and classes one call passes through, in call order.

``python -m benchmarks.callpath [--redis-url URL] [--json]`` runs a runtime over
Redis and a local blob folder, makes one warm-up turn (state made on first use
is not the steady path), then traces one more ``log_turn`` and one
``rehydrate_bundle`` with :func:`sys.setprofile`. Background tasks the call
schedules are traced too, as long as they run before the call returns. The
figures go in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = "jarvismem"


class _Trace:
    """Modules (in first-call order) and classes whose code ran."""

    def __init__(self) -> None:
        self.modules: list[str] = []
        self.classes: list[str] = []

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module != PACKAGE and not module.startswith(PACKAGE + "."):
            return
        if module not in self.modules:
            self.modules.append(module)
        qualname = frame.f_code.co_qualname
        if "." in qualname and "<locals>" not in qualname:
            owner = f"{module}.{qualname.rsplit('.', 1)[0]}"
            if owner not in self.classes:
                self.classes.append(owner)


def _lines(module: str) -> int:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return 0 if path is None else len(Path(path).read_text().splitlines())


async def _traced(call: Callable[[], Awaitable[Any]]) -> _Trace:
    trace = _Trace()
    sys.setprofile(trace)
    try:
        await call()
        # Let what the call scheduled on the loop run too (it is on the path).
        for _ in range(3):
            await asyncio.sleep(0)
    finally:
        sys.setprofile(None)
    return trace


async def measure(redis_url: str) -> dict[str, Any]:
    """Trace one steady ``log_turn`` and one ``rehydrate_bundle``."""
    from jarvismem import MemoryRuntime
    from jarvismem.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            redis_url=redis_url,
            storage_backend="local",
            storage_base_path=os.path.join(tmp, "blob"),
            outbox_path=os.path.join(tmp, "outbox"),
            jarvismem_namespace=f"callpath{os.getpid()}",
            athena_url=None,
            llm_base_url=None,
        )
        async with await MemoryRuntime.from_env(settings) as runtime:
            mem = runtime.memory("wf", "step", "agent")
            await mem.log_turn(1, "think", "act", "warm up")
            await mem.rehydrate_bundle()
            turn = await _traced(lambda: mem.log_turn(2, "think", "act", "hello"))
            bundle = await _traced(mem.rehydrate_bundle)
            keys = await runtime.redis.keys(f"callpath{os.getpid()}*")
            if keys:
                await runtime.redis.delete(*keys)
    return {
        name: {
            "modules": t.modules,
            "module_lines": sum(_lines(m) for m in t.modules),
            "classes": t.classes,
        }
        for name, t in (("log_turn", turn), ("rehydrate_bundle", bundle))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callpath", description=__doc__)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.redis_url))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, r in result.items():
        print(
            f"{name}: {len(r['modules'])} modules ({r['module_lines']:,} lines), "
            f"{len(r['classes'])} classes"
        )
        for i, m in enumerate(r["modules"], 1):
            print(f"  {i:2}. {m}")
        print("  classes: " + ", ".join(c.rsplit(".", 1)[1] for c in r["classes"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
