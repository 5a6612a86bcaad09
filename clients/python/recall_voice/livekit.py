"""recall memory for LiveKit Agents (``livekit-agents`` 1.x).

:class:`RecallMemory` gives an ``AgentSession`` a memory:

* it records each user/agent exchange of the session as a recall turn,
  from the session's ``conversation_item_added`` events, in a background
  task: the conversation never waits on recall to record;
* before the LLM answers, it puts what recall remembers about the user —
  their memory, looked up with what they just said — into the turn's chat
  context as a system message (:meth:`RecallMemory.on_user_turn_completed`,
  called from the agent's own ``on_user_turn_completed``), waiting at most
  150 ms for it: a read that misses goes on with the last memory read, and
  the miss is counted in :attr:`RecallMemory.stats`.

Use :class:`RecallAgent` as the agent's base class, or call
:meth:`RecallMemory.on_user_turn_completed` from your agent's override::

    memory = RecallMemory(client, agent_id="kairix", user_id=participant.identity)
    await memory.start(session)
    await session.start(RecallAgent(memory, instructions="..."), room=ctx.room)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from livekit.agents import Agent, AgentSession, llm
from livekit.agents.voice.events import CloseEvent, ConversationItemAddedEvent

from .client import RecallClient, RecallError
from .memory import DEFAULT_TIMEOUT_SECS, MemoryReader, ReadStats

__all__ = ["DEFAULT_HEADER", "RecallAgent", "RecallMemory"]

logger = logging.getLogger("recall_voice.livekit")

# The injected message starts with this line.
DEFAULT_HEADER = "Background from earlier conversations with this user (recall memory):"


@dataclass(frozen=True)
class _Turn:
    user_message: str
    agent_response: str


class RecallMemory:
    """One LiveKit session's memory with recall.

    Args:
        client: The recall client (the caller owns and closes it).
        agent_id: The agent whose memory this is.
        user_id: The person talking with it: whose turns are recorded and
            whose memory is read (only theirs).
        connection_id: The voice connection (the room, say); a random one by
            default.
        budget_tokens: The budget of the memory put into each turn.
        timeout_secs: Longest a turn waits for memory (150 ms).
        header: The first line of the injected system message.
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        agent_id: str,
        user_id: str,
        connection_id: str | None = None,
        budget_tokens: int = 2000,
        timeout_secs: float = DEFAULT_TIMEOUT_SECS,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self._client = client
        self.agent_id = agent_id
        self.user_id = user_id
        self.connection_id = connection_id or str(uuid.uuid4())
        self._reader = MemoryReader(
            client,
            agent_id=agent_id,
            user_id=user_id,
            budget_tokens=budget_tokens,
            timeout_secs=timeout_secs,
            live=False,
        )
        self._header = header
        self.session_id: str | None = None
        self.turns_recorded = 0
        self.errors: list[RecallError] = []
        self._user_parts: list[str] = []
        self._ops: asyncio.Queue[_Turn | None] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._session: AgentSession[Any] | None = None
        self._closing: asyncio.Task[None] | None = None

    @property
    def stats(self) -> ReadStats:
        """How the memory reads went: fresh, cached, misses."""
        return self._reader.stats

    async def start(self, session: AgentSession[Any]) -> None:
        """Starts the recall session and follows ``session``: its exchanges
        are recorded, and its close ends the recall session."""
        try:
            started = await self._client.start_session(
                self.agent_id, self.user_id, self.connection_id
            )
            self.session_id = str(started["session_id"])
        except RecallError as e:
            # Memory failing never stops the call: nothing is recorded.
            logger.warning("recall: could not start a session; this call is not recorded: %s", e)
            self.errors.append(e)
            return
        self._sender = asyncio.create_task(self._send())
        self._session = session
        session.on("conversation_item_added", self._on_item)
        session.on("close", self._on_close)

    def _on_item(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if not isinstance(item, llm.ChatMessage) or self._closing is not None:
            return
        text = (item.text_content or "").strip()
        if not text:
            return
        if item.role == "user":
            self._user_parts.append(text)
        elif item.role == "assistant":
            user = " ".join(self._user_parts)
            self._user_parts.clear()
            self._ops.put_nowait(_Turn(user, text))

    def _on_close(self, _event: CloseEvent) -> None:
        self._close_task()

    async def _send(self) -> None:
        while True:
            op = await self._ops.get()
            if op is None:
                return
            try:
                await self._client.record_turn(
                    self.connection_id,
                    op.user_message,
                    op.agent_response,
                    agent_id=self.agent_id,
                    user_id=self.user_id,
                )
                self.turns_recorded += 1
            except Exception as e:
                # One failed turn never stops the later ones, nor the end.
                error = _as_recall_error(e)
                logger.warning("recall: a turn was not recorded: %s", error)
                self.errors.append(error)

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        """Puts the user's memory for what they just said into ``turn_ctx``
        (the chat context of the answer about to be made), within the time
        limit."""
        memory = await self._reader.memory((new_message.text_content or "").strip())
        if memory.strip():
            turn_ctx.add_message(role="system", content=f"{self._header}\n{memory.strip()}")

    def _close_task(self, timeout_secs: float = 10.0) -> asyncio.Task[None]:
        """The one close, started at the first ask (the session's close
        event, or :meth:`aclose`)."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(timeout_secs))
        return self._closing

    async def aclose(self, timeout_secs: float = 10.0) -> None:
        """Records what is left (an answer cut short has no answer: the
        user's words alone), ends the recall session and stops. Every call
        waits for the one close."""
        await asyncio.shield(self._close_task(timeout_secs))

    async def _close(self, timeout_secs: float) -> None:
        if self._session is not None:
            self._session.off("conversation_item_added", self._on_item)
            self._session.off("close", self._on_close)
        await self._reader.close()
        if self._sender is None:
            return
        if self._user_parts:
            self._ops.put_nowait(_Turn(" ".join(self._user_parts), ""))
            self._user_parts.clear()
        self._ops.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._sender), timeout_secs)
        except TimeoutError:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self.errors.append(RecallError("timeout", "turns still queued at the end"))
        finally:
            try:
                await self._client.end_session(
                    self.connection_id,
                    reason="disconnect",
                    agent_id=self.agent_id,
                    user_id=self.user_id,
                )
            except Exception as e:
                error = _as_recall_error(e)
                logger.warning("recall: could not end the session: %s", error)
                self.errors.append(error)


def _as_recall_error(e: Exception) -> RecallError:
    """Any failure of a recall call as a RecallError (anything else is a
    bug here: logged with its traceback)."""
    if isinstance(e, RecallError):
        return e
    logger.exception("unexpected error in a recall call", exc_info=e)
    error = RecallError("internal", f"{type(e).__name__}: {e}")
    error.__cause__ = e
    return error


class RecallAgent(Agent):
    """An ``Agent`` whose every answer is made with the user's recall memory
    (see :meth:`RecallMemory.on_user_turn_completed`). Takes ``Agent``'s
    arguments after the memory."""

    def __init__(self, memory: RecallMemory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memory = memory

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        await self.memory.on_user_turn_completed(turn_ctx, new_message)
