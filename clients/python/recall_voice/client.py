"""An asyncio client for recall's HTTP + WebSocket API, built on aiohttp:
the one client the Pipecat processors and the LiveKit plug-in share.

Every call maps onto one endpoint of `recall serve`. Errors the server
reports (always `{"error": {"code", "message"}}`) and transport failures
alike are raised as :class:`RecallError`, so callers handle one exception
type.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp

__all__ = ["RecallClient", "RecallError", "RecallStream"]


class RecallError(Exception):
    """A request recall refused, or one that never got an answer.

    Attributes:
        status: The HTTP status, or None when no response came back
            (connection refused, timeout, socket closed).
        code: recall's machine-readable error code (`connection_busy`,
            `unknown_connection`, …), or a local one (`unreachable`,
            `timeout`, `stream_closed`, `handshake_rejected`).
        message: A human-readable explanation.
        retry_after: Seconds to wait before sending the same request again,
            when recall says so (`store_unavailable`: the turn was not
            recorded), else None.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


def _error_from_body(
    status: int, body: Any, fallback: str, retry_after: float | None = None
) -> RecallError:
    """The RecallError for an error response, keeping the server's own code."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        err = body["error"]
        return RecallError(
            str(err.get("code", "http_error")),
            str(err.get("message", fallback)),
            status=status,
            retry_after=retry_after,
        )
    return RecallError("http_error", fallback, status=status)


class RecallClient:
    """Talks to one recall server.

    Use it as an async context manager (or call :meth:`close`) so the
    underlying aiohttp session is closed. The aiohttp session is created
    lazily, inside the running event loop, which is where aiohttp wants it.

    Args:
        base_url: The server's address, e.g. ``http://127.0.0.1:7878``.
        token: A bearer token, for a server that requires one (any server not
            on loopback does).
        timeout_secs: Total time allowed for each HTTP request.
        session: An aiohttp session to share; it is not closed by
            :meth:`close` since the caller owns it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_secs: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_secs)
        self._session = session
        self._owns_session = session is None

    @property
    def base_url(self) -> str:
        return self._base_url

    async def __aenter__(self) -> RecallClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
            self._owns_session = True
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request; return (status, parsed JSON body) for any 2xx.

        Non-2xx answers and transport failures raise RecallError.
        """
        url = f"{self._base_url}{path}"
        try:
            async with self._http().request(
                method, url, json=body, params=params, headers=self._headers
            ) as resp:
                text = await resp.text()
                try:
                    parsed: Any = json.loads(text) if text else None
                except json.JSONDecodeError:
                    parsed = None
                if resp.status >= 400:
                    retry_after: float | None = None
                    try:
                        retry_after = float(resp.headers.get("Retry-After", ""))
                    except ValueError:
                        pass
                    raise _error_from_body(
                        resp.status, parsed, text or resp.reason or "request failed", retry_after
                    )
                return resp.status, parsed
        except TimeoutError as e:
            raise RecallError("timeout", f"{method} {path} got no answer in time") from e
        except aiohttp.ClientError as e:
            raise RecallError("unreachable", f"{method} {path}: {e}") from e

    # -- sessions and turns -------------------------------------------------

    async def start_session(
        self, agent_id: str, user_id: str, connection_id: str | None = None
    ) -> dict[str, Any]:
        """Start a session (`POST /v1/sessions`).

        Returns the new session: session_id, connection_id, started_at, …
        Raises RecallError with code ``connection_busy`` (409) when the
        connection already has a live session.
        """
        body: dict[str, Any] = {"agent_id": agent_id, "user_id": user_id}
        if connection_id is not None:
            body["connection_id"] = connection_id
        _, data = await self._request("POST", "/v1/sessions", body=body)
        return dict(data)

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
        """Record one exchange on a connection; returns the session id it went to.

        ``agent_id`` and ``user_id`` name the connection's owner, as its
        session was started: the server refuses (403
        ``connection_reassigned``) a connection that belongs to someone else.
        Without ``durable`` the server accepts the turn (202) before it is
        on disk, which is what a latency-sensitive voice loop wants; with it
        the call returns once the turn is stored (201).
        """
        params = {"agent_id": agent_id, "user_id": user_id}
        if durable:
            params["durable"] = "true"
        _, data = await self._request(
            "POST",
            f"/v1/connections/{connection_id}/turns",
            body={"user_message": user_message, "agent_response": agent_response},
            params=params,
        )
        return str(data["session_id"])

    async def touch(self, connection_id: str, *, agent_id: str, user_id: str) -> None:
        """Keep the connection's session alive without recording a turn."""
        await self._request(
            "POST",
            f"/v1/connections/{connection_id}/touch",
            params={"agent_id": agent_id, "user_id": user_id},
        )

    async def end_session(
        self,
        connection_id: str,
        reason: str = "disconnect",
        *,
        agent_id: str,
        user_id: str,
    ) -> dict[str, Any]:
        """End the connection's live session; returns ``{"session_id", "ended"}``.

        ``disconnect`` (the voice connection closed) is the reason a caller
        normally gives; the server's other reasons describe its own decisions.
        """
        _, data = await self._request(
            "POST",
            f"/v1/connections/{connection_id}/end",
            body={"reason": reason},
            params={"agent_id": agent_id, "user_id": user_id},
        )
        return dict(data)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session record, plus ``live``."""
        _, data = await self._request("GET", f"/v1/sessions/{session_id}")
        return dict(data)

    async def get_turns(self, session_id: str) -> list[dict[str, Any]]:
        """The session's turns, oldest first."""
        _, data = await self._request("GET", f"/v1/sessions/{session_id}/turns")
        return list(data["turns"])

    # -- memory -------------------------------------------------------------

    async def get_summary(self, summary_id: str) -> dict[str, Any] | None:
        """A summary, or None while it does not exist yet.

        A session's summary has the session's id and appears once the
        session's reflection is done, so "not yet" is an ordinary answer
        here rather than an error.
        """
        try:
            _, data = await self._request("GET", f"/v1/summaries/{summary_id}")
        except RecallError as e:
            if e.code == "unknown_summary":
                return None
            raise
        return dict(data)

    async def wait_for_summary(
        self, summary_id: str, *, timeout_secs: float = 10.0, poll_secs: float = 0.1
    ) -> dict[str, Any]:
        """Poll :meth:`get_summary` until the summary lands or time runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_secs
        while True:
            summary = await self.get_summary(summary_id)
            if summary is not None:
                return summary
            if loop.time() >= deadline:
                raise RecallError(
                    "timeout", f"summary {summary_id} did not appear within {timeout_secs}s"
                )
            await asyncio.sleep(poll_secs)

    async def get_context(
        self,
        agent_id: str,
        user_id: str,
        *,
        message: str = "",
        budget_tokens: int,
        live: bool = True,
    ) -> dict[str, Any]:
        """What the agent's LLM should know for one user's next answer
        (`GET /v1/agents/{agent}/context`).

        recall assembles it from that user's memory only, looked up with
        ``message`` (the user's latest words) and fitted to
        ``budget_tokens``: ``{"tiers", "trimmed", "messages", …}``, where
        ``messages`` are OpenAI-style chat messages (the memory as one
        system message, then turns, then ``message``). ``live=False``
        leaves the live call's own turns and window summaries out, for a
        caller whose LLM context already holds them.
        """
        _, data = await self._request(
            "GET",
            f"/v1/agents/{agent_id}/context",
            params={
                "user_id": user_id,
                "message": message,
                "budget_tokens": str(budget_tokens),
                "live": "true" if live else "false",
            },
        )
        return dict(data)

    async def get_block(
        self, agent_id: str, label: str = "background_context", *, user_id: str | None = None
    ) -> dict[str, Any]:
        """A core-memory block: ``{"agent_id", "label", "value", "limit", "updated_at"}``.

        Without ``user_id`` it is the agent's own block (its
        ``background_context`` holds only the agent's persistent context);
        with it, the block as that user's context shows it (their own
        ``background_context``).
        """
        _, data = await self._request(
            "GET",
            f"/v1/agents/{agent_id}/blocks/{label}",
            params={"user_id": user_id} if user_id is not None else None,
        )
        return dict(data)

    async def run_rollups(self) -> dict[str, Any]:
        """Run every agent's due rollups and take in new summaries now
        (`POST /v1/rollups/run`, a token for every agent), as the server's
        timers would."""
        _, data = await self._request("POST", "/v1/rollups/run")
        return dict(data)

    # -- WebSocket mode -----------------------------------------------------

    async def connect_stream(self, connection_id: str, agent_id: str, user_id: str) -> RecallStream:
        """Open the connection's WebSocket stream, which starts its session.

        The session ends (reason ``disconnect``) when the stream is closed,
        so the socket's lifetime is the call's lifetime. Raises RecallError
        when the server refuses to start the session.
        """
        url = f"{self._base_url}/v1/connections/{connection_id}/stream"
        try:
            ws = await self._http().ws_connect(
                url,
                params={"agent_id": agent_id, "user_id": user_id},
                headers=self._headers,
                timeout=aiohttp.ClientWSTimeout(ws_close=self._timeout.total),
            )
        except aiohttp.WSServerHandshakeError as e:
            # The server starts the session before upgrading, so a refusal
            # (409 for a connection that already has a live session, 400 for
            # bad ids) arrives as a plain HTTP answer to the handshake. aiohttp
            # does not keep that answer's body, so only the status is known.
            hint = " (the connection already has a live session)" if e.status == 409 else ""
            raise RecallError(
                "handshake_rejected",
                f"the stream for connection {connection_id!r} was refused "
                f"with HTTP {e.status}{hint}",
                status=e.status,
            ) from e
        except TimeoutError as e:
            raise RecallError("timeout", f"opening the stream for {connection_id!r}") from e
        except aiohttp.ClientError as e:
            raise RecallError(
                "unreachable", f"opening the stream for {connection_id!r}: {e}"
            ) from e
        stream = RecallStream(ws, connection_id, reply_timeout_secs=self._timeout.total)
        await stream._read_hello()
        return stream


class RecallStream:
    """One connection's WebSocket stream (see :meth:`RecallClient.connect_stream`).

    The server answers every frame, in order, with an ack or an error, so
    each call here sends one frame and waits for its answer. Calls must not
    overlap; one task (the recorder's sender) drives a stream.
    """

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        connection_id: str,
        *,
        reply_timeout_secs: float | None,
    ) -> None:
        self._ws = ws
        self._reply_timeout = reply_timeout_secs
        self._ids = itertools.count(1)
        self.connection_id = connection_id
        self.session_id: str = ""

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def __aenter__(self) -> RecallStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _receive_json(self) -> dict[str, Any]:
        try:
            msg = await self._ws.receive(timeout=self._reply_timeout)
        except TimeoutError as e:
            raise RecallError("timeout", "no answer on the stream in time") from e
        if msg.type is not aiohttp.WSMsgType.TEXT:
            # CLOSE / CLOSED / ERROR: the server went away (a shutdown ends
            # the session with reason "shutdown" and closes the socket).
            raise RecallError(
                "stream_closed", f"the stream closed ({msg.type.name}: {msg.extra or msg.data})"
            )
        data = json.loads(msg.data)
        if not isinstance(data, dict):
            raise RecallError("bad_frame", f"unexpected frame from the server: {msg.data!r}")
        return data

    async def _read_hello(self) -> None:
        hello = await self._receive_json()
        if hello.get("type") != "session":
            await self._ws.close()
            raise RecallError("bad_frame", f"expected a session frame first, got {hello!r}")
        self.session_id = str(hello["session_id"])

    async def _call(self, frame: dict[str, Any]) -> dict[str, Any]:
        frame_id = next(self._ids)
        frame["id"] = frame_id
        if self._ws.closed:
            raise RecallError("stream_closed", "the stream is closed")
        try:
            await self._ws.send_str(json.dumps(frame))
        except (aiohttp.ClientError, ConnectionError) as e:
            raise RecallError("stream_closed", f"sending on the stream: {e}") from e
        reply = await self._receive_json()
        if reply.get("type") == "error":
            err = reply.get("error") or {}
            after = reply.get("retry_after_ms")
            raise RecallError(
                str(err.get("code", "error")),
                str(err.get("message", reply)),
                retry_after=after / 1000 if isinstance(after, int | float) else None,
            )
        if reply.get("type") != "ack" or reply.get("id") != frame_id:
            raise RecallError("bad_frame", f"expected the ack of frame {frame_id}, got {reply!r}")
        return reply

    async def send_turn(
        self, user_message: str, agent_response: str, *, durable: bool = False
    ) -> str:
        """Record one exchange; returns the session id the turn went to."""
        frame: dict[str, Any] = {
            "type": "turn",
            "user_message": user_message,
            "agent_response": agent_response,
        }
        if durable:
            frame["durable"] = True
        reply = await self._call(frame)
        self.session_id = str(reply.get("session_id", self.session_id))
        return self.session_id

    async def touch(self) -> None:
        """Keep the session alive without recording a turn."""
        await self._call({"type": "touch"})

    async def heard(self, user_message: str) -> None:
        """What the user is saying so far (an interim transcription): keeps
        the session alive, and has recall make the vector of the context
        read's message ahead, so the read at the end of the turn does not
        wait for it."""
        await self._call({"type": "heard", "user_message": user_message})

    async def close(self) -> None:
        """Close the socket, which ends the session with reason ``disconnect``."""
        if not self._ws.closed:
            await self._ws.close()
