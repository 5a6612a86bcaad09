"""End-to-end: real Pipecat pipelines talking to a real `recall serve`.

The module starts its own recall server (binary from $RECALL_BIN, default
target/debug/recall in the repository) on a free loopback port with a
temporary data folder, runs pipelines through Pipecat's own PipelineWorker
and WorkerRunner (the 1.x names of PipelineTask and PipelineRunner), and
checks what recall stored over its HTTP API. No STT, LLM or TTS service is
involved: the frames those services would produce are queued directly.

The store-outage tests start a second server, over PostgreSQL behind a TCP
proxy they cut, so that recall refuses turns as store_unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    SystemFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext, LLMContextMessage
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner
from recall_server import SHUTDOWN_SECS, RecallServer, serve_recall

from recall_voice.pipecat import (
    DEFAULT_HEADER,
    RecallClient,
    RecallContextInjector,
    RecallError,
    RecallStream,
    RecallTurnRecorder,
    Transport,
    apply_memory,
)

# Generous bounds: each is a ceiling for CI, not an expected duration.
PIPELINE_SECS = 60.0
SUMMARY_SECS = 10.0

# Three exchanges as an LLM would stream them: each answer in chunks that
# carry their own spacing (LLMTextFrame.includes_inter_frame_spaces).
EXCHANGES: list[tuple[str, list[str]]] = [
    (
        "I'm planning a trip to Lisbon in May with my sister.",
        ["Lisbon in May ", "sounds wonderful! ", "Are you two more into museums or beaches?"],
    ),
    (
        "Mostly museums, and we both love Portuguese food.",
        ["Then the Gulbenkian Museum ", "and a pastel de nata tasting ", "belong on your list."],
    ),
    (
        "Remind me to book the flights to Lisbon on Friday.",
        ["Sure, ", "I'll remind you on Friday ", "to book the Lisbon flights."],
    ),
]


# -- the recall server ------------------------------------------------------


@pytest.fixture(scope="module")
def recall_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecallServer]:
    # The watchdog runs every second, so background_context is rebuilt
    # within the test's time instead of every five minutes.
    with serve_recall(
        tmp_path_factory.mktemp("recall"), {"RECALL_WATCHDOG__INTERVAL_SECS": "1"}
    ) as server:
        yield server


# -- running a pipeline -----------------------------------------------------


class FrameCollector(FrameProcessor):
    """The last processor: keeps every frame that comes down the pipeline."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
        await self.push_frame(frame, direction)


async def run_pipeline(
    processors: Sequence[FrameProcessor],
    frames: Sequence[Frame],
    *,
    on_worker: Callable[[PipelineWorker], None] | None = None,
    before_each: Callable[[Frame], Awaitable[None]] | None = None,
) -> list[ErrorFrame]:
    """Run ``processors`` as a pipeline over ``frames`` and return the errors
    the pipeline reported.

    The frames should end with an EndFrame, unless ``on_worker`` (called with
    the worker before it runs) arranges for the worker to stop otherwise.
    ``before_each``, if given, is awaited before each frame is queued, to
    pace the frames like a real call.
    """
    worker = PipelineWorker(
        Pipeline(list(processors)),
        # No client to talk to and no idle users to hang up on.
        enable_rtvi=False,
        cancel_on_idle_timeout=False,
    )
    errors: list[ErrorFrame] = []
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_error")
    async def on_pipeline_error(_worker: PipelineWorker, frame: ErrorFrame) -> None:
        errors.append(frame)

    if on_worker is not None:
        on_worker(worker)

    @worker.event_handler("on_pipeline_started")
    async def on_pipeline_started(_worker: PipelineWorker, _frame: Frame) -> None:
        started.set()

    async def feed() -> None:
        # Processors drop frames that arrive before the StartFrame.
        await started.wait()
        if before_each is None:
            await worker.queue_frames(frames)
            return
        for frame in frames:
            await before_each(frame)
            await worker.queue_frame(frame)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.ensure_future(runner.run())
    try:
        await asyncio.wait_for(asyncio.gather(asyncio.shield(run), feed()), PIPELINE_SECS)
    except BaseException:
        # A test that fails while the pipeline runs: cancel the pipeline, as
        # a caller hanging up would, so the failure is reported instead of
        # the event loop's teardown waiting on a pipeline left running.
        await worker.cancel(reason="the test failed")
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(run, SHUTDOWN_SECS)
        raise
    return errors


def call_frames(exchanges: Sequence[tuple[str, list[str]]]) -> list[Frame]:
    """The frames STT, VAD and an LLM would push for these exchanges, then an EndFrame."""
    frames: list[Frame] = []
    for user_text, answer_chunks in exchanges:
        now = datetime.now(UTC).isoformat()
        frames += [
            UserStartedSpeakingFrame(),
            TranscriptionFrame(text=user_text, user_id="caller", timestamp=now),
            UserStoppedSpeakingFrame(),
            LLMFullResponseStartFrame(),
            *[LLMTextFrame(text=chunk) for chunk in answer_chunks],
            LLMFullResponseEndFrame(),
        ]
    frames.append(EndFrame())
    return frames


