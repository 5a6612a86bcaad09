//! A voice server embedding recall, reduced to its shape: every TCP
//! connection is a call, every line `user text|agent text` is a completed
//! turn, and closing the connection is the disconnect. A demo caller dials
//! in, talks, hangs up, and the server prints what recall remembered.
//!
//! ```sh
//! cargo run --example voice_server
//! ```
//!
//! In a real server the turn comes from the speech pipeline (Pipecat's
//! `UserTurnMessageFrame` in the seed design) and `record_turn` is called
//! right after the agent's response is spoken: it is a non-blocking cast.
//! Before each answer the LLM gets `Runtime::context` for the caller, looked
//! up with what they just said: that caller's memory and nobody else's.

use std::time::Duration;

use recall::{
    ContextOptions, EndOptions, Runtime, RuntimeBuilder, Settings, SummaryType, TouchOptions, Turn,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

const AGENT: &str = "kairix";
/// Tokens of memory and recent turns the LLM gets with each message.
const CONTEXT_BUDGET: usize = 2_000;

async fn handle_call(memory: Runtime, stream: TcpStream, user_id: String) -> anyhow::Result<()> {
    let connection_id = Uuid::new_v4().to_string();
    memory
        .start_session(AGENT, &user_id, &connection_id)
        .await?;
    let mut lines = BufReader::new(stream).lines();
    while let Some(line) = lines.next_line().await? {
        let Some((user, agent)) = line.split_once('|') else {
            // Partial speech: the user is talking, keep the session alive.
            memory.touch(&connection_id, TouchOptions::default())?;
            continue;
        };
        // The LLM's input for this answer: the caller's memory for what they
        // said (a read, never waiting on an LLM). Here `agent` stands for
        // the answer it would give.
        let context = memory
            .context(
                AGENT,
                &user_id,
                user,
                CONTEXT_BUDGET,
                ContextOptions::default(),
            )
            .await?;
        let _for_the_llm = context.to_messages();
        memory.record_turn(&connection_id, Turn::new(user, agent))?;
    }
    // The socket closed: the call is over.
    memory.end_session(&connection_id, EndOptions::default())?;
    Ok(())
}

async fn demo_caller(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let mut call = TcpStream::connect(addr).await?;
    for line in [
        "Hi Kairix, Globex just invited me to an onsite on January 27.|Congratulations, Mark! Let's prepare.",
        "uh, so…",
        "I'm nervous about the system design round.|We'll practice a design question together tomorrow.",
        "David Park is the hiring manager.|Good to know. I'll help you prepare questions for David Park.",
    ] {
        call.write_all(format!("{line}\n").as_bytes()).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call.shutdown().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let memory = RuntimeBuilder::new(data.path())
        .settings(Settings::default())
        .start()
        .await?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("voice server listening on {addr}");
    let server_memory = memory.clone();
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let memory = server_memory.clone();
            tokio::spawn(async move {
                if let Err(err) = handle_call(memory, stream, "mark".into()).await {
                    eprintln!("call failed: {err:#}");
                }
            });
        }
    });

    demo_caller(addr).await?;
    // Wait for the session to end and its reflection to land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    memory.wait_idle().await?;

    for s in memory.summaries(AGENT, SummaryType::Session).await? {
        println!("\n{}", s.to_archival_text());
    }
    let next = memory
        .context(
            AGENT,
            "mark",
            "How should I prepare for David?",
            CONTEXT_BUDGET,
            ContextOptions::default(),
        )
        .await?;
    println!(
        "\nwhat the LLM gets when Mark calls again and asks how to prepare ({} tokens):",
        next.total_tokens
    );
    for m in next.to_messages() {
        println!("[{:?}] {}", m.role, m.content);
    }
    server.abort();
    memory.shutdown().await?;
    Ok(())
}
