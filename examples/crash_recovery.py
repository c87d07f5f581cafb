"""Crash recovery: run a kernel in a child process, SIGKILL it mid-turn, resume it.

This is the `jarvismem demo` logic, used as a library. With nothing configured the
children use the embedded Redis server (here one in a temporary folder, stopped at
the end), a process of its own that outlives the killed child.
"""

import asyncio
import sys

from jarvismem.demo import run_demo
from jarvismem.settings import load_settings


async def main() -> int:
    settings = load_settings()
    summary = await run_demo(
        settings, env_file=".env", turns=10, kill_after=6, use_tmp=True, say=print
    )
    killed = summary["killed_child"]
    print(f"killed pid {killed['pid']} with {killed['signal']} in turn {killed['inflight_turn']}")
    print(
        f"resumed at turn {summary['resumed']['next_turn']}, re-ran {summary['resumed']['reruns']}"
    )
    print("verified" if summary["ok"] else "VERIFICATION FAILED")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
