"""The LiveKit Agents plug-in (``recall_voice.livekit``) in a real
``AgentSession`` in text mode (no LiveKit server: no room, no audio), with
a scripted LLM, against a real `recall serve`.

The session's exchanges are recorded as recall turns; the user's memory
from an earlier session reaches the LLM's chat context before it answers;
a recall that hangs costs each turn its 150 ms limit and no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from livekit.agents import AgentSession, llm
from livekit.agents.llm import ChatChunk, ChoiceDelta
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions
from recall_server import RecallServer, _free_port, serve_recall

from recall_voice import RecallClient
from recall_voice.livekit import DEFAULT_HEADER, RecallAgent, RecallMemory

SUMMARY_SECS = 20.0


class ScriptedLLM(llm.LLM):
    """An LLM that answers with the next of its scripted replies, and keeps
    the chat context of every request (what the model would have read)."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__()
        self._replies = list(replies)
        self.requests: list[llm.ChatContext] = []

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[Any] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **_kwargs: Any,
    ) -> llm.LLMStream:
        self.requests.append(chat_ctx.copy())
        reply = self._replies.pop(0) if self._replies else "Okay."
        return _ScriptedStream(self, reply, chat_ctx=chat_ctx, tools=tools or [], conn=conn_options)


class _ScriptedStream(llm.LLMStream):
    def __init__(
        self,
        owner: ScriptedLLM,
        reply: str,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[Any],
        conn: APIConnectOptions,
    ) -> None:
        super().__init__(owner, chat_ctx=chat_ctx, tools=tools, conn_options=conn)
        self._reply = reply

    async def _run(self) -> None:
        request_id = uuid.uuid4().hex
        for i, word in enumerate(self._reply.split(" ")):
            text = word if i == 0 else " " + word
            self._event_ch.send_nowait(
                ChatChunk(id=request_id, delta=ChoiceDelta(role="assistant", content=text))
            )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def recall_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecallServer]:
    with serve_recall(tmp_path_factory.mktemp("recall"), {}) as server:
        yield server


async def say(
    session: AgentSession[Any], memory: RecallMemory, agent: RecallAgent, text: str
) -> float:
    """One user turn, as a voice session makes it: the user's message, the
    agent's ``on_user_turn_completed`` (which text input alone does not
    call), then the answer. Returns the seconds the hook took."""
    chat_ctx = agent.chat_ctx.copy()
    message = chat_ctx.add_message(role="user", content=text)
    started = time.monotonic()
    await agent.on_user_turn_completed(chat_ctx, message)
    took = time.monotonic() - started
    await agent.update_chat_ctx(chat_ctx)
    await session.generate_reply()
    return took


@contextlib.asynccontextmanager
async def text_session(
    client: RecallClient, agent_id: str, user_id: str, replies: list[str], **memory_args: Any
) -> AsyncIterator[tuple[AgentSession[Any], RecallMemory, RecallAgent, ScriptedLLM]]:
    model = ScriptedLLM(replies)
    session: AgentSession[Any] = AgentSession(llm=model)
    memory = RecallMemory(client, agent_id=agent_id, user_id=user_id, **memory_args)
    agent = RecallAgent(memory, instructions="You are a friendly assistant.")
    await memory.start(session)
    await session.start(agent, record=False)
    try:
        yield session, memory, agent, model
    finally:
        await session.aclose()
        await memory.aclose()


async def stored_turns(client: RecallClient, session_id: str, n: int) -> list[dict[str, Any]]:
    """The session's stored turns once ``n`` are there (or the deadline):
    a turn is acknowledged when queued and written within recall's flush
    window, so a read right after the call may come before it."""
    deadline = time.monotonic() + SUMMARY_SECS
    while True:
        turns = await client.get_turns(session_id)
        if len(turns) >= n or time.monotonic() > deadline:
            return turns
        await asyncio.sleep(0.05)


async def wait_for_summary(client: RecallClient, session_id: str) -> None:
    await client.wait_for_summary(session_id, timeout_secs=SUMMARY_SECS)


