"""A Pipecat frame processor that records a call's exchanges to recall.

The recorder only watches: every frame goes on downstream (or upstream)
exactly as it came in. What it sees becomes recall calls:

* ``StartFrame`` starts the session (HTTP ``POST /v1/sessions``, or opening
  the connection's WebSocket stream);
* final user transcripts (``TranscriptionFrame``) followed by one full LLM
  response (``LLMFullResponseStartFrame``, ``LLMTextFrame``/``TextFrame``…,
  ``LLMFullResponseEndFrame``) make one turn;
* ``UserStartedSpeakingFrame`` touches the session, so a user who talks at
  length without the bot answering does not hit recall's silence timeout;
* interim transcripts (``InterimTranscriptionFrame``) go ahead as ``heard``
  frames on the WebSocket stream: recall makes the context read's vector
  from what the user is saying while they say it (the latest only: one
  not yet sent is replaced by the next);
* ``EndFrame``/``CancelFrame`` end the session with reason ``disconnect``.

The network calls run in a background task, in order, so the pipeline
never waits on recall between frames; only ``EndFrame``/``CancelFrame`` wait
for the queued calls to finish (bounded by a timeout), so that the session
is complete by the time the pipeline has stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TextFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.errors import ErrorCategory

from ..client import RecallClient, RecallError, RecallStream

__all__ = ["RecallTurnRecorder", "RecallUserTap", "Transport"]

Transport = Literal["http", "websocket"]


@dataclass(frozen=True)
class _Turn:
    user_message: str
    agent_response: str


@dataclass(frozen=True)
class _Touch:
    pass


@dataclass(frozen=True)
class _Heard:
    pass


@dataclass(frozen=True)
class _End:
    pass


_Op = _Turn | _Touch | _Heard | _End


def _is_assistant_text(frame: TextFrame) -> bool:
    """Whether a frame is a piece of the LLM's answer.

    ``LLMTextFrame`` is what LLM services emit; a plain ``TextFrame`` is what
    an application pushes itself. Other TextFrame subclasses are left out on
    purpose: transcriptions are the user's words, and the TTS-side
    ``AggregatedTextFrame``/``TTSTextFrame`` repeat the LLM's words, so
    counting them would record the answer twice.
    """
    return isinstance(frame, LLMTextFrame) or type(frame) is TextFrame


def _as_recall_error(e: Exception) -> RecallError:
    """Any failure of a recall call as a RecallError; anything else than a
    RecallError is a bug here, so it keeps its traceback in the log."""
    if isinstance(e, RecallError):
        return e
    logger.opt(exception=e).error(f"unexpected error in a recall call: {e!r}")
    error = RecallError("internal", f"{type(e).__name__}: {e}")
    error.__cause__ = e
    return error


class RecallTurnRecorder(FrameProcessor):
    """Records each user/assistant exchange of a Pipecat call to recall.

    Place it right after the LLM service (before TTS), where the LLM's
    response frames pass. In a pipeline with an ``LLMContextAggregatorPair``
    the user aggregator consumes the ``TranscriptionFrame``s, so also place
    :meth:`user_tap` between the STT service and the user aggregator. In a
    pipeline without aggregators the recorder alone sees both sides.

    Errors never stop the call: a recall failure is logged, pushed upstream
    as a non-fatal ``ErrorFrame`` (so ``PipelineWorker``'s
    ``on_pipeline_error`` handlers see it), appended to :attr:`errors` and
    reported to ``on_recall_error`` handlers. If the session cannot start
    (for instance 409 ``connection_busy``: the connection already has a live
    session), the recorder records nothing for this call, and in particular
    does not end that other session when the pipeline ends.

    Event handlers: ``on_session_started(recorder, session_id)``,
    ``on_turn_recorded(recorder, session_id, user_message, agent_response)``,
    ``on_recall_error(recorder, error)``.

    Args:
        client: The recall client to use (the caller owns and closes it).
        agent_id: The agent whose memory this call feeds.
        user_id: The person on the call.
        connection_id: The voice connection's id (e.g. the call or room id);
            a random one by default.
        transport: ``"websocket"`` (one stream for the whole call, opened
            at the start; closing it ends the session; interim transcripts
            go ahead as ``heard`` frames) or ``"http"`` (one request per
            turn, touch and end; no ``heard`` frames).
        finish_timeout_secs: How long ``EndFrame`` waits for queued recall
            calls (the last turn, the end) before giving up on them.
        cancel_timeout_secs: The same for ``CancelFrame``, which should stop
            the pipeline quickly, so the wait is shorter.
        store_retry_secs: How long a turn recall refuses as
            ``store_unavailable`` (its store cannot write yet; the turn was
            not recorded) is sent again, after the wait recall names each
            time, before it is reported and dropped.
    """

    def __init__(
        self,
        client: RecallClient,
        *,
        agent_id: str,
        user_id: str,
        connection_id: str | None = None,
        transport: Transport = "websocket",
        finish_timeout_secs: float = 10.0,
        cancel_timeout_secs: float = 2.0,
        store_retry_secs: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if transport not in ("http", "websocket"):
            raise ValueError(f"transport must be 'http' or 'websocket', not {transport!r}")
        self._client = client
        self.agent_id = agent_id
        self.user_id = user_id
        self.connection_id = connection_id or str(uuid.uuid4())
        self.transport: Transport = transport
        self._finish_timeout = finish_timeout_secs
        self._cancel_timeout = cancel_timeout_secs
        self._store_retry_secs = store_retry_secs

        # What the caller can inspect once the pipeline has run.
        self.session_id: str | None = None
        self.turns_recorded = 0
        self.turns_dropped = 0
        self.heard_sent = 0
        self.errors: list[RecallError] = []

        # Conversation state. User text accumulates until a response starts;
        # the response's text accumulates until it ends.
        self._user_parts: list[str] = []
        self._response_user_text: str | None = None  # set while a response is open
        self._assistant_parts: list[str] = []
        # The latest interim transcript not yet sent (one _Heard queued for
        # it at a time).
        self._heard: str | None = None
        # The same user-side frame can reach both the tap and the recorder
        # (and a broadcast UserStartedSpeakingFrame comes as two sibling
        # frames, one each way), so remember which were handled.
        self._seen_user_frames: deque[int] = deque(maxlen=64)

        # Recall calls, run in order by the sender task.
        self._ops: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._stream: RecallStream | None = None
        self._live = False
        self._finished = False
        # Set when the call ends: refused turns are sent again only until
        # then, so the end (and the pipeline) is never held past its wait.
        self._retry_until: float | None = None
        self._ending = asyncio.Event()

        self._register_event_handler("on_session_started")
        self._register_event_handler("on_turn_recorded")
        self._register_event_handler("on_recall_error")

    def user_tap(self) -> RecallUserTap:
        """A pass-through processor that feeds this recorder the user's side.

        Put it after the STT service and before the user context aggregator.
        """
        return RecallUserTap(self)

    # -- frames -------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)

        if isinstance(frame, StartFrame):
            self._start_sender()
        elif isinstance(frame, (EndFrame, CancelFrame)):
            # Finish before passing the frame on: the pipeline stops once it
            # reaches the end, and by then the session should be complete.
            cancelled = isinstance(frame, CancelFrame)
            await self._finish(self._cancel_timeout if cancelled else self._finish_timeout)
        else:
            self._observe(frame, direction)

        await self.push_frame(frame, direction)

    def _observe(self, frame: Frame, direction: FrameDirection) -> None:
        """Update the conversation state from one frame (never blocks)."""
        if isinstance(frame, UserStartedSpeakingFrame):
            if self._first_sight(frame):
                self._enqueue(_Touch())
        elif direction is not FrameDirection.DOWNSTREAM:
            return
        elif isinstance(frame, TranscriptionFrame):
            if self._first_sight(frame) and frame.text.strip():
                self._user_parts.append(frame.text.strip())
                self._heard = None
        elif isinstance(frame, InterimTranscriptionFrame):
            if self.transport == "websocket" and self._first_sight(frame) and frame.text.strip():
                heard = " ".join([*self._user_parts, frame.text.strip()])
                if self._heard is None:
                    self._enqueue(_Heard())
                self._heard = heard
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._open_response()
        elif isinstance(frame, LLMFullResponseEndFrame):
            self._close_response()
        elif isinstance(frame, InterruptionFrame):
            # The user cut the bot off: the LLM's remaining frames are dropped
            # and no end frame may come, so what was said so far is the answer.
            self._close_response()
        elif (
            isinstance(frame, TextFrame)
            and _is_assistant_text(frame)
            and self._response_user_text is not None
        ):
            text = frame.text
            # LLM text carries its own spacing; plain TextFrames are words or
            # sentences that need a space between them.
            if not frame.includes_inter_frame_spaces and self._assistant_parts:
                text = " " + text
            self._assistant_parts.append(text)

    def _first_sight(self, frame: Frame) -> bool:
        seen = self._seen_user_frames
        if frame.id in seen or (
            frame.broadcast_sibling_id is not None and frame.broadcast_sibling_id in seen
        ):
            return False
        seen.append(frame.id)
        return True

    def _open_response(self) -> None:
        if self._response_user_text is not None:
            return  # already open (a nested start); keep collecting
        self._response_user_text = " ".join(self._user_parts)
        self._user_parts.clear()
        self._assistant_parts.clear()

    def _close_response(self) -> None:
        if self._response_user_text is None:
            return
        user_text = self._response_user_text
        agent_text = "".join(self._assistant_parts).strip()
        self._response_user_text = None
        self._assistant_parts.clear()
        if agent_text:
            self._enqueue(_Turn(user_text, agent_text))
        elif user_text:
            # A response with no text (a function call, say): the user's words
            # still wait for the answer that follows.
            self._user_parts.insert(0, user_text)

    def _flush_partial_turn(self) -> None:
        """At the end of the call, record whatever exchange was cut short."""
        self._close_response()
        user_text = " ".join(self._user_parts)
        self._user_parts.clear()
        if user_text:
            self._enqueue(_Turn(user_text, ""))

    # -- recall calls -------------------------------------------------------

    def _enqueue(self, op: _Op) -> None:
        if self._finished:
            return
        self._ops.put_nowait(op)

    def _start_sender(self) -> None:
        if self._sender is None:
            self._sender = self.create_task(self._run_sender(), "recall_sender")

    async def _finish(self, timeout_secs: float) -> None:
        if self._finished:
            return
        self._flush_partial_turn()
        self._enqueue(_End())
        self._finished = True
        self._ops.put_nowait(None)  # stops the sender once the queue is drained
        if self._sender is None:
            return
        # A turn still refused as store_unavailable is given up on (counted
        # and reported) in time for the session's end to be sent within the
        # wait: a quarter of it, at most a second, is kept for the end.
        self._retry_until = (
            asyncio.get_running_loop().time() + timeout_secs - min(1.0, timeout_secs / 4)
        )
        self._ending.set()
        try:
            # shield: on timeout, stop waiting and cancel the task ourselves
            # rather than have wait_for cancel it mid-request.
            await asyncio.wait_for(asyncio.shield(self._sender), timeout_secs)
        except TimeoutError:
            pending = self._ops.qsize()
            await self.cancel_task(self._sender)
            await self._report(
                RecallError(
                    "timeout",
                    f"recall calls still running after {timeout_secs}s at the end of the "
                    f"call; gave up on them ({pending} left in the queue)",
                )
            )
        finally:
            self._sender = None
            await self._close_stream()

    async def _run_sender(self) -> None:
        # The session starts first, before anything queued in the meantime
        # (a user tap may have seen a frame before the StartFrame got here).
        await self._start_session()
        while True:
            op = await self._ops.get()
            if op is None:
                return
            try:
                await self._apply(op)
            except Exception as e:
                # Report and go on: one failed call must not stop the later
                # turns, nor the end of the session.
                await self._report(_as_recall_error(e))

    async def _start_session(self) -> None:
        try:
            if self.transport == "websocket":
                self._stream = await self._client.connect_stream(
                    self.connection_id, self.agent_id, self.user_id
                )
                self.session_id = self._stream.session_id
            else:
                started = await self._client.start_session(
                    self.agent_id, self.user_id, self.connection_id
                )
                self.session_id = str(started["session_id"])
        except Exception as e:
            cause = _as_recall_error(e)
            error = RecallError(
                cause.code,
                f"could not start a recall session on connection {self.connection_id!r}; "
                f"this call will not be recorded: {cause.message}",
                status=cause.status,
            )
            error.__cause__ = e
            await self._report(error)
            return
        self._live = True
        logger.debug(f"{self}: recall session {self.session_id} started ({self.transport})")
        await self._call_event_handler("on_session_started", self.session_id)

    async def _apply(self, op: _Op) -> None:
        if not self._live:
            # No session (its start failed, or it already ended): recording a
            # turn on someone else's connection, or ending their session,
            # would be wrong, so drop the call.
            if isinstance(op, _Turn):
                self.turns_dropped += 1
                logger.warning(f"{self}: no recall session; dropped a turn")
            return
        if isinstance(op, _Turn):
            session_id = await self._send_turn(op)
            # A turn after recall's silence timeout opens a new session on
            # the same connection; follow it.
            self.session_id = session_id
            self.turns_recorded += 1
            await self._call_event_handler(
                "on_turn_recorded", session_id, op.user_message, op.agent_response
            )
        elif isinstance(op, _Touch):
            if self._stream is not None:
                await self._stream.touch()
            else:
                await self._client.touch(
                    self.connection_id, agent_id=self.agent_id, user_id=self.user_id
                )
        elif isinstance(op, _Heard):
            heard, self._heard = self._heard, None
            if heard and self._stream is not None:
                await self._stream.heard(heard)
                self.heard_sent += 1
        elif isinstance(op, _End):
            self._live = False
            if self._stream is not None:
                await self._close_stream()  # closing the stream ends the session
            else:
                await self._client.end_session(
                    self.connection_id,
                    reason="disconnect",
                    agent_id=self.agent_id,
                    user_id=self.user_id,
                )

    async def _send_turn(self, op: _Turn) -> str:
        """Sends a turn; while recall refuses it as unwritten turns pile up
        (`store_unavailable`: the turn was not recorded), sends it again
        after the wait recall names, for up to `store_retry_secs` in all
        (once the call has ended, only while the end's wait allows). The
        queue behind it waits meanwhile, so turns stay in order."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._store_retry_secs
        while True:
            try:
                if self._stream is not None:
                    return await self._stream.send_turn(op.user_message, op.agent_response)
                return await self._client.record_turn(
                    self.connection_id,
                    op.user_message,
                    op.agent_response,
                    agent_id=self.agent_id,
                    user_id=self.user_id,
                )
            except RecallError as e:
                wait = e.retry_after if e.code == "store_unavailable" else None
                until = deadline if self._retry_until is None else min(deadline, self._retry_until)
                if wait is None or loop.time() + wait > until:
                    if e.code == "store_unavailable":
                        self.turns_dropped += 1
                    raise
                logger.warning(
                    f"{self}: recall cannot write yet; sending the turn again in {wait}s"
                )
                resume_at = loop.time() + wait
                # The wait, cut short if the call ends meanwhile and the
                # turn could no longer be sent again in time.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ending.wait(), wait)
                if self._retry_until is not None and resume_at > self._retry_until:
                    self.turns_dropped += 1
                    raise
                await asyncio.sleep(max(0.0, resume_at - loop.time()))

    async def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                await stream.close()
            except Exception as e:  # closing is best effort; the server ends it anyway
                logger.debug(f"{self}: closing the recall stream: {e}")

    async def _report(self, error: RecallError) -> None:
        self.errors.append(error)
        await self._call_event_handler("on_recall_error", error)
        # An explicit, non-permanent category: memory failing must not make
        # the pipeline treat the recorder as unusable, which under a
        # ProcessorUnusablePolicy of END or CANCEL would hang up the call.
        category = (
            ErrorCategory.CONNECTIVITY
            if error.status is None
            else ErrorCategory.SERVER
            if error.status >= 500
            else ErrorCategory.UNKNOWN
        )
        await self.push_error(f"recall: {error}", exception=error, category=category)

    async def cleanup(self) -> None:
        # Normally _finish has already run; this covers a pipeline torn down
        # without an EndFrame or CancelFrame reaching the recorder.
        if self._sender is not None:
            await self.cancel_task(self._sender)
            self._sender = None
        await self._close_stream()
        await super().cleanup()


class RecallUserTap(FrameProcessor):
    """Feeds a :class:`RecallTurnRecorder` the user's side of the call.

    Created by :meth:`RecallTurnRecorder.user_tap`. It passes every frame on
    unchanged; it only shows transcripts (final and interim) and
    user-started-speaking frames to its recorder.
    """

    def __init__(self, recorder: RecallTurnRecorder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._recorder = recorder

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(
            frame, (TranscriptionFrame, InterimTranscriptionFrame, UserStartedSpeakingFrame)
        ):
            self._recorder._observe(frame, direction)
        await self.push_frame(frame, direction)
