"""recall's MCP server, through the official MCP Python SDK (PyPI `mcp`).

Over streamable HTTP (a real `recall serve`, its endpoint at /mcp behind
the API's tokens and host/origin guard) and over stdio (`recall mcp`
started by the SDK as its child process), each in the SDK's default
negotiation and in its legacy (initialize handshake) mode: the tools are
listed and each is called; a call recorded through the HTTP API is found
through MCP; refusals carry the API's typed codes.

The binary is $RECALL_BIN (default target/debug/recall).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT_TOKEN = "root-token"
KAIRIX_TOKEN = "kairix-token"
TOOLS = {
    "forget_user",
    "get_context",
    "get_transcript",
    "list_facts",
    "list_sessions",
    "remember",
    "search_memory",
}
MODES = ["auto", "legacy"]


def recall_binary() -> Path:
    binary = Path(os.environ.get("RECALL_BIN") or REPO_ROOT / "target" / "debug" / "recall")
    if not binary.is_file():
        pytest.fail(f"no recall binary at {binary}: build it or set RECALL_BIN")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SETTINGS = f"""
[server]
token = "{ROOT_TOKEN}"
allowed_origins = ["http://app.example"]
allowed_hosts = ["recall.example"]
[[server.tokens]]
token = "{KAIRIX_TOKEN}"
agents = ["kairix"]
[session]
silence_timeout_secs = 600
"""


@dataclass
class Server:
    url: str
    data: Path
    config: Path
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def serve(workdir: Path) -> Iterator[Server]:
    config = workdir / "recall.toml"
    config.write_text(SETTINGS)
    data = workdir / "data"
    port = free_port()
    env = {**os.environ, "RECALL_LOG": "warn"}
    process = subprocess.Popen(
        [str(recall_binary()), "serve", "--addr", f"127.0.0.1:{port}", "--data", str(data), "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "serve.log", "wb"),
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/readyz", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("recall serve did not start: " + (workdir / "serve.log").read_text()[-2000:])
                time.sleep(0.1)
        yield Server(url, data, config, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def api(server: Server, method: str, path: str, body: Any = None, token: str = ROOT_TOKEN) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{server.url}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def record_call(server: Server, agent: str, user: str, turns: list[tuple[str, str]]) -> str:
    """Records a call through the HTTP API, ends it, waits for its summary."""
    conn = f"c-{uuid.uuid4()}"
    started = api(server, "POST", "/v1/sessions", {"agent_id": agent, "user_id": user, "connection_id": conn})
    owner = f"agent_id={agent}&user_id={user}"
    for said, answered in turns:
        api(server, "POST", f"/v1/connections/{conn}/turns?{owner}&durable=true", {"user_message": said, "agent_response": answered})
    api(server, "POST", f"/v1/connections/{conn}/end?{owner}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = api(server, "GET", f"/v1/agents/{agent}/summaries?user_id={user}&type=session")
        if any(s["summary_id"] == started["session_id"] for s in listed["summaries"]):
            return started["session_id"]
        time.sleep(0.2)
    pytest.fail("the call's summary was not stored within 60 s")


def http_client(server: Server, token: str | None = ROOT_TOKEN, mode: str = "auto") -> Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    transport = streamable_http_client(f"{server.url}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode)


def stdio_client(data: Path, config: Path, mode: str = "auto") -> Client:
    params = StdioServerParameters(
        command=str(recall_binary()),
        args=["mcp", "--data", str(data), "--config", str(config)],
        env={**os.environ, "RECALL_LOG": "warn"},
    )
    return Client(params, mode=mode)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    assert result.structured_content is not None
    # the same JSON as text, for clients that read only text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was not refused: {result.structured_content}"
    return result.structured_content["error"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("recall")) as s:
        yield s


@pytest.fixture(scope="module")
def recorded(server: Server) -> tuple[str, str]:
    """A call of mark's with kairix, recorded through the API."""
    user = f"mark-{uuid.uuid4().hex[:8]}"
    session = record_call(
        server,
        "kairix",
        user,
        [
            ("I just adopted a greyhound called Pixel from the shelter.", "Congratulations! How is Pixel settling in?"),
            ("She sleeps all day and runs like mad at six.", "Greyhounds are famous couch potatoes."),
            ("My sister Leela is a nurse in Leeds.", "That must be demanding work."),
        ],
    )
    return user, session


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_over_http_finds_the_call_recorded_through_the_api(server: Server, recorded: tuple[str, str], mode: str) -> None:
    user, session = recorded

    async def scenario() -> None:
        async with http_client(server, mode=mode) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == TOOLS
            for t in (await c.list_tools()).tools:
                assert t.input_schema["type"] == "object", t.name
                assert t.description, t.name

            found = await call(c, "search_memory", agent_id="kairix", query="greyhound Pixel", user_id=user)
            assert found["results"], found
            assert any("Pixel" in r["text"] or "greyhound" in r["text"].lower() for r in found["results"])
            turns = await call(c, "search_memory", agent_id="kairix", query="greyhound", user_id=user, kinds=["turn"])
            assert all(r["type"] == "turn" for r in turns["results"]) and turns["results"]

            ctx = await call(c, "get_context", agent_id="kairix", user_id=user, message="What is my dog called?", budget_tokens=1500)
            assert ctx["total_tokens"] <= 1500
            text = " ".join(m["content"] for m in ctx["messages"])
            assert "Pixel" in text, text

            sessions = await call(c, "list_sessions", agent_id="kairix", user_id=user)
            assert [s["session_id"] for s in sessions["sessions"]] == [session]
            transcript = await call(c, "get_transcript", session_id=session)
            assert [t["user_message"] for t in transcript["turns"]][0].startswith("I just adopted a greyhound")
            assert transcript["turns"][0]["agent_response"].startswith("Congratulations")

            facts = await call(c, "list_facts", agent_id="kairix", user_id=user)
            assert any("Leela" in f["content"] for f in facts["facts"]), facts

    anyio.run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_remember_then_forget_over_http(server: Server, mode: str) -> None:
    user = f"ada-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with http_client(server, mode=mode) as c:
            said = await call(c, "remember", agent_id="kairix", user_id=user, statement="I moved to Porto in May. I work at Globex.")
            stored = [f["content"] for f in said["stored"]]
            assert any("Porto" in s for s in stored) and any("Globex" in s for s in stored), stored
            assert "I moved to Porto in May." in stored, "the month is kept as said"
            again = await call(c, "remember", agent_id="kairix", user_id=user, statement="I work at Globex.")
            assert again["stored"] == [] and [f["content"] for f in again["known"]] == [s for s in stored if "Globex" in s]
            # at once in the facts, the context and the search
            facts = await call(c, "list_facts", agent_id="kairix", user_id=user)
            assert {f["content"] for f in facts["facts"]} >= set(stored)
            ctx = await call(c, "get_context", agent_id="kairix", user_id=user, message="Where do I live now?")
            assert "Porto" in " ".join(m["content"] for m in ctx["messages"])
            hits = await call(c, "search_memory", agent_id="kairix", query="Porto", user_id=user, kinds=["fact"])
            assert hits["results"]
            # the same through the API
            listed = api(server, "GET", f"/v1/agents/kairix/facts?user_id={user}")
            assert {f["content"] for f in listed["facts"]} == {f["content"] for f in facts["facts"]}

            gone = await call(c, "forget_user", user_id=user, agent_id="kairix")
            assert gone["facts"] == len(facts["facts"])
            facts = await call(c, "list_facts", agent_id="kairix", user_id=user)
            assert facts["facts"] == []

    anyio.run(scenario)


