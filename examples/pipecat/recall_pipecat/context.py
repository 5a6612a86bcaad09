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

import asyncio
import time
from typing import Any, cast

from loguru import logger
from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import (
    LLMContext,
    LLMContextMessage,
    standard_message_text,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from .client import RecallClient, RecallError

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


def _memory_text(assembled: dict[str, Any]) -> str:
    """The memory part of an assembled context: its system messages. Its
    user and assistant messages are turns of the call (the pipeline has
    them) and the query itself."""
    return "\n\n".join(
        str(m.get("content") or "")
        for m in assembled.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "system"
    )


class RecallContextInjector(FrameProcessor):
    """Adds what recall remembers about the call's user to each LLM context.

    Place it between the user context aggregator and the LLM service. For
    each ``LLMContextFrame`` it reads the user's context from recall with
    the latest user message as the query, within ``budget_tokens``. The same
    query is answered from a cache for ``refresh_secs`` (an LLM call may be
    repeated for one user turn, after a function call say). A read that fails
    or takes longer than ``fetch_timeout_secs`` only logs a warning: the LLM
    then gets the last memory read for this user, or none, rather than
    waiting on memory.

    Args:
        client: The recall client to use (the caller owns and closes it).
        agent_id: The agent the call is with.
        user_id: The caller: whose memory is read (and only theirs).
        budget_tokens: Token budget of the context recall assembles. It
            covers the call's latest turns too, which are not injected (the
            aggregators' context has them), so the memory gets what they
            leave.
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
        fetch_timeout_secs: float = 1.0,
        header: str = DEFAULT_HEADER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._client = client
        self.agent_id = agent_id
        self.user_id = user_id
        self.budget_tokens = budget_tokens
        self._refresh_secs = refresh_secs
        self._fetch_timeout = fetch_timeout_secs
        self._header = header
        self._memory = ""
        self._query: str | None = None
        self._fetched_at = 0.0

    async def memory(self, query: str) -> str:
        """The user's memory for ``query``, from the cache while it is fresh."""
        now = time.monotonic()
        if query == self._query and now - self._fetched_at < self._refresh_secs:
            return self._memory
        try:
            assembled = await asyncio.wait_for(
                self._client.get_context(
                    self.agent_id,
                    self.user_id,
                    message=query,
                    budget_tokens=self.budget_tokens,
                    # The pipeline's own context holds the live call: the
                    # budget goes to the rest of the user's memory.
                    live=False,
                ),
                self._fetch_timeout,
            )
            self._memory = _memory_text(assembled)
            self._query = query
            self._fetched_at = now
        except (TimeoutError, RecallError) as e:
            # Keep the last value; retry on the next context frame.
            logger.warning(f"{self}: could not read recall memory for {self.user_id!r}: {e!r}")
        return self._memory

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            # The context object is the aggregators' own, so the update also
            # persists for later turns (and is replaced, not repeated).
            memory = await self.memory(latest_user_text(frame.context))
            apply_memory(frame.context, memory, header=self._header)
        await self.push_frame(frame, direction)
