"""Quick start: a minimal agent kernel loop on jarvismem (runs with nothing configured)."""

import asyncio
import json

from jarvismem.runtime import MemoryRuntime


async def main() -> None:
    async with await MemoryRuntime.from_env() as runtime:
        mem = runtime.memory("quickstart", "step-1", "agent-1")
        bundle = await mem.rehydrate_bundle()  # after a crash: where was I?
        state = json.loads(bundle["checkpoint"] or '{"next_turn": 1}')
        for turn in range(state["next_turn"], 4):
            thought = f"turn {turn}: what should I look at next?"
            action, result = f"lookup({turn})", f"fact #{turn}"
            await mem.log_turn(turn, thought, action, result)
            await mem.save_checkpoint(json.dumps({"next_turn": turn + 1}))
        assert mem.working is not None
        await mem.working.write("finding", "facts 1-3 collected", scope="goal")
        bundle = await mem.rehydrate_bundle(ledger_tail=3)
        print("recent turns:", [t["turn_id"] for t in bundle["recent_turns"]])
        print("checkpoint:", bundle["checkpoint"])
        print(bundle["scratchpad"].splitlines()[0])


if __name__ == "__main__":
    asyncio.run(main())
