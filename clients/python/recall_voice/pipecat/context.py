"""Puts what recall remembers about the caller into the LLM's context.

On every ``LLMContextFrame`` on its way to the LLM, the injector asks recall
for the context of this call's user, looked up with the user's latest words
(``GET /v1/agents/{agent}/context?user_id=&message=&budget_tokens=``), and
adds its memory part — core-memory blocks with the user's own
``background_context``, the facts the user may see, the summaries of their
earlier calls — to the context as one system message. It is that user's
memory only: recall keeps each user of an agent apart, so nothing another
caller said reaches this call. The call's own turns stay where they are, in
the aggregators' context.
"""

from __future__ import annotations

from typing import Any, cast

from loguru import logger
from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import (
    LLMContext,
    LLMContextMessage,
    standard_message_text,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from ..client import RecallClient
from ..memory import DEFAULT_TIMEOUT_SECS, MemoryReader, ReadStats

__all__ = ["DEFAULT_HEADER", "RecallContextInjector", "apply_memory", "latest_user_text"]

# The injected message starts with this line. It also identifies the message
# on later turns, so it is replaced rather than added again; a marker inside
# the message dict (an extra key) could be rejected by an LLM API.
DEFAULT_HEADER = "Background from earlier conversations with this user (recall memory):"


def _as_dict(message: LLMContextMessage) -> dict[str, Any] | None:
    """A standard (OpenAI-shaped) message as a plain dict; None for a
    service-specific LLMSpecificMessage, which this module leaves alone."""
    return cast(dict[str, Any], message) if isinstance(message, dict) else None


def _is_system(message: LLMContextMessage) -> bool:
    m = _as_dict(message)
    return m is not None and m.get("role") == "system"


def _is_injected(message: LLMContextMessage, header: str) -> bool:
    m = _as_dict(message)
    content = m.get("content") if m is not None else None
    return _is_system(message) and isinstance(content, str) and content.startswith(header)


def latest_user_text(context: LLMContext) -> str:
    """The text of the context's latest user message ("" before the user
    has said anything): what recall looks the memory up with."""
    for message in reversed(context.get_messages()):
        m = _as_dict(message)
        if m is not None and m.get("role") == "user":
            return standard_message_text(message).strip()
    return ""


def apply_memory(context: LLMContext, memory: str, *, header: str = DEFAULT_HEADER) -> None:
    """Insert, update or remove the memory system message of a context.

    The message goes right after the leading system messages, so the
    application's own system prompt stays first. An empty ``memory`` removes
    the message: there is nothing (left) to remember.
    """
    messages = list(context.get_messages())
    kept = [m for m in messages if not _is_injected(m, header)]
    if memory.strip():
        position = 0
        while position < len(kept) and _is_system(kept[position]):
            position += 1
        injected = {"role": "system", "content": f"{header}\n{memory.strip()}"}
        kept.insert(position, cast(LLMContextMessage, injected))
    if kept != messages:
        context.set_messages(kept)


class RecallContextInjector(FrameProcessor):
    """Adds what recall remembers about the call's user to each LLM context.

    Place it between the user context aggregator and the LLM service. For
    each ``LLMContextFrame`` it reads the user's context from recall with
    the latest user message as the query, within ``budget_tokens``, through
    a :class:`~recall_voice.MemoryReader`: the frame waits at most
    ``fetch_timeout_secs`` (150 ms) for it, then goes on with the last
    memory read for this user (or none), and the miss is counted in
    :attr:`stats`. The same query is answered from a cache for
    ``refresh_secs`` (an LLM call may be repeated for one user turn, after
    a function call say).

    Args:
        client: The recall client to use (the caller owns and closes it).
        agent_id: The agent the call is with.
        user_id: The caller: whose memory is read (and only theirs).
        budget_tokens: Token budget of the memory recall assembles (the
            live call is left out: the aggregators' context has it).
        refresh_secs: How long the memory read for one query is reused.
        fetch_timeout_secs: Longest wait for the memory before an LLM call.
        header: The first line of the injected system message.
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        agent_id: str,
        user_id: str,
        budget_tokens: int = 2000,
        refresh_secs: float = 30.0,
        fetch_timeout_secs: float = DEFAULT_TIMEOUT_SECS,
        header: str = DEFAULT_HEADER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.agent_id = agent_id
        self.user_id = user_id
        self._reader = MemoryReader(
            client,
            agent_id=agent_id,
            user_id=user_id,
            budget_tokens=budget_tokens,
            timeout_secs=fetch_timeout_secs,
            refresh_secs=refresh_secs,
            live=False,
        )
        self._header = header

    @property
    def stats(self) -> ReadStats:
        """How the reads went: fresh, cached, misses (timeouts among them)."""
        return self._reader.stats

    async def memory(self, query: str) -> str:
        """The user's memory for ``query``, within the time limit."""
        misses = self._reader.stats.misses
        memory = await self._reader.memory(query)
        if self._reader.stats.misses > misses:
            error = self._reader.stats.last_error
            logger.warning(
                f"{self}: recall memory for {self.user_id!r} missed its "
                f"{self._reader.timeout_secs * 1000:.0f} ms"
                + (f" ({error})" if error is not None else "")
                + "; going on with the last memory read"
            )
        return memory

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            # The context object is the aggregators' own, so the update also
            # persists for later turns (and is replaced, not repeated).
            memory = await self.memory(latest_user_text(frame.context))
            apply_memory(frame.context, memory, header=self._header)
        await self.push_frame(frame, direction)

    async def cleanup(self) -> None:
        await self._reader.close()
        await super().cleanup()
