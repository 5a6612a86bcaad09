//! MCP over streamable HTTP at `/mcp`: the SDK's tower service, mounted
//! behind the API's token check and host and origin guard (see
//! [`crate::server::router`]).

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{factory, RecallMcp};
use crate::runtime::Runtime;

/// Where the service is mounted.
pub const PATH: &str = "/mcp";

/// Whether a request path is the MCP endpoint's.
pub fn is_mcp_path(path: &str) -> bool {
    path == PATH || path.strip_prefix(PATH).is_some_and(|r| r.starts_with('/'))
}

/// The service, for a runtime: its streams end when `shutdown` turns
/// true. The SDK's own host and origin checks are off: the server's guard
/// has checked both (with `server.allowed_hosts` and
/// `server.allowed_origins`) before a request reaches it.
pub fn service(
    runtime: Runtime,
    max_body_bytes: usize,
    mut shutdown: watch::Receiver<bool>,
) -> StreamableHttpService<RecallMcp, LocalSessionManager> {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    // (A router made outside a runtime serves nothing: no stream to end.)
    if let Ok(tokio) = tokio::runtime::Handle::try_current() {
        tokio.spawn(async move {
            let _ = shutdown.wait_for(|s| *s).await;
            stop.cancel();
        });
    }
    // Stateless, for every protocol version: each request stands alone,
    // under its own token. (Sessions would let a request with any token
    // name another's session and replay its answers, and hold memory for
    // clients that never close them.)
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_legacy_session_mode(false)
        .with_max_request_body_bytes(max_body_bytes)
        .with_cancellation_token(cancel);
    StreamableHttpService::new(factory(runtime), Arc::default(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_path_is_the_endpoint_and_below_it_only() {
        assert!(is_mcp_path("/mcp"));
        assert!(is_mcp_path("/mcp/"));
        assert!(is_mcp_path("/mcp/x"));
        for other in ["/mcpx", "/v1/mcp", "/", "/mc"] {
            assert!(!is_mcp_path(other), "{other}");
        }
    }
}
