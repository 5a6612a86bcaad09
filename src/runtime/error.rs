//! What can go wrong: starting the runtime, and a call on it.

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot read prompt template {}", path.display())]
    PromptFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("prompt template {} is invalid", path.display())]
    Prompt {
        path: PathBuf,
        #[source]
        source: PromptError,
    },
    #[error("cannot set up the reflector")]
    Reflector(#[source] ReflectError),
    #[error("cannot set up the embedder")]
    Embedder(#[source] EmbedError),
    /// `embed.kind = "local"` and the model folder cannot be used.
    #[cfg(feature = "local-embed")]
    #[error("cannot load the local embedding model")]
    LocalModel(#[source] crate::local_embed::ModelError),
    /// `embed.kind = "local"` in a build without the model runner.
    #[error("embed.kind = \"local\" needs recall built with the local-embed feature (cargo build --release --features local-embed)")]
    LocalEmbedNotBuilt,
    #[error(transparent)]
    Tokenizer(#[from] crate::tokens::TokenizerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Letta(#[from] crate::letta::LettaConfigError),
    #[error("cannot spawn the {0} actor")]
    Spawn(&'static str, #[source] ractor::SpawnErr),
    #[error("recovery failed: {0}")]
    Recovery(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    UnknownConnection(#[from] UnknownConnection),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Watchdog(#[from] WatchdogError),
    #[error("block {label} takes at most {limit} characters; got {len}")]
    BlockTooLong {
        label: BlockLabel,
        len: usize,
        limit: usize,
    },
    #[error("block {0} is rebuilt by the watchdog; set persistent context instead")]
    ManagedBlock(BlockLabel),
    #[error("the {0} actor is unavailable: {1}")]
    Unavailable(&'static str, String),
    #[error("{0}")]
    NotDurable(String),
    #[error(transparent)]
    Context(#[from] ContextError),
    #[error("connection {0:?} belongs to another agent or user now")]
    NotOwner(String),
    #[error(transparent)]
    Rollup(#[from] RollupError),
    #[error("rollups are off (rollup.enabled = false)")]
    RollupsOff,
    #[error("the Letta mirror is off (no [letta] base_url)")]
    MirrorOff,
    #[error(transparent)]
    Mirror(recall_actors::mirror::MirrorRunError),
    #[error("cannot embed the query")]
    Embed(#[from] EmbedError),
    #[error("the summarizer failed")]
    Summarizer(#[source] ReflectError),
    #[error("the summarizer's answer was not the JSON asked for; the current summary is kept")]
    NotReflection,
    #[error(transparent)]
    Index(#[from] recall_actors::search::BuildError),
    #[error(transparent)]
    Backlog(#[from] BacklogFull),
}

pub(super) fn unavailable<E: std::fmt::Display>(
    actor: &'static str,
) -> impl FnOnce(E) -> RecallError {
    move |e| RecallError::Unavailable(actor, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asking_for_the_local_embedder_without_it_says_what_to_rebuild_with() {
        // (Returned by a build without the feature: `tests/local_embed.rs`
        // starts one when run without it; CI runs the tests with it.)
        let said = StartupError::LocalEmbedNotBuilt.to_string();
        assert!(said.contains("--features local-embed"), "{said}");
        assert!(said.contains("embed.kind = \"local\""), "{said}");
    }
}
