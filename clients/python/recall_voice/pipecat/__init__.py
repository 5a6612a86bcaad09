"""recall memory for Pipecat voice pipelines.

* :class:`RecallTurnRecorder` — a frame processor that records each
  user/assistant exchange of a call as a recall turn, and sends the user's
  interim transcriptions ahead as ``heard`` frames.
* :class:`RecallContextInjector` — a frame processor that adds what recall
  remembers about the call's user (their own memory, looked up with their
  latest words) to the LLM context, waiting at most 150 ms for it.
"""

from ..client import RecallClient, RecallError, RecallStream
from .context import DEFAULT_HEADER, RecallContextInjector, apply_memory, latest_user_text
from .recorder import RecallTurnRecorder, RecallUserTap, Transport

__all__ = [
    "DEFAULT_HEADER",
    "RecallClient",
    "RecallContextInjector",
    "RecallError",
    "RecallStream",
    "RecallTurnRecorder",
    "RecallUserTap",
    "Transport",
    "apply_memory",
    "latest_user_text",
]
