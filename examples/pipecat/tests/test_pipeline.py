"""End-to-end: real Pipecat pipelines talking to a real `recall serve`.

The module starts its own recall server (binary from $RECALL_BIN, default
target/debug/recall in the repository) on a free loopback port with a
temporary data folder, runs pipelines through Pipecat's own PipelineWorker
and WorkerRunner (the 1.x names of PipelineTask and PipelineRunner), and
checks what recall stored over its HTTP API. No STT, LLM or TTS service is
involved: the frames those services would produce are queued directly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
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

from recall_pipecat import (
    DEFAULT_HEADER,
    RecallClient,
    RecallContextInjector,
    RecallTurnRecorder,
    Transport,
    apply_memory,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
# Generous bounds: each is a ceiling for CI, not an expected duration.
SERVER_START_SECS = 20.0
PIPELINE_SECS = 60.0
SUMMARY_SECS = 10.0
SHUTDOWN_SECS = 45.0  # above the server's 30 s shutdown grace

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


@dataclass
class RecallServer:
    base_url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def recall_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecallServer]:
    binary = Path(os.environ.get("RECALL_BIN") or REPO_ROOT / "target" / "debug" / "recall")
    if not binary.is_file():
        pytest.fail(f"recall binary not found at {binary}; run `cargo build --bin recall` first")

    workdir = tmp_path_factory.mktemp("recall")
    stdout_path, stderr_path = workdir / "stdout.log", workdir / "stderr.log"
    # Settings come from RECALL_<SECTION>__<KEY> variables: drop any the
    # caller has set (a token, say) so the server is the default one, and
    # run the watchdog every second so background_context is rebuilt within
    # the test's time instead of every five minutes.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["RECALL_WATCHDOG__INTERVAL_SECS"] = "1"

    port = _free_port()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            [str(binary), "serve", "--addr", f"127.0.0.1:{port}", "--data", str(workdir / "data")],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=workdir,
        )
    server = RecallServer(f"http://127.0.0.1:{port}", process, stderr_path)

    try:
        deadline = time.monotonic() + SERVER_START_SECS
        while "recall listening on" not in stdout_path.read_text(errors="replace"):
            if process.poll() is not None:
                pytest.fail(
                    f"recall serve exited with {process.returncode} before listening:\n"
                    f"{server.stderr_tail()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"recall serve did not listen within {SERVER_START_SECS}s")
            time.sleep(0.05)

        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=SHUTDOWN_SECS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, (
        f"recall serve exited with {process.returncode} on SIGTERM:\n{server.stderr_tail()}"
    )


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
    await asyncio.wait_for(asyncio.gather(runner.run(), feed()), PIPELINE_SECS)
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
            injector = RecallContextInjector(client, agent_id=agent_id, user_id=user_id)
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
                injector = RecallContextInjector(client, agent_id=agent_id, user_id=user_id)
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
                injector = RecallContextInjector(client, agent_id=agent_id, user_id=user_id)
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