@pytest.fixture(scope="module")
def other(server: Server) -> tuple[str, str]:
    """A call of another agent's, recorded through the API."""
    user = f"zoe-{uuid.uuid4().hex[:8]}"
    return user, record_call(server, "other", user, [("My locker code is 4471.", "Noted, Zoe.")])


@pytest.mark.parametrize("mode", MODES)
def test_refusals_carry_the_apis_typed_codes(
    server: Server, recorded: tuple[str, str], other: tuple[str, str], mode: str
) -> None:
    user, session = recorded
    other_user, other_session = other

    async def scenario() -> None:
        async with http_client(server, mode=mode) as c:
            e = await refused(c, "get_context", agent_id="kairix", user_id=user, budget_tokens=0)
            assert (e["code"], e["status"]) == ("invalid_budget", 400)
            e = await refused(c, "get_context", agent_id="kairix", user_id=user, budget_tokens=5, message="a message far too long for five tokens of budget")
            assert (e["code"], e["status"]) == ("message_over_budget", 422)
            e = await refused(c, "get_context", agent_id="kairix", user_id=user, colour="blue")
            assert (e["code"], e["status"]) == ("invalid_arguments", 400)
            assert "colour" in e["message"]
            e = await refused(c, "get_context", agent_id="kairix")
            assert e["code"] == "invalid_arguments"
            e = await refused(c, "get_transcript", session_id=str(uuid.uuid4()))
            assert (e["code"], e["status"]) == ("unknown_session", 404)
            e = await refused(c, "get_transcript", session_id="not-a-uuid")
            assert e["code"] == "invalid_id"
            e = await refused(c, "search_memory", agent_id="kairix", query="x", kinds=["nope"])
            assert e["status"] == 400
            e = await refused(c, "remember", agent_id="kairix", user_id=user, statement="   ")
            assert e["code"] == "empty_field"
            e = await refused(c, "remember", agent_id="kairix", user_id=user, statement="x" * 5000)
            assert (e["code"], e["status"]) == ("too_long", 422)
            e = await refused(c, "list_facts", agent_id="", user_id=user)
            assert e["code"] == "empty_field"
            with pytest.raises(MCPError) as raised:
                await c.read_resource("recall://agents/kairix/blocks/no_such_label")
            assert raised.value.error.data == {"code": "unknown_resource", "status": 404}
            with pytest.raises(MCPError):
                await c.call_tool("no_such_tool", {})

        # a token for kairix only: another agent is refused, kairix is not
        async with http_client(server, token=KAIRIX_TOKEN, mode=mode) as c:
            e = await refused(c, "list_facts", agent_id="other", user_id=user)
            assert (e["code"], e["status"]) == ("forbidden", 403)
            e = await refused(c, "forget_user", user_id=user)
            assert (e["code"], e["status"]) == ("forbidden", 403), "every agent's forget needs a token for all"
            await call(c, "list_facts", agent_id="kairix", user_id=user)
            with pytest.raises(MCPError) as raised:
                await c.read_resource("recall://agents/other/blocks/persona")
            assert raised.value.error.data["code"] == "forbidden"
            listed = await c.list_resources()
            uris = [r.uri for r in listed.resources]
            assert "recall://agents/kairix/blocks/persona" in uris
            assert all(u.startswith("recall://agents/kairix/") for u in uris), uris
            # nothing of the other agent's, by any tool
            for tool, arguments in [
                ("get_transcript", {"session_id": other_session}),
                ("list_sessions", {"agent_id": "other"}),
                ("search_memory", {"agent_id": "other", "query": "locker code"}),
                ("get_context", {"agent_id": "other", "user_id": other_user, "message": "code?"}),
                ("remember", {"agent_id": "other", "user_id": other_user, "statement": "I am Zoe."}),
                ("forget_user", {"user_id": other_user, "agent_id": "other"}),
            ]:
                e = await refused(c, tool, **arguments)
                assert e["code"] == "forbidden", (tool, e)

        # the token for every agent sees both agents' blocks
        async with http_client(server, mode=mode) as c:
            uris = [r.uri for r in (await c.list_resources()).resources]
            assert "recall://agents/other/blocks/persona" in uris
            assert "recall://agents/kairix/blocks/persona" in uris

    anyio.run(scenario)


