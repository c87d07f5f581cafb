"""Azure Blob as the scratchpad store, configured from the environment.

    STORAGE_BACKEND=azure
    AZURE_STORAGE_CONNECTION_STRING=...   # Azurite: the well-known dev account
    AZURE_STORAGE_CONTAINER=jarvismem     # optional

Runs against Azurite (`azurite-blob --blobPort 10000`) or a real account.
"""

import asyncio

from jarvismem.runtime import MemoryRuntime


async def main() -> None:
    async with await MemoryRuntime.from_env() as runtime:
        assert runtime.blob is not None and runtime.blob.name == "azure", (
            "set STORAGE_BACKEND=azure"
        )
        mem = runtime.memory("azure-example", "plan", "planner")
        assert mem.working is not None
        await mem.working.write("note", "the scratchpad lives in an append blob")
        await mem.working.write("finding", "goal findings are carried to later steps", scope="goal")
        await mem.log_turn(1, "where is my memory?", "inspect()", "in Azure Blob")
        print("scratchpad blob:", mem.working.path)
        print(await mem.working.render())  # the bundle's scratchpad markdown
        health = await runtime.health()
        blob = health["backends"]["blob"]
        print(f"blob backend: {blob['backend']} reachable={blob['reachable']}")


if __name__ == "__main__":
    asyncio.run(main())