def assert_passed_through(queued: Sequence[Frame], collected: Sequence[Frame]) -> None:
    """Every queued frame reached the end of the pipeline, as the same object.

    System frames (User{Started,Stopped}SpeakingFrame) are handled ahead of
    queued data and control frames, so only the others are compared in order.
    """
    collected_ids = [f.id for f in collected]
    missing = [f for f in queued if f.id not in collected_ids]
    assert not missing, f"frames not passed through: {missing}"
    queued_ids = {f.id for f in queued}
    assert [f.id for f in collected if f.id in queued_ids and not isinstance(f, SystemFrame)] == [
        f.id for f in queued if not isinstance(f, SystemFrame)
    ]
    for f in queued:
        if isinstance(f, (TranscriptionFrame, LLMTextFrame)):
            assert collected[collected_ids.index(f.id)] is f


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def wait_until_ended(client: RecallClient, session_id: str) -> dict[str, Any]:
    """The session record once it is no longer live.

    Closing the WebSocket returns before the server has ended the session,
    so its record can still say live for a moment.
    """
    deadline = asyncio.get_running_loop().time() + SUMMARY_SECS
    while True:
        session = await client.get_session(session_id)
        if not session["live"] or asyncio.get_running_loop().time() > deadline:
            return session
        await asyncio.sleep(0.05)


# -- tests ------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_records_a_call(recall_server: RecallServer, transport: Transport) -> None:
    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            recorder = RecallTurnRecorder(
                client,
                agent_id=agent_id,
                user_id=user_id,
                connection_id=connection_id,
                transport=transport,
            )
            collector = FrameCollector()
            frames = call_frames(EXCHANGES)

            errors = await run_pipeline([recorder, collector], frames)

            assert errors == [], [e.error for e in errors]
            assert recorder.errors == []
            assert recorder.turns_recorded == len(EXCHANGES)
            assert recorder.session_id is not None
            assert_passed_through(frames, collector.frames)

            session_id = recorder.session_id
            summary = await client.wait_for_summary(session_id, timeout_secs=SUMMARY_SECS)
            session = await wait_until_ended(client, session_id)
            assert session["live"] is False
            assert session["end_reason"] == "disconnect"
            assert session["turn_count"] == len(EXCHANGES)
            assert (session["agent_id"], session["user_id"], session["connection_id"]) == (
                agent_id,
                user_id,
                connection_id,
            )

            # The turns are the exchanges, with the answers reassembled from
            # their chunks.
            turns = await client.get_turns(session_id)
            assert [(t["user_message"], t["agent_response"]) for t in turns] == [
                (user, "".join(chunks).strip()) for user, chunks in EXCHANGES
            ]

            # The offline summarizer works from the words of the call.
            about = " ".join(
                [summary["summary_text"], *summary["topics"], *summary["key_entities"]]
            ).lower()
            assert "lisbon" in about, summary
            assert summary["turn_count"] == len(EXCHANGES)

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_reports_a_busy_connection_and_still_passes_frames(
    recall_server: RecallServer, transport: Transport
) -> None:
    """A session that cannot start is reported (logged, pushed upstream as a
    non-fatal ErrorFrame, kept in ``recorder.errors``), not raised: the call
    goes on, unrecorded, and the other session on the connection is left alone."""

    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            # Someone else already holds the connection.
            other = await client.start_session(agent_id, user_id, connection_id)

            recorder = RecallTurnRecorder(
                client,
                agent_id=agent_id,
                user_id=user_id,
                connection_id=connection_id,
                transport=transport,
            )
            reported: list[Exception] = []

            @recorder.event_handler("on_recall_error")
            async def on_recall_error(_recorder: RecallTurnRecorder, error: Exception) -> None:
                reported.append(error)

            collector = FrameCollector()
            frames = call_frames(EXCHANGES[:1])

            errors = await run_pipeline([recorder, collector], frames)

            assert_passed_through(frames, collector.frames)
            assert len(recorder.errors) == 1, recorder.errors
            error = recorder.errors[0]
            assert error.status == 409
            if transport == "http":
                assert error.code == "connection_busy"
            assert "could not start a recall session" in error.message
            assert reported == [error]
            # The pipeline saw it as an ErrorFrame from the recorder, and the
            # recorder is still usable: memory failing must not end a call.
            assert [e.processor for e in errors] == [recorder]
            assert "409" in errors[0].error
            assert recorder.is_usable
            assert recorder.session_id is None
            assert (recorder.turns_recorded, recorder.turns_dropped) == (0, 1)

            # The other session was neither written to nor ended.
            session = await client.get_session(other["session_id"])
            assert session["live"] is True
            assert session["turn_count"] == 0
            await client.end_session(connection_id, agent_id=agent_id, user_id=user_id)

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_ends_the_session_when_the_pipeline_is_cancelled(
    recall_server: RecallServer, transport: Transport
) -> None:
    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            recorder = RecallTurnRecorder(
                client,
                agent_id=agent_id,
                user_id=user_id,
                connection_id=connection_id,
                transport=transport,
            )

            def cancel_after_first_turn(worker: PipelineWorker) -> None:
                # The caller hangs up abruptly: cancel once a turn is stored.
                @recorder.event_handler("on_turn_recorded")
                async def on_turn_recorded(_recorder: RecallTurnRecorder, *_args: object) -> None:
                    await worker.cancel(reason="caller hung up")

            # No EndFrame: the cancellation stops the pipeline.
            frames = call_frames(EXCHANGES)[:-1]
            errors = await run_pipeline([recorder], frames, on_worker=cancel_after_first_turn)

            assert errors == [], [e.error for e in errors]
            assert recorder.errors == []
            assert recorder.session_id is not None
            await client.wait_for_summary(recorder.session_id, timeout_secs=SUMMARY_SECS)
            session = await wait_until_ended(client, recorder.session_id)
            assert session["end_reason"] == "disconnect"
            # Cancelling drops frames still queued, so later turns may be lost.
            assert 1 <= session["turn_count"] <= len(EXCHANGES)
            assert session["turn_count"] == recorder.turns_recorded

    asyncio.run(scenario())


