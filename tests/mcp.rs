//! The MCP server at the message level: recall's handler served over an
//! in-memory pipe, newline-delimited JSON-RPC written and read as a stdio
//! client does (the official Python SDK drives both real transports, the
//! binary's stdio and `/mcp`, in `.ci/mcp`). The handshake, the tool list,
//! a stated fact remembered and read back through the tools and in the
//! context, the typed refusals, the resources, and what a token limited to
//! one agent may touch.

use std::collections::HashSet;
use std::sync::Arc;

use recall::mcp::RecallMcp;
use recall::server::Access;
use recall::testkit::TestRuntime;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

struct Client {
    lines: tokio::io::Lines<BufReader<ReadHalf<DuplexStream>>>,
    out: WriteHalf<DuplexStream>,
    next: u64,
}

impl Client {
    /// A handler over `t`'s runtime with `access`, served on a pipe, and
    /// the handshake done.
    async fn connect(t: &TestRuntime, access: Access) -> Client {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let handler = RecallMcp::new(t.runtime().clone(), access);
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(theirs).await {
                let _ = running.waiting().await;
            }
        });
        let (read, out) = tokio::io::split(ours);
        let mut c = Client {
            lines: BufReader::new(read).lines(),
            out,
            next: 0,
        };
        let init = c
            .call(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}),
            )
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "recall", "{init}");
        assert!(init["result"]["capabilities"]["tools"].is_object());
        assert!(init["result"]["capabilities"]["resources"].is_object());
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        c
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes()).await.unwrap();
        self.out.flush().await.unwrap();
    }

    /// A request and its answer (notifications before it skipped).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self.lines.next_line().await.unwrap().expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let v = self
            .call("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        v["result"].clone()
    }
}

