//! The `Reflect` port: turns a session into reflection text. The engine
//! only sees this trait; the offline [`extractive`] implementation lives
//! here, network-backed ones live in the `recall` crate.

pub mod extractive;
pub mod parse;
pub mod parts;

use std::error::Error as StdError;
use std::time::Duration;

use crate::model::{ConversationTurn, SessionRecord};

pub use crate::port::BoxFuture;

/// Everything an implementation may use: the rendered prompts and the
/// session they were rendered from.
#[derive(Debug, Clone)]
pub struct ReflectRequest {
    pub system: String,
    pub prompt: String,
    pub session: SessionRecord,
    pub turns: Vec<ConversationTurn>,
    /// Summaries to combine (a fold of a call's windows, a rollup), oldest
    /// first; empty when the turns are what is summarized.
    pub sources: Vec<String>,
    /// The longest a combined summary may be, in characters
    /// (`rollup.combine_max_chars` for rollups and topics); `None` leaves
    /// it to the summarizer.
    pub max_chars: Option<usize>,
}

/// A summarizer. Implementations return the raw reflection text; the
/// reflector parses it (JSON expected, raw-text fallback otherwise).
pub trait Reflect: Send + Sync + 'static {
    /// A short name for logs (`extractive`, `openai`).
    fn name(&self) -> &'static str;
    /// What a summary made through this summarizer depends on beyond the
    /// prompt: the name, and the model where there is one
    /// (`openai:gpt-4o-mini`). Part of a summary's derivation fingerprint.
    fn identity(&self) -> String {
        self.name().to_string()
    }
    /// The most tokens one request may hold (estimated as
    /// [`parts::request_tokens`] counts them), for a summarizer whose model
    /// reads a bounded context: a call whose prompt is longer is reflected
    /// in parts ([`parts`]). `None`: unbounded.
    fn max_prompt_tokens(&self) -> Option<usize> {
        None
    }
    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>>;
    /// The same for derived work that may lag (a live call's window
    /// summaries and folds): a summarizer that takes a core runs it where
    /// it waits for the turns (the offline one: on the lowest-priority
    /// threads of [`crate::background`]). By default, [`Reflect::reflect`].
    fn reflect_in_background(
        &self,
        request: ReflectRequest,
    ) -> BoxFuture<'static, Result<String, ReflectError>> {
        self.reflect(request)
    }
}

type Cause = Box<dyn StdError + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ReflectError {
    #[error("reflection timed out after {0:?}")]
    Timeout(Duration),
    #[error("rate limited (429)")]
    RateLimited { retry_after: Option<Duration> },
    #[error("server error {status}: {body}")]
    Server { status: u16, body: String },
    #[error("request rejected with status {status}: {body}")]
    Rejected { status: u16, body: String },
    /// The server read the prompt as longer than its model's context
    /// (OpenAI's and vLLM's `context_length_exceeded`): the same prompt
    /// fails again, a shorter one may not.
    #[error("prompt over the model's context (status {status}): {body}")]
    ContextLengthExceeded { status: u16, body: String },
    /// Not even a part of one turn, with the prompt's own text, fits in
    /// what a request may hold: the configured
    /// `reflector.openai.max_prompt_tokens`, or what is left of it after
    /// the server refused longer prompts (`refused`, the last refusal).
    #[error("a part of one turn takes about {tokens} tokens with the prompt's own text, over the {budget} a request may hold")]
    ContextTooSmall {
        tokens: usize,
        budget: usize,
        #[source]
        refused: Option<Box<ReflectError>>,
    },
    #[error("transport error")]
    Transport(#[source] Cause),
    #[error("response is not a chat completion")]
    InvalidResponse(#[source] Cause),
    #[error("reflector misconfigured: {0}")]
    Config(String),
}

impl ReflectError {
    /// Timeouts, 5xx, 429, transport failures and garbled envelopes are worth
    /// another attempt; a rejected request, a prompt over the model's
    /// context (the parts are made smaller instead, see [`parts`]) or a
    /// configuration error is not.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ReflectError::Timeout(_)
                | ReflectError::RateLimited { .. }
                | ReflectError::Server { .. }
                | ReflectError::Transport(_)
                | ReflectError::InvalidResponse(_)
        )
    }

    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReflectError::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ReflectError::Timeout(_) => "timeout",
            ReflectError::RateLimited { .. } => "rate_limited",
            ReflectError::Server { .. } => "server_error",
            ReflectError::Rejected { .. } => "rejected",
            ReflectError::ContextLengthExceeded { .. } => "context_length_exceeded",
            ReflectError::ContextTooSmall { .. } => "context_too_small",
            ReflectError::Transport(_) => "transport",
            ReflectError::InvalidResponse(_) => "invalid_response",
            ReflectError::Config(_) => "config",
        }
    }

    /// The error and its causes, outermost first, for dead letters.
    pub fn chain(&self) -> String {
        crate::port::error_chain(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_keeps_causes() {
        let inner = std::io::Error::other("connection reset");
        let e = ReflectError::Transport(Box::new(inner));
        assert_eq!(e.chain(), "transport error: connection reset");
        assert!(e.is_retryable());
        assert!(!ReflectError::Rejected {
            status: 400,
            body: String::new()
        }
        .is_retryable());
    }
}