class TranscriptConsumer(FrameProcessor):
    """Stands in for Pipecat's LLMUserAggregator, which consumes the final
    TranscriptionFrames (they reach the LLM inside its context instead)."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, TranscriptionFrame):
            await self.push_frame(frame, direction)


@pytest.mark.parametrize("consumed", [True, False], ids=["aggregator", "no-aggregator"])
def test_user_tap_feeds_the_recorder_once(recall_server: RecallServer, consumed: bool) -> None:
    """With the tap before a user aggregator the recorder still gets the
    user's words; without one, both see them and they still count once."""

    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            recorder = RecallTurnRecorder(
                client, agent_id=agent_id, user_id=user_id, connection_id=connection_id
            )
            middle: list[FrameProcessor] = [TranscriptConsumer()] if consumed else []
            frames = call_frames(EXCHANGES[:2])
            answered = 0

            async def after_the_answer(frame: Frame) -> None:
                # The tap sees the user's words before the recorder sees the
                # answer to the previous ones, so words spoken before that
                # answer is under way join its turn. A real caller speaks after
                # hearing the answer; queuing everything at once would not.
                nonlocal answered
                if isinstance(frame, UserStartedSpeakingFrame):
                    deadline = time.monotonic() + PIPELINE_SECS
                    while recorder.turns_recorded < answered:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.01)
                    answered += 1

            errors = await run_pipeline(
                [recorder.user_tap(), *middle, recorder], frames, before_each=after_the_answer
            )

            assert errors == [], [e.error for e in errors]
            assert recorder.turns_recorded == 2
            assert recorder.session_id is not None
            await client.wait_for_summary(recorder.session_id, timeout_secs=SUMMARY_SECS)
            turns = await client.get_turns(recorder.session_id)
            assert [t["user_message"] for t in turns] == [user for user, _ in EXCHANGES[:2]]

    asyncio.run(scenario())


def test_context_injector_adds_the_users_memory(recall_server: RecallServer) -> None:
    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            # Give the user a memory: one finished call, summarized.
            started = await client.start_session(agent_id, user_id, connection_id)
            await client.record_turn(
                connection_id,
                "Next month I am going kayaking in the Norwegian fjords.",
                "Kayaking in the fjords sounds amazing; pack a dry suit.",
                agent_id=agent_id,
                user_id=user_id,
            )
            await client.end_session(connection_id, agent_id=agent_id, user_id=user_id)
            await client.wait_for_summary(started["session_id"], timeout_secs=SUMMARY_SECS)
            # The summary joins a topic after it lands, which changes the
            # memory's rendering: settle that now, so that the injector's
            # read and the comparison read below see the same memory.
            await client.run_rollups()

            system_prompt: LLMContextMessage = {
                "role": "system",
                "content": "You are a friendly travel agent.",
            }
            greeting: LLMContextMessage = {"role": "user", "content": "Hi, it's me again!"}
            context = LLMContext(messages=[system_prompt, greeting])
            injector = RecallContextInjector(
                client, agent_id=agent_id, user_id=user_id, fetch_timeout_secs=10.0
            )
            collector = FrameCollector()
            # Two LLM calls on the same context: the second must update the
            # message, not add another.
            frames: list[Frame] = [LLMContextFrame(context), LLMContextFrame(context), EndFrame()]

            errors = await run_pipeline([injector, collector], frames)

            assert errors == []
            assert_passed_through(frames, collector.frames)
            # After the application's system prompt, before the conversation.
            messages = context.get_messages()
            assert len(messages) == 3, messages
            assert messages[0] == system_prompt and messages[2] == greeting
            injected = messages[1]
            assert isinstance(injected, dict) and injected["role"] == "system"
            assert injected["content"].startswith(f"{DEFAULT_HEADER}\n")
            assert "kayaking" in injected["content"].lower(), injected
            # It is recall's memory of this user for that message, as recall
            # assembles it (the memory part: its system message).
            assembled = await client.get_context(
                agent_id, user_id, message="Hi, it's me again!", budget_tokens=2000
            )
            memory = [m["content"] for m in assembled["messages"] if m["role"] == "system"]
            assert injected["content"] == f"{DEFAULT_HEADER}\n{memory[0].strip()}"

            # Nothing to remember removes the message again.
            apply_memory(context, "")
            assert context.get_messages() == [system_prompt, greeting]

    asyncio.run(scenario())


def context_text(context: LLMContext) -> str:
    """Everything an LLM would read in a context, lowercased."""
    return "\n".join(str(m) for m in context.get_messages()).lower()


async def wait_for_watchdog(client: RecallClient, agent_id: str, since: str) -> dict[str, Any]:
    """The agent's background_context block once the watchdog has written it
    at or after ``since`` (an RFC 3339 time from the server)."""
    after = datetime.fromisoformat(since)
    deadline = time.monotonic() + SUMMARY_SECS
    while True:
        block = await client.get_block(agent_id)
        if block["updated_at"] and datetime.fromisoformat(block["updated_at"]) >= after:
            return block
        assert time.monotonic() < deadline, f"the watchdog did not run after {since}: {block}"
        await asyncio.sleep(0.2)


