"""A LiveKit voice agent with recall memory.

Every exchange is recorded to recall, and before each answer the caller's
memory (their earlier calls, their facts) is put into the LLM's context,
waited for at most 150 ms.

Run it (a LiveKit server, and keys for the speech and LLM services):

    pip install "./clients/python[livekit]" \\
        "livekit-agents[openai,deepgram,silero]>=1.8,<2"
    cargo run --release -- serve                      # recall, on 127.0.0.1:7878
    export LIVEKIT_URL=... LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=...
    export OPENAI_API_KEY=... DEEPGRAM_API_KEY=...
    python clients/python/examples/livekit_agent.py dev

Then join the room from a LiveKit client (the Agents Playground, say). The
caller's participant identity is their recall user id; the room is the
recall connection. `RECALL_URL` and `RECALL_TOKEN` point it at another
recall server.
"""

from __future__ import annotations

import os

from livekit.agents import AgentSession, JobContext, WorkerOptions, cli
from livekit.plugins import deepgram, openai, silero

from recall_voice import RecallClient
from recall_voice.livekit import RecallAgent, RecallMemory

AGENT_ID = os.environ.get("RECALL_AGENT_ID", "kairix")


async def entrypoint(ctx: JobContext) -> None:
    await ctx.connect()
    participant = await ctx.wait_for_participant()
    recall = RecallClient(
        os.environ.get("RECALL_URL", "http://127.0.0.1:7878"),
        token=os.environ.get("RECALL_TOKEN"),
    )
    memory = RecallMemory(
        recall,
        agent_id=AGENT_ID,
        user_id=participant.identity,
        connection_id=ctx.room.name,
    )
    session = AgentSession(
        stt=deepgram.STT(),
        llm=openai.LLM(model="gpt-4o-mini"),
        tts=openai.TTS(),
        vad=silero.VAD.load(),
    )

    async def close_recall() -> None:
        await memory.aclose()
        await recall.close()

    ctx.add_shutdown_callback(close_recall)
    await memory.start(session)
    await session.start(
        RecallAgent(
            memory,
            instructions=(
                "You are Kairix, a warm voice companion. Use what you remember "
                "about the caller naturally; never read your memory out."
            ),
        ),
        room=ctx.room,
    )
    await session.generate_reply(instructions="Greet the caller.")


if __name__ == "__main__":
    cli.run_app(WorkerOptions(entrypoint_fnc=entrypoint))
