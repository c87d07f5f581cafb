"""An agent kernel whose turns are answered by a real OpenAI-compatible LLM.

With ``LLM_BASE_URL`` set (and ``LLM_API_KEY``, ``LLM_MODEL`` as your endpoint needs:
OpenAI, Azure OpenAI v1, Ollama, vLLM, LiteLLM), each turn sends the exact messages
``mem.preflight()`` assembles from memory (checkpoint, recent turns, scratchpad,
recalled facts) to the model through jarvismem's own client, the one the long-term
summarizer uses. Without it, a scripted agent answers, so the example runs anywhere.

With ``REDIS_URL`` set, run it twice: the second run resumes from the checkpoint (the
embedded default Redis is gone when the process exits, so then it starts over).
"""

import asyncio
import json
import sys

from jarvismem.backends.llm import ChatCompletionsClient
from jarvismem.runtime import MemoryRuntime

INSTRUCTIONS = "You are a research agent studying tides. Answer in one short sentence."
QUESTIONS = [
    "What causes the tides?",
    "Why are there two high tides a day?",
    "What is a spring tide?",
]


def scripted_answer(question: str) -> str:
    """The stand-in agent used when no LLM is configured."""
    return f"(scripted) I would look up: {question.rstrip('?').lower()}."


async def main() -> int:
    async with await MemoryRuntime.from_env() as runtime:
        settings = runtime.settings
        llm = ChatCompletionsClient.from_settings(settings) if settings.llm_base_url else None
        print(f"agent: llm {settings.llm_model}" if llm else "agent: scripted (no LLM_BASE_URL)")
        try:
            mem = runtime.memory("llm-kernel", "study", "agent-1")
            bundle = await mem.rehydrate_bundle()
            state = json.loads(bundle["checkpoint"] or '{"next_turn": 1}')
            for turn in range(state["next_turn"], len(QUESTIONS) + 1):
                question = QUESTIONS[turn - 1]
                # The prompt memory would send: instructions, then what memory holds.
                preflight = await mem.preflight(INSTRUCTIONS, question)
                if llm is not None:
                    answer = await llm.complete(preflight.messages, max_tokens=120)
                else:
                    answer = scripted_answer(question)
                await mem.log_turn(turn, question, "llm.complete" if llm else "scripted", answer)
                await mem.remember(f"{question} {answer}")
                await mem.save_checkpoint(json.dumps({"next_turn": turn + 1}))
                print(f"turn {turn}: {question} -> {answer.strip()}")
            tail = (await mem.rehydrate_bundle(ledger_tail=len(QUESTIONS)))["recent_turns"]
            print(f"ledger holds {len(tail)} turn(s)")
        finally:
            if llm is not None:
                await llm.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
