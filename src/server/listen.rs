//! The accept loop: hyper's HTTP/1 connections with a header-read timeout
//! and a cap on the connections open at once.
//!
//! `axum::serve` sets neither: a client that never finishes its headers
//! holds its connection (and its task) for as long as it likes, and any
//! number of them may. Here each connection holds a permit of
//! `server.max_connections` for as long as its socket is open (a WebSocket
//! stream keeps it after the upgrade, as the socket travels with it); one
//! past the cap is answered `503 too_many_connections` and closed.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::error::ApiError;

/// Connections past the cap being answered 503 at once; past these too, a
/// new connection is closed without an answer.
const REFUSING: usize = 64;

/// How long a refused connection may take to send its request's headers.
const REFUSE_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// A socket that holds its place under the cap until it is dropped.
struct Counted {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Errors of one connection's accept, after which the listener goes on
/// (as `axum::serve` and hyper's examples tell them apart).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves `app` on `listener` until `stop` turns true, then lets the open
/// connections finish their requests (each is told to close after its
/// current one) and returns once they have.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSING));
    // Each connection's task holds a receiver; the loop waits for them all
    // to be dropped.
    let (done_tx, done_rx) = watch::channel(());
    let refused = metrics::counter!("recall_connections_refused_total");
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                let io = Counted {
                    io: stream,
                    _permit: permit,
                };
                tokio::spawn(connection(
                    io,
                    app.clone(),
                    limits.header_timeout,
                    stop.clone(),
                    done_rx.clone(),
                ));
            }
            Err(_) => {
                refused.increment(1);
                match refusing.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let io = Counted {
                            io: stream,
                            _permit: permit,
                        };
                        tokio::spawn(refuse(io, limits.max_connections, done_rx.clone()));
                    }
                    // Refusing with an answer is itself bounded.
                    Err(_) => drop(stream),
                }
            }
        }
    }
    drop(listener);
    drop(done_rx);
    done_tx.closed().await;
}

/// One connection, until it closes (or, after the stop, its request in
/// flight is answered).
async fn connection(
    io: Counted,
    app: Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
    _done: watch::Receiver<()>,
) {
    let service = TowerToHyperService::new(app);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    debug!(error = %e, "connection closed with an error");
                }
                return;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// A connection past the cap: its request is answered 503 and it is closed.
async fn refuse(io: Counted, max: usize, _done: watch::Receiver<()>) {
    let answer = move |_req: Request<Incoming>| async move {
        let err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_connections",
            format!(
                "the server has {max} connections open (server.max_connections); try again shortly"
            ),
        );
        let mut res = axum::response::IntoResponse::into_response(err).map(Body::new);
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok::<Response<Body>, Infallible>(res)
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSE_HEADER_TIMEOUT)
        .keep_alive(false);
    let _ = builder
        .serve_connection(TokioIo::new(io), hyper::service::service_fn(answer))
        .await;
}
