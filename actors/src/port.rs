//! What the ports ([`Embed`](crate::embed::Embed),
//! [`Reflect`](crate::reflect::Reflect),
//! [`MirrorPort`](crate::mirror::MirrorPort)) share: the boxed future a call
//! returns, and an error told with its causes. It stands below them and
//! below what implements them.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what a port's call returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An error and its causes, outermost first, joined by `: ` (for logs,
/// dead letters and messages).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push_str(": ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}
