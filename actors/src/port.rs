//! What the ports ([`Embed`](crate::embed::Embed),
//! [`Reflect`](crate::reflect::Reflect)) share: the boxed future a call
//! returns. It stands below both and below what implements them.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what a port's call returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