def test_no_users_words_reach_another_users_llm_context(recall_server: RecallServer) -> None:
    """Two callers of one agent, each with a codeword only they said: the
    contexts the injector hands the LLM carry the caller's own memory and
    never the other's, during a call and after both were summarized."""

    async def scenario() -> None:
        agent_id = unique("agent")
        dana, mark = unique("dana"), unique("mark")
        codewords = {dana: "marzipan", mark: "quicksilver"}
        system_prompt: LLMContextMessage = {"role": "system", "content": "You are Kairix."}
        async with RecallClient(recall_server.base_url) as client:

            async def call(user_id: str) -> tuple[dict[str, Any], LLMContext]:
                """One call: the user tells their codeword; the LLM context
                of the call goes through the injector while it is live."""
                said = f"Remember that my codeword is {codewords[user_id]}."
                context = LLMContext(messages=[system_prompt, {"role": "user", "content": said}])
                recorder = RecallTurnRecorder(
                    client, agent_id=agent_id, user_id=user_id, connection_id=unique("call")
                )
                injector = RecallContextInjector(
                    client, agent_id=agent_id, user_id=user_id, fetch_timeout_secs=10.0
                )
                frames = call_frames([(said, ["Got it, ", "I will remember it."])])
                # The aggregator's context frame, after the user's words.
                frames.insert(3, LLMContextFrame(context))
                collector = FrameCollector()
                errors = await run_pipeline([injector, recorder, collector], frames)
                assert errors == [] and recorder.errors == [], errors
                assert recorder.turns_recorded == 1 and recorder.session_id is not None
                summary = await client.wait_for_summary(
                    recorder.session_id, timeout_secs=SUMMARY_SECS
                )
                handed = [f for f in collector.frames if isinstance(f, LLMContextFrame)]
                assert [f.context for f in handed] == [context]
                return summary, context

            async def ask(user_id: str) -> LLMContext:
                """A later call: the user asks for their codeword."""
                question = "What was my codeword again?"
                context = LLMContext(
                    messages=[system_prompt, {"role": "user", "content": question}]
                )
                injector = RecallContextInjector(
                    client, agent_id=agent_id, user_id=user_id, fetch_timeout_secs=10.0
                )
                collector = FrameCollector()
                errors = await run_pipeline(
                    [injector, collector], [LLMContextFrame(context), EndFrame()]
                )
                assert errors == [], errors
                handed = [f for f in collector.frames if isinstance(f, LLMContextFrame)]
                assert [f.context for f in handed] == [context]
                return context

            # Dana calls first and is remembered; then Mark calls while the
            # agent's memory holds her call.
            dana_summary, _ = await call(dana)
            await wait_for_watchdog(client, agent_id, dana_summary["created_at"])
            mark_summary, during = await call(mark)
            assert "marzipan" not in context_text(during), during.get_messages()

            # Both calls summarized, rolled up and in the watchdog's block.
            await client.run_rollups()
            agents_block = await wait_for_watchdog(client, agent_id, mark_summary["created_at"])
            for word in codewords.values():
                assert word not in agents_block["value"].lower(), agents_block

            for user_id, own in codewords.items():
                other = codewords[mark if user_id == dana else dana]
                # Their own background_context, and only theirs.
                theirs = (await client.get_block(agent_id, user_id=user_id))["value"].lower()
                assert own in theirs and other not in theirs, theirs
                # What the LLM gets: their memory, never the other's words.
                text = context_text(await ask(user_id))
                assert DEFAULT_HEADER.lower() in text, text
                assert own in text, text
                assert other not in text, text

    asyncio.run(scenario())


# -- a store that cannot write ----------------------------------------------
#
# recall acknowledges a turn before writing it. While PostgreSQL cannot be
# reached, at most store.max_unwritten_turns acknowledged turns wait; past
# that a turn is refused, unrecorded: 503 store_unavailable with Retry-After,
# or on a stream an error frame with retry_after_ms. This server keeps its
# store in PostgreSQL behind a TCP proxy that the tests cut, as an outage
# would, the way the Rust tests (tests/server.rs) make recall refuse.

UNWRITTEN_TURNS = 4  # store.max_unwritten_turns
# store.postgres.connect_timeout_secs, which is also the wait recall names.
CONNECT_TIMEOUT_SECS = 1
# How early asyncio may wake a sleeper (its clock's resolution) and how far
# apart the recorder's and the test's readings of the clock around one
# answer are: no scheduling happens between them.
CLOCK_SLACK = 0.01
# The longest a test waits for one step of an outage.
OUTAGE_SECS = 20.0


def postgres_url() -> str:
    """The database the storage tests use: RECALL_TEST_POSTGRES_URL, by
    default the `test` database on 127.0.0.1:5432 (as for `cargo test`)."""
    return os.environ.get("RECALL_TEST_POSTGRES_URL") or "postgres://postgres@127.0.0.1:5432/test"