#[tokio::test]
async fn tools_remember_and_read_back_and_refuse_with_typed_codes() {
    let t = TestRuntime::start().await.unwrap();
    let mut c = Client::connect(&t, Access::All).await;

    let listed = c.call("tools/list", json!({})).await;
    let names: HashSet<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let want: HashSet<&str> = [
        "get_context",
        "search_memory",
        "list_facts",
        "remember",
        "forget_user",
        "list_sessions",
        "get_transcript",
    ]
    .into();
    assert_eq!(names, want);

    let said = c
        .tool(
            "remember",
            json!({"agent_id": "kairix", "user_id": "mark", "statement": "I work at Globex."}),
        )
        .await;
    assert_eq!(said["isError"], json!(false), "{said}");
    let stored = said["structuredContent"]["stored"].as_array().unwrap();
    assert_eq!(stored.len(), 1, "{said}");
    assert_eq!(stored[0]["content"], "Works at Globex");
    let facts = c
        .tool(
            "list_facts",
            json!({"agent_id": "kairix", "user_id": "mark"}),
        )
        .await;
    assert_eq!(
        facts["structuredContent"]["facts"][0]["content"],
        "Works at Globex"
    );
    let ctx = c
        .tool(
            "get_context",
            json!({"agent_id": "kairix", "user_id": "mark", "message": "Where do I work?"}),
        )
        .await;
    assert!(ctx["structuredContent"]["messages"]
        .to_string()
        .contains("Globex"));
    // the same JSON as text
    let text: Value = serde_json::from_str(ctx["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, ctx["structuredContent"]);

    for (arguments, code, status) in [
        (
            json!({"agent_id": "kairix", "user_id": "mark", "budget_tokens": 0}),
            "invalid_budget",
            400,
        ),
        (
            json!({"agent_id": "kairix", "user_id": "mark", "tone": "warm"}),
            "invalid_arguments",
            400,
        ),
        (json!({"agent_id": "kairix"}), "invalid_arguments", 400),
        (
            json!({"agent_id": "", "user_id": "mark"}),
            "empty_field",
            400,
        ),
    ] {
        let r = c.tool("get_context", arguments.clone()).await;
        assert_eq!(r["isError"], json!(true), "{arguments}: {r}");
        let e = &r["structuredContent"]["error"];
        assert_eq!(
            (e["code"].as_str(), e["status"].as_u64()),
            (Some(code), Some(status)),
            "{r}"
        );
    }
    let unknown = c
        .tool(
            "get_transcript",
            json!({"session_id": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    assert_eq!(
        unknown["structuredContent"]["error"]["code"],
        "unknown_session"
    );
    // the refusals changed nothing
    let facts = c
        .tool(
            "list_facts",
            json!({"agent_id": "kairix", "user_id": "mark"}),
        )
        .await;
    assert_eq!(
        facts["structuredContent"]["facts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // sessions a page at a time
    for conn in ["c1", "c2"] {
        let rt = t.runtime();
        rt.start_session("kairix", "ada", conn).await.unwrap();
        rt.record_turn(conn, recall::Turn::new("Hello.", "Hi Ada."))
            .unwrap();
        rt.end_session(conn, recall::EndOptions::default()).unwrap();
    }
    t.runtime().flush().await.unwrap();
    let page = |before: Option<Value>| {
        let mut args = json!({"agent_id": "kairix", "user_id": "ada", "limit": 1});
        if let Some(b) = before {
            args["before"] = b;
        }
        args
    };
    let first = c.tool("list_sessions", page(None)).await;
    let first = first["structuredContent"]["sessions"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(first.len(), 1);
    let second = c
        .tool("list_sessions", page(Some(first[0]["session_id"].clone())))
        .await;
    let second = second["structuredContent"]["sessions"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0]["session_id"], first[0]["session_id"]);
    let bad = c.tool("list_sessions", page(Some(json!("nope")))).await;
    assert_eq!(bad["structuredContent"]["error"]["code"], "invalid_id");

    // resources: the templates, a block, an unknown one
    let templates = c.call("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["result"]["resourceTemplates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let block = c
        .call(
            "resources/read",
            json!({"uri": "recall://agents/kairix/users/mark/blocks/background_context"}),
        )
        .await;
    assert_eq!(
        block["result"]["contents"][0]["mimeType"], "text/plain",
        "{block}"
    );
    let bad = c
        .call(
            "resources/read",
            json!({"uri": "recall://agents/kairix/blocks/nope"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32002, "{bad}");
    assert_eq!(bad["error"]["data"]["code"], "unknown_resource");
    t.runtime().clone().shutdown().await.unwrap();
}

#[tokio::test]
async fn a_token_for_one_agent_touches_that_agent_only() {
    let t = TestRuntime::start().await.unwrap();
    let access = Access::Agents(Arc::new(["kairix".to_string()].into()));
    let mut c = Client::connect(&t, access).await;
    let mine = c
        .tool(
            "list_facts",
            json!({"agent_id": "kairix", "user_id": "mark"}),
        )
        .await;
    assert_eq!(mine["isError"], json!(false), "{mine}");
    for (tool, arguments) in [
        (
            "list_facts",
            json!({"agent_id": "other", "user_id": "mark"}),
        ),
        (
            "remember",
            json!({"agent_id": "other", "user_id": "mark", "statement": "I live in Porto."}),
        ),
        // every agent's forget needs a token for all
        ("forget_user", json!({"user_id": "mark"})),
    ] {
        let r = c.tool(tool, arguments).await;
        assert_eq!(
            r["structuredContent"]["error"]["code"], "forbidden",
            "{tool}: {r}"
        );
        assert_eq!(r["structuredContent"]["error"]["status"], 403);
    }
    let other = c
        .call(
            "resources/read",
            json!({"uri": "recall://agents/other/blocks/persona"}),
        )
        .await;
    assert_eq!(other["error"]["data"]["code"], "forbidden", "{other}");
    assert!(t.runtime().facts("other", "mark").await.unwrap().is_empty());
    t.runtime().clone().shutdown().await.unwrap();
}
