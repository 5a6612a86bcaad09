//! A bare axum WebSocket echo server: the baseline `ws_load` measures
//! `recall serve` against, run as its own process the same way.
//!
//! `ws_echo [ADDR]` (default 127.0.0.1:0) listens, prints
//! `ws_echo listening on http://ADDR`, and echoes every text or binary
//! frame on `/echo` until killed. Built with the same release profile and
//! tokio defaults as `recall serve`.

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::get;
use axum::Router;

async fn echo(ws: WebSocketUpgrade) -> axum::response::Response {
    ws.on_upgrade(|mut socket: WebSocket| async move {
        while let Some(Ok(msg)) = socket.recv().await {
            let echoed = match msg {
                Message::Text(_) | Message::Binary(_) => socket.send(msg).await.is_ok(),
                Message::Close(_) => false,
                _ => true,
            };
            if !echoed {
                break;
            }
        }
    })
}

fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_string());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            println!("ws_echo listening on http://{}", listener.local_addr()?);
            let app = Router::new().route("/echo", get(echo));
            axum::serve(listener, app).await?;
            anyhow::Ok(())
        })
}
