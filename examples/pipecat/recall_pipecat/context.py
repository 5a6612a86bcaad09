"""Puts recall's ``background_context`` block into the LLM's context.

recall's watchdog keeps, per agent, a short ``background_context`` text
built from recent session summaries ("Recent: …", "Active topics: …"). The
injector adds it as a system message to every ``LLMContextFrame`` on its way
to the LLM, so the model knows what was said in earlier calls.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from loguru import logger
from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext, LLMContextMessage
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from .client import RecallClient, RecallError

__all__ = ["DEFAULT_HEADER", "RecallContextInjector", "apply_background_context"]

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


def apply_background_context(
    context: LLMContext, background: str, *, header: str = DEFAULT_HEADER
) -> None:
    """Insert, update or remove the background system message of a context.

    The message goes right after the leading system messages, so the
    application's own system prompt stays first. An empty ``background``
    removes the message: the memory behind it was cleared.
    """
    messages = list(context.get_messages())
    kept = [m for m in messages if not _is_injected(m, header)]
    if background.strip():
        position = 0
        while position < len(kept) and _is_system(kept[position]):
            position += 1
        injected = {"role": "system", "content": f"{header}\n{background.strip()}"}
        kept.insert(position, cast(LLMContextMessage, injected))
    if kept != messages:
        context.set_messages(kept)


class RecallContextInjector(FrameProcessor):
    """Adds the agent's ``background_context`` block to each LLM context.

    Place it between the user context aggregator and the LLM service. The
    block is fetched at most every ``refresh_secs`` (it changes when the
    watchdog runs, not every turn), and a fetch that fails or takes longer
    than ``fetch_timeout_secs`` only logs a warning: the LLM then gets the
    last known background, or none, rather than waiting on memory.

    Args:
        client: The recall client to use (the caller owns and closes it).
        agent_id: The agent whose block to read.
        refresh_secs: How long a fetched block is reused.
        fetch_timeout_secs: Longest wait for the block before an LLM call.
        header: The first line of the injected system message.
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        agent_id: str,
        refresh_secs: float = 30.0,
        fetch_timeout_secs: float = 1.0,
        header: str = DEFAULT_HEADER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._client = client
        self.agent_id = agent_id
        self._refresh_secs = refresh_secs
        self._fetch_timeout = fetch_timeout_secs
        self._header = header
        self._background = ""
        self._fetched_at: float | None = None

    async def background(self) -> str:
        """The block's value, from the cache while it is fresh."""
        now = time.monotonic()
        if self._fetched_at is None or now - self._fetched_at >= self._refresh_secs:
            try:
                block = await asyncio.wait_for(
                    self._client.get_block(self.agent_id, "background_context"),
                    self._fetch_timeout,
                )
                self._background = str(block.get("value") or "")
                self._fetched_at = now
            except (TimeoutError, RecallError) as e:
                # Keep the last value; retry on the next context frame.
                logger.warning(f"{self}: could not fetch background_context: {e!r}")
        return self._background

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            # The context object is the aggregators' own, so the update also
            # persists for later turns (and is replaced, not repeated).
            apply_background_context(frame.context, await self.background(), header=self._header)
        await self.push_frame(frame, direction)