class _Link:
    """One connection through the proxy: a client socket and its upstream."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.sockets = (client, upstream)
        self._pumps_left = 2
        self._lock = threading.Lock()

    def shut(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self.shut()  # one side gone: so is the other
            with self._lock:
                self._pumps_left -= 1
                last = self._pumps_left == 0
            if last:  # closed only once neither pump uses them
                for sock in self.sockets:
                    sock.close()


class TcpProxy:
    """Forwards a loopback port to ``upstream``. :meth:`cut` closes every
    connection through it and closes new ones at once, as a database that
    went away; :meth:`restore` lets connections through again."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # so the accept loop sees stop()
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._up = True
        self._stopped = False
        self._links: list[_Link] = []
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream: socket.socket | None = None
            if self._up:
                try:
                    upstream = socket.create_connection(self._upstream, timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    pass
            with self._lock:
                if upstream is None or not self._up:
                    for sock in (client, upstream):
                        if sock is not None:
                            sock.close()
                    continue
                link = _Link(client, upstream)
                self._links.append(link)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=link.pump, args=(src, dst), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._up = False
            links, self._links = self._links, []
        for link in links:
            link.shut()

    def restore(self) -> None:
        with self._lock:
            self._up = True

    def stop(self) -> None:
        self.cut()
        self._stopped = True
        self._thread.join()
        self._listener.close()


def drop_schema(schema: str) -> None:
    """Drops a test's schema with psql (the CI's PostgreSQL check uses it
    too); without psql the schema stays, as after an interrupted run."""
    psql = shutil.which("psql")
    if psql is None:
        return
    subprocess.run(
        [
            psql,
            postgres_url(),
            "-Atqc",
            f"SET lock_timeout = '30s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )


@dataclass
class OutageServer:
    server: RecallServer
    proxy: TcpProxy


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageServer]:
    """A `recall serve` over PostgreSQL through a :class:`TcpProxy`, with a
    small store.max_unwritten_turns."""
    url = urlsplit(postgres_url())
    upstream = (url.hostname or "127.0.0.1", url.port or 5432)
    try:
        socket.create_connection(upstream, timeout=5).close()
    except OSError as e:
        pytest.fail(
            f"PostgreSQL does not answer at {upstream[0]}:{upstream[1]} ({e}); these tests "
            "need it, as `cargo test` does (RECALL_TEST_POSTGRES_URL names another one)"
        )
    proxy = TcpProxy(upstream)
    userinfo, at, _ = url.netloc.rpartition("@")
    through = urlunsplit(url._replace(netloc=f"{userinfo}{at}127.0.0.1:{proxy.port}"))
    schema = f"recall_pipecat_{uuid.uuid4().hex}"
    settings = {
        "RECALL_STORE__KIND": "postgres",
        "RECALL_STORE__POSTGRES__URL": through,
        "RECALL_STORE__POSTGRES__SCHEMA": schema,
        "RECALL_STORE__POSTGRES__CONNECT_TIMEOUT_SECS": str(CONNECT_TIMEOUT_SECS),
        "RECALL_STORE__MAX_UNWRITTEN_TURNS": str(UNWRITTEN_TURNS),
    }
    try:
        with serve_recall(tmp_path_factory.mktemp("recall-pg"), settings) as server:
            try:
                yield OutageServer(server, proxy)
            finally:
                # After a test that failed during its outage, the server can
                # write what waits and stop.
                proxy.restore()
    finally:
        proxy.stop()
        drop_schema(schema)


@dataclass
class Attempt:
    """One turn sent to recall, and recall's answer."""

    user_message: str
    sent: float  # the event loop's clock
    answered: float
    refused: RecallError | None  # None: accepted


class NotingClient(RecallClient):
    """A RecallClient that notes every turn sent through it, over HTTP or on
    a stream, with recall's answer: what the recorder sent, and when."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.attempts: list[Attempt] = []

    async def _note(self, user_message: str, send: Coroutine[Any, Any, str]) -> str:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            session_id = await send
        except RecallError as e:
            self.attempts.append(Attempt(user_message, sent, loop.time(), e))
            raise
        self.attempts.append(Attempt(user_message, sent, loop.time(), None))
        return session_id

    async def record_turn(
        self,
        connection_id: str,
        user_message: str,
        agent_response: str,
        *,
        agent_id: str,
        user_id: str,
        durable: bool = False,
    ) -> str:
        return await self._note(
            user_message,
            super().record_turn(
                connection_id,
                user_message,
                agent_response,
                agent_id=agent_id,
                user_id=user_id,
                durable=durable,
            ),
        )

    async def connect_stream(self, connection_id: str, agent_id: str, user_id: str) -> RecallStream:
        stream = await super().connect_stream(connection_id, agent_id, user_id)
        send_turn = stream.send_turn

        async def noted(user_message: str, agent_response: str, *, durable: bool = False) -> str:
            return await self._note(
                user_message, send_turn(user_message, agent_response, durable=durable)
            )

        stream.send_turn = noted  # type: ignore[method-assign]
        return stream

    def tries(self, user_message: str) -> list[Attempt]:
        return [a for a in self.attempts if a.user_message == user_message]


async def until(condition: Callable[[], bool], what: str) -> None:
    # Well within the pipeline's own bound, so a test that fails here says what it was waiting for.
    deadline = time.monotonic() + OUTAGE_SECS
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.02)


class Outage:
    """The store's outage as one test drives it: a bystander's connection
    fills recall's unwritten turns up to the bound, so every turn after it is
    refused until the store writes again. Leaving the ``async with`` block
    restores the store whatever happened, for the next test."""

    def __init__(self, client: RecallClient, proxy: TcpProxy, agent_id: str) -> None:
        self.client, self.proxy, self.agent_id = client, proxy, agent_id
        self.user_id, self.connection_id = unique("bystander"), unique("call")
        self.session_id = ""

    async def __aenter__(self) -> Outage:
        started = await self.client.start_session(self.agent_id, self.user_id, self.connection_id)
        self.session_id = str(started["session_id"])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.proxy.restore()
        with contextlib.suppress(RecallError):
            await self.client.end_session(self.connection_id, **self.owner())

    def owner(self) -> dict[str, str]:
        return {"agent_id": self.agent_id, "user_id": self.user_id}

    async def cut(self, recorder_session_id: str) -> None:
        # Both sessions' records are written first (a read through the Store
        # follows its earlier writes): only turns then wait for the store.
        for session_id in (recorder_session_id, self.session_id):
            await self.client.get_turns(session_id)
        self.proxy.cut()
        for n in range(UNWRITTEN_TURNS + 20):
            try:
                await self.client.record_turn(
                    self.connection_id, f"Bystander turn {n}", "Noted", **self.owner()
                )
            except RecallError as e:
                assert (e.status, e.code) == (503, "store_unavailable"), e
                assert e.retry_after == CONNECT_TIMEOUT_SECS, e
                return
        pytest.fail(f"recall still took turns past store.max_unwritten_turns={UNWRITTEN_TURNS}")

    async def end(self) -> None:
        """Restores the store and returns once recall takes turns again."""
        self.proxy.restore()
        deadline = time.monotonic() + OUTAGE_SECS
        while True:
            try:
                await self.client.record_turn(
                    self.connection_id, "Back again?", "Yes", **self.owner()
                )
                return
            except RecallError as e:
                if e.code != "store_unavailable":
                    raise
                assert time.monotonic() < deadline, "recall still refuses turns"
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def outage_call(
    outage_server: OutageServer,
    transport: Transport,
    *,
    finish_timeout_secs: float,
    store_retry_secs: float,
) -> AsyncIterator[tuple[RecallClient, NotingClient, Outage, RecallTurnRecorder]]:
    """A call of a fresh agent, user and connection through a recorder on a
    NotingClient, with the store's Outage ready to cut: a plain client, the
    noting one, the outage and the recorder."""
    server = outage_server.server
    agent_id = unique("agent")
    async with (
        RecallClient(server.base_url) as client,
        NotingClient(server.base_url) as noted,
        Outage(client, outage_server.proxy, agent_id) as outage,
    ):
        yield (
            client,
            noted,
            outage,
            RecallTurnRecorder(
                noted,
                agent_id=agent_id,
                user_id=unique("user"),
                connection_id=unique("call"),
                transport=transport,
                finish_timeout_secs=finish_timeout_secs,
                store_retry_secs=store_retry_secs,
            ),
        )


def user_started_speaking_indices(frames: Sequence[Frame]) -> list[int]:
    return [i for i, f in enumerate(frames) if isinstance(f, UserStartedSpeakingFrame)]


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_resends_turns_refused_while_the_store_cannot_write(
    outage_server: OutageServer, transport: Transport
) -> None:
    """Turns recall refuses as store_unavailable are sent again after the
    wait recall names, one at a time in their order, and none is lost."""

    async def scenario() -> None:
        async with outage_call(
            outage_server,
            transport,
            finish_timeout_secs=PIPELINE_SECS / 2,
            store_retry_secs=PIPELINE_SECS / 2,
        ) as (client, noted, outage, recorder):
            said = [user for user, _ in EXCHANGES]
            frames = call_frames(EXCHANGES)

            async def drive_the_outage(frame: Frame) -> None:
                if frame is frames[0]:
                    # Once the recorder's session has started, before its
                    # first turn: the store goes away.
                    await until(lambda: recorder.session_id is not None, "the session")
                    assert recorder.session_id is not None
                    await outage.cut(recorder.session_id)
                elif isinstance(frame, EndFrame):
                    # The first turn was refused, sent again after the wait
                    # and refused again: now the store comes back.
                    await until(lambda: len(noted.tries(said[0])) >= 2, "a second refusal")
                    outage.proxy.restore()

            errors = await run_pipeline([recorder], frames, before_each=drive_the_outage)

            assert errors == [], [e.error for e in errors]
            assert recorder.errors == []
            assert (recorder.turns_recorded, recorder.turns_dropped) == (len(EXCHANGES), 0)

            attempts = noted.attempts
            # Each turn was sent until recall took it, and the next one only
            # then: the turns went out one at a time, in their order.
            assert [a.user_message for a in attempts] == sorted(
                (a.user_message for a in attempts), key=said.index
            )
            assert [a.user_message for a in attempts if a.refused is None] == said
            for user in said:
                tries = noted.tries(user)
                assert tries[-1].refused is None
                assert all(a.refused is not None for a in tries[:-1])
            assert len(noted.tries(said[0])) >= 3, "refused twice, then taken"

            # Every refusal was store_unavailable with a wait, and the turn
            # went out again no sooner than that wait after the answer.
            for a, after in zip(attempts, attempts[1:], strict=False):
                if a.refused is None:
                    continue
                assert a.refused.code == "store_unavailable", a.refused
                if transport == "http":
                    assert a.refused.status == 503, a.refused
                assert a.refused.retry_after == CONNECT_TIMEOUT_SECS, a.refused
                assert after.user_message == a.user_message
                assert after.sent - a.answered >= a.refused.retry_after - CLOCK_SLACK, (
                    f"sent again {after.sent - a.answered:.3f}s after the refusal"
                )

            # recall has every turn, once each, in order, in one session.
            assert recorder.session_id is not None
            session = await wait_until_ended(client, recorder.session_id)
            assert session["end_reason"] == "disconnect"
            turns = await client.get_turns(recorder.session_id)
            assert [(t["user_message"], t["agent_response"]) for t in turns] == [
                (user, "".join(chunks).strip()) for user, chunks in EXCHANGES
            ]

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_drops_a_turn_refused_past_store_retry_secs(
    outage_server: OutageServer, transport: Transport
) -> None:
    """A turn recall still refuses when one more wait would take it past
    store_retry_secs is reported and dropped; the next turn goes out after it."""
    retry_secs = 2.5  # room for two waits of CONNECT_TIMEOUT_SECS, not three

    async def scenario() -> None:
        async with outage_call(
            outage_server,
            transport,
            finish_timeout_secs=PIPELINE_SECS / 2,
            store_retry_secs=retry_secs,
        ) as (client, noted, outage, recorder):
            reported: list[Exception] = []

            @recorder.event_handler("on_recall_error")
            async def on_recall_error(_recorder: RecallTurnRecorder, error: Exception) -> None:
                reported.append(error)

            (lost, _), (kept, kept_chunks) = EXCHANGES[:2]
            frames = call_frames(EXCHANGES[:2])
            first, second = user_started_speaking_indices(frames)

            async def drive_the_outage(frame: Frame) -> None:
                if frame is frames[first]:
                    await until(lambda: recorder.session_id is not None, "the session")
                    assert recorder.session_id is not None
                    await outage.cut(recorder.session_id)
                elif frame is frames[second]:
                    # The first turn was given up on; the store comes back
                    # before the second one is said.
                    await until(lambda: recorder.turns_dropped > 0, "the first turn dropped")
                    await outage.end()

            errors = await run_pipeline([recorder], frames, before_each=drive_the_outage)

            tries = noted.tries(lost)
            assert len(tries) >= 2, "sent again at least once before being given up on"
            assert all(a.refused is not None for a in tries)
            deadline = tries[0].sent + retry_secs
            for a, after in zip(tries, tries[1:], strict=False):
                assert a.refused is not None
                wait = a.refused.retry_after
                assert wait == CONNECT_TIMEOUT_SECS, a.refused
                # Sent again because the wait still fitted in store_retry_secs,
                # and no sooner than the wait.
                assert a.answered + wait <= deadline + CLOCK_SLACK
                assert after.sent - a.answered >= wait - CLOCK_SLACK
            last = tries[-1].refused
            assert last is not None and last.code == "store_unavailable", last
            assert last.retry_after == CONNECT_TIMEOUT_SECS
            # Given up on only when one more wait would not fit.
            assert tries[-1].answered + last.retry_after > deadline - CLOCK_SLACK

            # Dropped, and reported as a recall error is: kept in errors,
            # told to on_recall_error, pushed upstream as a non-fatal
            # ErrorFrame that the pipeline saw.
            assert (recorder.turns_recorded, recorder.turns_dropped) == (1, 1)
            assert recorder.errors == [last]
            assert reported == [last]
            assert [e.processor for e in errors] == [recorder], [e.error for e in errors]
            assert "store_unavailable" in errors[0].error
            assert recorder.is_usable

            # The next turn waited behind it, then went out once, accepted.
            assert [a.user_message for a in noted.attempts] == [lost] * len(tries) + [kept]
            assert noted.attempts[-1].refused is None
            assert noted.attempts[-1].sent >= tries[-1].answered

            # recall has the second turn only, and the call ended as usual.
            assert recorder.session_id is not None
            session = await wait_until_ended(client, recorder.session_id)
            assert session["end_reason"] == "disconnect"
            turns = await client.get_turns(recorder.session_id)
            assert [(t["user_message"], t["agent_response"]) for t in turns] == [
                (kept, "".join(kept_chunks).strip())
            ]

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_recorder_ends_the_call_within_its_wait_while_the_store_cannot_write(
    outage_server: OutageServer, transport: Transport
) -> None:
    """A call that ends while recall still refuses its turns is not held
    past finish_timeout_secs by store_retry_secs: the turns are given up on
    (counted and reported as store_unavailable, not as a timeout), the
    session's end is sent, and recall keeps that end until its store is
    back."""
    finish_secs = 3.0

    async def scenario() -> None:
        async with outage_call(
            outage_server,
            transport,
            finish_timeout_secs=finish_secs,
            store_retry_secs=PIPELINE_SECS,
        ) as (client, noted, outage, recorder):
            frames = call_frames(EXCHANGES[:2])
            ended_at: list[float] = []

            async def drive_the_outage(frame: Frame) -> None:
                if frame is frames[0]:
                    await until(lambda: recorder.session_id is not None, "the session")
                    assert recorder.session_id is not None
                    await outage.cut(recorder.session_id)
                elif isinstance(frame, EndFrame):
                    ended_at.append(asyncio.get_running_loop().time())

            errors = await run_pipeline([recorder], frames, before_each=drive_the_outage)
            finished = asyncio.get_running_loop().time()

            # Within the end's wait, every turn given up on as refused.
            assert finished - ended_at[0] <= finish_secs + 1.0, finished - ended_at[0]
            assert (recorder.turns_recorded, recorder.turns_dropped) == (0, 2)
            assert [e.code for e in recorder.errors] == ["store_unavailable"] * 2, recorder.errors
            assert len(errors) == 2 and all("store_unavailable" in e.error for e in errors)
            assert all(a.refused is not None for a in noted.attempts)

            # The end reached recall, which writes it once the store is back.
            await outage.end()
            assert recorder.session_id is not None
            session = await wait_until_ended(client, recorder.session_id)
            assert session["end_reason"] == "disconnect"
            assert await client.get_turns(recorder.session_id) == []

    asyncio.run(scenario())


# -- never stalling a turn --------------------------------------------------


@contextlib.asynccontextmanager
async def hung_server() -> Any:
    """A server on loopback that accepts connections, reads what it is sent
    and never answers: a recall that hangs. Yields its URL and the number of
    connections made to it (a list of one int)."""
    connections = [0]
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        held.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        for w in held:
            w.close()
        server.close()


class Stopwatch(FrameProcessor):
    """Notes when each LLMContextFrame passes (placed before and after the
    injector)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[int, float] = {}

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            self.times[frame.id] = time.monotonic()
        await self.push_frame(frame, direction)


def test_a_hung_server_never_grows_the_turn_time() -> None:
    """recall accepts the read and never answers: each turn's LLM context
    still goes on after the 150 ms limit, every turn alike (no read piles up
    behind another: one request reaches the server), and each miss is
    counted."""

    async def scenario() -> None:
        async with hung_server() as (url, connections):
            async with RecallClient(url, timeout_secs=30.0) as client:
                injector = RecallContextInjector(client, agent_id="kairix", user_id="mark")
                before, after = Stopwatch(), FrameCollector()
                timer = Stopwatch()
                turns = 6
                contexts = [
                    LLMContext(messages=[{"role": "user", "content": f"Question {i}?"}])
                    for i in range(turns)
                ]
                frames: list[Frame] = [LLMContextFrame(c) for c in contexts] + [EndFrame()]

                async def pace(_frame: Frame) -> None:
                    await asyncio.sleep(0.05)

                errors = await run_pipeline(
                    [before, injector, timer, after], frames, before_each=pace
                )
                assert errors == []
                waits = [timer.times[f.id] - before.times[f.id] for f in frames[:turns]]
                limit = injector._reader.timeout_secs
                assert limit == pytest.approx(0.150)
                # each turn waited the limit at most (and some slack for a
                # loaded machine), the last no longer than the first
                assert all(w < limit + 0.35 for w in waits), waits
                assert waits[-1] < waits[0] + 0.2, waits
                assert injector.stats.misses == turns, injector.stats
                assert injector.stats.timeouts == turns
                assert injector.stats.fresh == 0
                assert connections[0] == 1, "one read out at a time to a hung server"
                # no memory, so none was injected; the contexts went on as they came
                for c, i in zip(contexts, range(turns), strict=True):
                    assert c.get_messages() == [{"role": "user", "content": f"Question {i}?"}]

    asyncio.run(scenario())


def test_a_read_in_time_is_fresh_and_a_late_one_serves_the_next_turn(
    recall_server: RecallServer,
) -> None:
    """Against the real server: with the default 150 ms the reads come back
    fresh; with a limit no read can meet, the turn goes on without memory,
    and the read that ran on in the background serves the next turn."""

    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            started = await client.start_session(agent_id, user_id, connection_id)
            await client.record_turn(
                connection_id,
                "My violin teacher is called Ms Okafor.",
                "Lovely, how long have you studied with her?",
                agent_id=agent_id,
                user_id=user_id,
            )
            await client.end_session(connection_id, agent_id=agent_id, user_id=user_id)
            await client.wait_for_summary(started["session_id"], timeout_secs=SUMMARY_SECS)
            # warm the server's caches for this user (a debug build on a
            # busy machine takes longer over a first read)
            await client.get_context(agent_id, user_id, message="x", budget_tokens=2000)

            fresh = RecallContextInjector(client, agent_id=agent_id, user_id=user_id)
            ok = 0
            for i in range(5):
                memory = await fresh.memory(f"Who teaches me the violin? ({i})")
                ok += "okafor" in memory.lower()
            assert fresh.stats.fresh >= 3, fresh.stats
            assert ok == fresh.stats.fresh

            late = RecallContextInjector(
                client, agent_id=agent_id, user_id=user_id, fetch_timeout_secs=0.0
            )
            assert await late.memory("Who teaches me the violin?") == ""
            assert late.stats.misses == 1 and late.stats.timeouts == 1
            # the read goes on; once back, the next turn has its memory
            deadline = time.monotonic() + SUMMARY_SECS
            while late._reader.memory_now == "" and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            memory = await late.memory("And what else?")
            assert "okafor" in memory.lower(), memory
            await late.cleanup()
            await fresh.cleanup()

    asyncio.run(scenario())


def test_interim_transcripts_go_ahead_as_heard_frames(recall_server: RecallServer) -> None:
    async def scenario() -> None:
        agent_id, user_id, connection_id = unique("agent"), unique("user"), unique("call")
        async with RecallClient(recall_server.base_url) as client:
            recorder = RecallTurnRecorder(
                client, agent_id=agent_id, user_id=user_id, connection_id=connection_id
            )
            assert recorder.transport == "websocket"
            now = datetime.now(UTC).isoformat()
            frames: list[Frame] = [
                UserStartedSpeakingFrame(),
                InterimTranscriptionFrame(text="Where did", user_id="caller", timestamp=now),
                InterimTranscriptionFrame(
                    text="Where did I leave", user_id="caller", timestamp=now
                ),
                InterimTranscriptionFrame(
                    text="Where did I leave my keys", user_id="caller", timestamp=now
                ),
                TranscriptionFrame(
                    text="Where did I leave my keys?", user_id="caller", timestamp=now
                ),
                UserStoppedSpeakingFrame(),
                LLMFullResponseStartFrame(),
                LLMTextFrame(text="By the door, I think."),
                LLMFullResponseEndFrame(),
                EndFrame(),
            ]

            async def pace(_frame: Frame) -> None:
                await asyncio.sleep(0.02)

            errors = await run_pipeline([recorder], frames, before_each=pace)
            assert errors == [] and recorder.errors == []
            # acked by the server; the latest words only when they came
            # faster than they could be sent
            assert 1 <= recorder.heard_sent <= 3, recorder.heard_sent
            assert recorder.turns_recorded == 1
            turns = await client.get_turns(recorder.session_id)
            assert [t["user_message"] for t in turns] == ["Where did I leave my keys?"]

    asyncio.run(scenario())
