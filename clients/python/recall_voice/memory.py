"""Reading a user's memory for the next answer without ever stalling it.

:class:`MemoryReader` asks recall for the context of one user, looked up
with their latest words, and gives it up after a time limit (150 ms by
default): the answer then goes ahead with the last memory read for the user
(or none), and the miss is counted. A read that missed its limit keeps
running in the background, once, and what it brings back is used for the
next turn; while it runs, no other read is started, so a server that hangs
is never sent a pile of requests. Both the Pipecat injector and the
LiveKit plug-in read through it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from .client import RecallClient, RecallError

__all__ = ["DEFAULT_TIMEOUT_SECS", "MemoryReader", "ReadStats", "memory_text"]

DEFAULT_TIMEOUT_SECS = 0.150


def memory_text(assembled: dict[str, Any]) -> str:
    """The memory part of an assembled context: its system messages. Its
    user and assistant messages are turns of the call (the caller's own
    context has them) and the query itself."""
    return "\n\n".join(
        str(m.get("content") or "")
        for m in assembled.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "system"
    )


@dataclass
class ReadStats:
    """How the reads went."""

    #: Reads asked for (answered from the cache included).
    reads: int = 0
    #: Reads answered in time from recall.
    fresh: int = 0
    #: Reads answered from the cache (the same query, recently).
    cached: int = 0
    #: Reads that missed: over the time limit, refused, or unreachable;
    #: the turn went on with the last memory.
    misses: int = 0
    #: Of the misses, those over the time limit (or skipped while an
    #: earlier read was still running).
    timeouts: int = 0
    #: The error the last read ended with (None once one succeeds).
    last_error: RecallError | None = field(default=None, repr=False)


class MemoryReader:
    """One user's memory with one agent, read within a time limit.

    Args:
        client: The recall client (the caller owns and closes it).
        agent_id: The agent.
        user_id: Whose memory is read (only theirs).
        budget_tokens: The budget recall fits the context to.
        timeout_secs: Longest a turn waits for memory (150 ms).
        refresh_secs: How long the memory read for one query is reused.
        live: Whether the live call's turns are in the context (False: the
            caller's own context holds them, and the budget goes to the
            rest of the memory).
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        agent_id: str,
        user_id: str,
        budget_tokens: int = 2000,
        timeout_secs: float = DEFAULT_TIMEOUT_SECS,
        refresh_secs: float = 30.0,
        live: bool = False,
    ) -> None:
        self._client = client
        self.agent_id = agent_id
        self.user_id = user_id
        self.budget_tokens = budget_tokens
        self.timeout_secs = timeout_secs
        self._refresh_secs = refresh_secs
        self._live = live
        self.stats = ReadStats()
        self._memory = ""
        self._query: str | None = None
        self._fetched_at = 0.0
        self._running: asyncio.Task[None] | None = None

    @property
    def memory_now(self) -> str:
        """The last memory read (empty before any)."""
        return self._memory

    async def _read(self, query: str) -> None:
        try:
            assembled = await self._client.get_context(
                self.agent_id,
                self.user_id,
                message=query,
                budget_tokens=self.budget_tokens,
                live=self._live,
            )
        except RecallError as e:
            self.stats.last_error = e
            raise
        except Exception as e:
            # (a bug here, not recall's answer: kept, with its cause)
            error = RecallError("internal", f"{type(e).__name__}: {e}")
            error.__cause__ = e
            self.stats.last_error = error
            raise error from e
        self.stats.last_error = None
        self._memory = memory_text(assembled)
        self._query = query
        self._fetched_at = time.monotonic()

    async def memory(self, query: str) -> str:
        """The user's memory for ``query``: fresh if recall answers within
        the time limit, else the last memory read."""
        self.stats.reads += 1
        now = time.monotonic()
        if query == self._query and now - self._fetched_at < self._refresh_secs:
            self.stats.cached += 1
            return self._memory
        if self._running is not None and not self._running.done():
            # An earlier read is still out: no second request to a server
            # that is slow or hung.
            self.stats.misses += 1
            self.stats.timeouts += 1
            return self._memory
        task = asyncio.create_task(self._read(query))
        self._running = task
        task.add_done_callback(_retrieve_exception)
        done, _ = await asyncio.wait({task}, timeout=self.timeout_secs)
        if not done:
            self.stats.misses += 1
            self.stats.timeouts += 1
            return self._memory
        if task.exception() is not None:
            self.stats.misses += 1
            return self._memory
        self.stats.fresh += 1
        return self._memory

    async def close(self) -> None:
        """Cancel a read still running."""
        task, self._running = self._running, None
        if task is not None and not task.done():
            task.cancel()
            # (its end awaited, whatever it was; a cancellation of the
            # caller itself goes on)
            await asyncio.wait({task})


def _retrieve_exception(task: asyncio.Task[None]) -> None:
    # A read's failure is counted where it is awaited, or (one that ran
    # past its limit) shows in stats.last_error: not an unretrieved error.
    if not task.cancelled():
        task.exception()