def test_a_session_is_recorded_and_the_next_one_answers_with_its_memory(
    recall_server: RecallServer,
) -> None:
    async def scenario() -> None:
        agent_id, user_id = unique("agent"), unique("user")
        async with RecallClient(recall_server.base_url) as client:
            async with text_session(
                client,
                agent_id,
                user_id,
                ["Congratulations on Pixel! How is she settling in?", "Greyhounds love a sofa."],
                timeout_secs=5.0,
            ) as (session, memory, agent, _model):
                await session.run(user_input="I just adopted a greyhound called Pixel.")
                await session.run(user_input="She sleeps on the sofa all day.")
            first = memory.session_id
            assert first is not None and memory.errors == []
            assert memory.turns_recorded == 2
            turns = await stored_turns(client, first, 2)
            assert [(t["user_message"], t["agent_response"]) for t in turns] == [
                (
                    "I just adopted a greyhound called Pixel.",
                    "Congratulations on Pixel! How is she settling in?",
                ),
                ("She sleeps on the sofa all day.", "Greyhounds love a sofa."),
            ]
            session_record = await client.get_session(first)
            assert not session_record["live"]
            await wait_for_summary(client, first)

            # A later session: the memory is in the chat context the LLM reads.
            async with text_session(
                client, agent_id, user_id, ["Pixel, your greyhound."], timeout_secs=5.0
            ) as (session, memory, agent, model):
                await say(session, memory, agent, "What is my dog called?")
                await asyncio.sleep(0)
            read = model.requests[-1]
            system = [
                m.text_content or ""
                for m in read.items
                if isinstance(m, llm.ChatMessage) and m.role == "system"
            ]
            injected = [s for s in system if s.startswith(DEFAULT_HEADER)]
            assert len(injected) == 1, system
            assert "pixel" in injected[0].lower(), injected
            assert memory.stats.fresh == 1 and memory.stats.misses == 0
            turns = await stored_turns(client, memory.session_id, 1)
            assert [t["agent_response"] for t in turns] == ["Pixel, your greyhound."]

    asyncio.run(scenario())


def test_a_hung_server_costs_each_turn_its_limit_and_no_more() -> None:
    """recall answers starting the session, then hangs on every read: each
    turn's hook returns after the 150 ms limit, the last no later than the
    first, and the LLM answers every turn without memory."""

    async def scenario() -> None:
        hung = asyncio.Event()
        held: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)
            request = await reader.readuntil(b"\r\n\r\n")
            if request.startswith(b"GET /v1/agents/") and b"/context?" in request:
                hung.set()
                with contextlib.suppress(Exception):
                    while await reader.read(65536):
                        pass
                return
            # Everything else (starting and ending the session, turns)
            # answers at once.
            length = 0
            for line in request.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            body = b'{"session_id": "00000000-0000-0000-0000-000000000001"}'
            writer.write(
                b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with RecallClient(f"http://127.0.0.1:{port}", timeout_secs=30.0) as client:
                async with text_session(
                    client, "kairix", "mark", ["One.", "Two.", "Three.", "Four."]
                ) as (session, memory, agent, model):
                    waits = [await say(session, memory, agent, f"Question {i}?") for i in range(4)]
                assert hung.is_set()
                assert all(w < 0.150 + 0.35 for w in waits), waits
                assert waits[-1] < waits[0] + 0.2, waits
                assert memory.stats.misses == 4 and memory.stats.timeouts == 4
                assert len(model.requests) == 4
                for read in model.requests:
                    assert not any(
                        isinstance(m, llm.ChatMessage)
                        and (m.text_content or "").startswith(DEFAULT_HEADER)
                        for m in read.items
                    )
        finally:
            for w in held:
                w.close()
            server.close()

    asyncio.run(scenario())


def test_memory_that_cannot_start_never_stops_the_call() -> None:
    """No recall at all (nothing listens): the session runs and answers;
    the failure is kept, nothing is recorded."""

    async def scenario() -> None:
        url = f"http://127.0.0.1:{_free_port()}"
        async with RecallClient(url, timeout_secs=2.0) as client:
            async with text_session(client, "kairix", "mark", ["Hello!"]) as (
                session,
                memory,
                agent,
                model,
            ):
                await say(session, memory, agent, "Hi there")
            assert memory.session_id is None
            assert [e.code for e in memory.errors] == ["unreachable"]
            assert memory.turns_recorded == 0
            assert len(model.requests) == 1

    asyncio.run(scenario())
