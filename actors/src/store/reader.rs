//! The backend as the readers off the Store actor hold it: context
//! sources, index builds, the rollup's reads. The Store actor stays the
//! only writer; a read here sees every write the Store has answered for.
//! At shutdown the handle is let go, after which reads fail as
//! `Unavailable` rather than keep a store's folder open.

use std::sync::{Arc, RwLock};

use super::backend::{read_blocking, Backend, SharedBackend};
use super::StoreError;

/// A shared, releasable handle on the backend for reads.
#[derive(Clone)]
pub struct Reader(Arc<RwLock<Option<SharedBackend>>>);

impl Reader {
    pub fn new(backend: SharedBackend) -> Reader {
        Reader(Arc::new(RwLock::new(Some(backend))))
    }

    /// The backend, unless the handle was let go.
    pub fn get(&self) -> Result<SharedBackend, StoreError> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(StoreError::Unavailable)
    }

    /// Lets the backend go: later reads fail; reads under way finish.
    pub fn release(&self) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Runs `read` on the blocking pool (see [`read_blocking`]).
    pub async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'b> FnOnce(&'b dyn Backend) -> futures::future::BoxFuture<'b, Result<T, StoreError>>
            + Send
            + 'static,
    {
        read_blocking(self.get()?, read).await
    }
}
