//! Counting a context's tokens as the model does: the counter
//! `context.tokenizer` names ([`TokenizerKind`]). `chars4` is the engine's
//! estimate ([`CharEstimate`]); OpenAI's encodings come from `tiktoken-rs`
//! (feature `tiktoken`), a Hugging Face `tokenizer.json` from the
//! `tokenizers` crate (feature `hf-tokenizer`). Counts are of the text
//! alone, as `encode_ordinary` and `encode(text, add_special_tokens =
//! false)` give them: no special tokens, no truncation, no padding.

use std::sync::Arc;

use recall_actors::context::{CharEstimate, TokenCounter};
use recall_actors::settings::{ContextSettings, TokenizerKind};

/// Why the configured counter cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "context.tokenizer = \"{0}\" needs recall built with the {1} feature \
         (cargo build --release --features {1})"
    )]
    NotBuilt(&'static str, &'static str),
    #[error("cannot read the tokenizer {path} (context.tokenizer_file): {reason}")]
    File { path: String, reason: String },
    #[error("cannot load the {0} encoding: {1}")]
    Encoding(&'static str, String),
}

/// The counter `settings.tokenizer` names.
pub fn token_counter(settings: &ContextSettings) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    match settings.tokenizer {
        TokenizerKind::Chars4 => Ok(Arc::new(CharEstimate)),
        TokenizerKind::Cl100kBase => openai("cl100k_base"),
        TokenizerKind::O200kBase => openai("o200k_base"),
        TokenizerKind::Huggingface => huggingface(&settings.tokenizer_file),
    }
}

#[cfg(feature = "tiktoken")]
fn openai(name: &'static str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    let bpe = match name {
        "cl100k_base" => tiktoken_rs::cl100k_base(),
        _ => tiktoken_rs::o200k_base(),
    }
    .map_err(|e| TokenizerError::Encoding(name, e.to_string()))?;
    Ok(Arc::new(Tiktoken(bpe)))
}

#[cfg(not(feature = "tiktoken"))]
fn openai(name: &'static str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    Err(TokenizerError::NotBuilt(name, "tiktoken"))
}

/// An OpenAI encoding.
#[cfg(feature = "tiktoken")]
pub struct Tiktoken(tiktoken_rs::CoreBPE);

#[cfg(feature = "tiktoken")]
impl TokenCounter for Tiktoken {
    fn count(&self, text: &str) -> usize {
        self.0.encode_ordinary(text).len()
    }
}

#[cfg(feature = "hf-tokenizer")]
fn huggingface(path: &str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    let file = |reason: String| TokenizerError::File {
        path: path.to_string(),
        reason,
    };
    let mut t = tokenizers::Tokenizer::from_file(path).map_err(|e| file(e.to_string()))?;
    // The text's own tokens, however long: a model's tokenizer.json often
    // truncates to its window and pads to a length.
    t.with_truncation(None).map_err(|e| file(e.to_string()))?;
    t.with_padding(None);
    Ok(Arc::new(HfTokenizer(t)))
}

#[cfg(not(feature = "hf-tokenizer"))]
fn huggingface(_: &str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    Err(TokenizerError::NotBuilt("huggingface", "hf-tokenizer"))
}

/// A Hugging Face tokenizer.
#[cfg(feature = "hf-tokenizer")]
pub struct HfTokenizer(tokenizers::Tokenizer);

#[cfg(feature = "hf-tokenizer")]
impl TokenCounter for HfTokenizer {
    fn count(&self, text: &str) -> usize {
        // (An encoding fails only on a tokenizer that cannot be run at
        // all, which loading it would have shown: counted as the estimate
        // then, never as nothing.)
        match self.0.encode_fast(text, false) {
            Ok(e) => e.len(),
            Err(_) => CharEstimate.count(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars4_is_the_estimate_and_a_tokenizer_file_must_be_named() {
        let c = token_counter(&ContextSettings::default()).unwrap();
        assert_eq!(c.count("abcde"), 2);
        let hf = ContextSettings {
            tokenizer: TokenizerKind::Huggingface,
            ..ContextSettings::default()
        };
        assert!(hf.validate().is_err());
    }

    #[test]
    fn a_missing_tokenizer_file_is_an_error_naming_it() {
        let s = ContextSettings {
            tokenizer: TokenizerKind::Huggingface,
            tokenizer_file: "no/such/tokenizer.json".into(),
            ..ContextSettings::default()
        };
        let e = token_counter(&s).err().expect("refused").to_string();
        assert!(
            e.contains("no/such/tokenizer.json") || e.contains("hf-tokenizer"),
            "{e}"
        );
    }
}
