//! `OpenAiEmbed`: the `Embed` port over an OpenAI-compatible
//! `/embeddings` endpoint (OpenAI, Ollama, vLLM, llama.cpp's server, LM
//! Studio). Texts go in batches of `embed.openai.batch`; the answer's
//! `index` fields put vectors back in the order asked, and every vector
//! must have the size of the first one the server ever returned.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use recall_actors::embed::{Embed, EmbedError};
use recall_actors::port::BoxFuture;
use recall_actors::settings::OpenAiEmbedSettings;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
pub struct OpenAiEmbed {
    client: reqwest::Client,
    url: String,
    model: String,
    /// `openai:` and the model: vectors of another model never meet these.
    name: String,
    api_key: Option<String>,
    batch: usize,
    /// Learned from the first answer (0 until then).
    dimensions: Arc<AtomicUsize>,
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingData>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl OpenAiEmbed {
    pub fn new(
        settings: &OpenAiEmbedSettings,
        api_key: Option<String>,
    ) -> Result<Self, EmbedError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.timeout_secs))
            .build()
            .map_err(|e| EmbedError::Failed(format!("cannot build HTTP client: {e}")))?;
        Ok(OpenAiEmbed {
            client,
            url: format!("{}/embeddings", settings.base_url.trim_end_matches('/')),
            model: settings.model.clone(),
            name: format!("openai:{}", settings.model),
            api_key: api_key.filter(|k| !k.is_empty()),
            batch: settings.batch.max(1),
            dimensions: Arc::new(AtomicUsize::new(0)),
        })
    }

    async fn call(self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch) {
            out.extend(self.call_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn call_batch(&self, input: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut http = self.client.post(&self.url).json(&EmbeddingRequest {
            model: &self.model,
            input,
        });
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        let resp = http
            .send()
            .await
            .map_err(|e| EmbedError::Failed(format!("{}: {e}", self.url)))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| EmbedError::Failed(format!("reading the answer: {e}")))?;
        if !status.is_success() {
            return Err(EmbedError::Failed(format!(
                "status {}: {}",
                status.as_u16(),
                recall_actors::model::truncate_chars(text.trim(), 256)
            )));
        }
        let parsed: EmbeddingResponse = serde_json::from_str(&text)
            .map_err(|e| EmbedError::Failed(format!("not an embeddings answer: {e}")))?;
        if parsed.data.len() != input.len() {
            return Err(EmbedError::Failed(format!(
                "asked for {} vectors, got {}",
                input.len(),
                parsed.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; input.len()];
        for (pos, d) in parsed.data.into_iter().enumerate() {
            let i = d.index.unwrap_or(pos);
            let slot = slots
                .get_mut(i)
                .ok_or_else(|| EmbedError::Failed(format!("vector index {i} out of range")))?;
            *slot = Some(d.embedding);
        }
        let vectors: Vec<Vec<f32>> = slots
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| EmbedError::Failed(format!("no vector for input {i}"))))
            .collect::<Result<_, _>>()?;
        // Every vector the size of the first one the server ever sent (or,
        // before any, of this answer's first).
        let known = self.dimensions.load(Ordering::Relaxed);
        let expected = if known > 0 {
            known
        } else {
            vectors.first().map_or(0, Vec::len)
        };
        if let Some(bad) = vectors.iter().find(|v| v.len() != expected || v.is_empty()) {
            return Err(EmbedError::Dimensions {
                expected,
                got: bad.len(),
            });
        }
        self.dimensions.store(expected, Ordering::Relaxed);
        Ok(vectors)
    }
}

impl Embed for OpenAiEmbed {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> usize {
        self.dimensions.load(Ordering::Relaxed)
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.clone().call(texts))
    }
}
