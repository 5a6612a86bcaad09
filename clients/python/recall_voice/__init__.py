"""recall memory for voice agents: one small typed client for recall's
HTTP + WebSocket API, a memory reader that never stalls a turn, Pipecat
processors (``recall_voice.pipecat``) and a LiveKit Agents plug-in
(``recall_voice.livekit``).

* :class:`RecallClient` — asyncio client for recall's API.
* :class:`MemoryReader` — a user's memory for the next answer, within a
  time limit (150 ms by default), misses counted.
"""

from .client import RecallClient, RecallError, RecallStream
from .memory import DEFAULT_TIMEOUT_SECS, MemoryReader, ReadStats, memory_text

__all__ = [
    "DEFAULT_TIMEOUT_SECS",
    "MemoryReader",
    "ReadStats",
    "RecallClient",
    "RecallError",
    "RecallStream",
    "memory_text",
]