def test_the_endpoint_is_behind_the_token_and_the_origin_guard(server: Server) -> None:
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).encode()

    def post(headers: dict[str, str], method: str = "POST") -> int:
        req = urllib.request.Request(f"{server.url}/mcp", data=init if method == "POST" else None, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/event-stream")
        for k, v in headers.items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert post({}) == 401
    assert post({"Authorization": "Bearer wrong"}) == 401
    auth = {"Authorization": f"Bearer {ROOT_TOKEN}"}
    assert post(auth) == 200
    # a page of another site: refused, its GET stream included
    assert post({**auth, "Origin": "http://evil.example"}) == 403
    assert post({**auth, "Origin": "http://evil.example", "Accept": "text/event-stream"}, method="GET") == 403
    assert post({**auth, "Origin": "http://app.example"}) == 200
    # a name this server does not answer for (DNS rebinding), and one it does
    assert post({**auth, "Host": "evil.example"}) == 421
    assert post({**auth, "Host": "recall.example"}) == 200

    async def no_token() -> None:
        async with http_client(server, token=None) as c:
            await c.list_tools()

    with pytest.raises(BaseException) as raised:
        anyio.run(no_token)
    assert raised.group_contains(MCPError, depth=None) if isinstance(raised.value, BaseExceptionGroup) else isinstance(raised.value, MCPError)


@pytest.mark.parametrize("mode", MODES)
def test_stdio_finds_what_the_api_recorded(tmp_path: Path, mode: str) -> None:
    # recorded through the API, the server stopped; then `recall mcp` on
    # the same data folder, started by the SDK over stdio
    with serve(tmp_path) as server:
        user = f"lin-{uuid.uuid4().hex[:8]}"
        session = record_call(server, "kairix", user, [("I'm learning the cello, my teacher is Ms Okafor.", "Lovely, how long have you played?")])
        data, config = server.data, server.config

    async def scenario() -> None:
        async with stdio_client(data, config, mode=mode) as c:
            assert {t.name for t in (await c.list_tools()).tools} == TOOLS
            found = await call(c, "search_memory", agent_id="kairix", query="cello teacher", user_id=user)
            assert found["results"]
            transcript = await call(c, "get_transcript", session_id=session)
            assert "cello" in transcript["turns"][0]["user_message"]
            sessions = await call(c, "list_sessions", agent_id="kairix", user_id=user)
            assert [s["session_id"] for s in sessions["sessions"]] == [session]
            ctx = await call(c, "get_context", agent_id="kairix", user_id=user, message="Who teaches me?")
            assert "Okafor" in " ".join(m["content"] for m in ctx["messages"])
            said = await call(c, "remember", agent_id="kairix", user_id=user, statement="My teacher moved to Lagos.")
            assert said["stored"]
            assert (await call(c, "list_facts", agent_id="kairix", user_id=user))["facts"]
            listed = await c.list_resources()
            assert "recall://agents/kairix/blocks/persona" in {r.uri for r in listed.resources}
            block = await c.read_resource(f"recall://agents/kairix/users/{user}/blocks/background_context")
            assert block.contents[0].mime_type == "text/plain"
            # stdio's client is the process's owner: every agent is its own
            gone = await call(c, "forget_user", user_id=user)
            assert gone["sessions"] == 1
            e = await refused(c, "get_transcript", session_id=session)
            assert e["code"] == "unknown_session"

    anyio.run(scenario)
