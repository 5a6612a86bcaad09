//! `LocalEmbed`: the `Embed` port over a sentence-transformers model folder,
//! run in-process on the CPU with candle (no network, no Python).
//!
//! The folder is the standard sentence-transformers layout, as the usual
//! model hubs ship it:
//!
//! - `config.json`: a BERT-family encoder (all-MiniLM-L6-v2, bge-small,
//!   e5-small and the like);
//! - `tokenizer.json`: its tokenizer (read by the `tokenizers` crate built
//!   without C dependencies);
//! - `model.safetensors`: the weights (memory-mapped);
//! - `modules.json`: the pipeline; a `…Normalize` module there makes the
//!   vectors unit length;
//! - `1_Pooling/config.json` (the folder `modules.json` names for the
//!   pooling module): mean, CLS, max or mean-sqrt-len pooling;
//! - `sentence_bert_config.json` (optional): `max_seq_length`.
//!
//! **Long inputs are truncated** to `max_seq_length` word pieces (or the
//! model's position limit when the folder names none), as
//! sentence-transformers does: what comes after is not in the vector. A
//! turn or summary is rarely longer (256 word pieces is about 190 words).
//!
//! Forward passes run on tokio's blocking pool, never on the caller's (an
//! actor's) thread, `embed.local.batch` texts at a time, at most
//! `embed.local.concurrency` at once. Texts are sorted by length within a
//! call so that a batch pads little.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use recall_actors::embed::{Embed, EmbedError};
use recall_actors::port::BoxFuture;
use recall_actors::settings::LocalEmbedSettings;
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use bert::{BertModel, Config};

mod bert;

/// A model folder that cannot be used: which file, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model folder {}: {} is missing", dir.display(), file)]
    Missing { dir: PathBuf, file: &'static str },
    #[error("model file {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
}

/// How token vectors become one sentence vector (`1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
    Max,
    MeanSqrtLen,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// The loaded model, shared by the forward passes.
struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    dimensions: usize,
}

/// The in-process embedder.
#[derive(Clone)]
pub struct LocalEmbed {
    model: Arc<Model>,
    name: String,
    batch: usize,
    permits: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for LocalEmbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbed")
            .field("name", &self.name)
            .field("dimensions", &self.model.dimensions)
            .field("pooling", &self.model.pooling)
            .field("normalize", &self.model.normalize)
            .finish()
    }
}

fn read(dir: &Path, file: &'static str) -> Result<Vec<u8>, ModelError> {
    let path = dir.join(file);
    std::fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ModelError::Missing {
            dir: dir.to_path_buf(),
            file,
        },
        _ => ModelError::Malformed {
            path,
            reason: e.to_string(),
        },
    })
}

fn parse<T: serde::de::DeserializeOwned>(path: PathBuf, bytes: &[u8]) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| ModelError::Malformed {
        path,
        reason: e.to_string(),
    })
}

/// What `modules.json` and the pooling module's config say, with their
/// bytes (part of the model's identity).
struct Pipeline {
    pooling: Pooling,
    normalize: bool,
    modules_bytes: Vec<u8>,
    pooling_bytes: Vec<u8>,
}

/// Reads `modules.json` and the config of the pooling module it names.
fn read_pipeline(dir: &Path) -> Result<Pipeline, ModelError> {
    let modules_bytes = read(dir, "modules.json")?;
    let modules: Vec<Module> = parse(dir.join("modules.json"), &modules_bytes)?;
    let pooling_path = modules
        .iter()
        .find(|m| m.kind.ends_with(".Pooling"))
        .map(|m| m.path.clone())
        .ok_or_else(|| ModelError::Malformed {
            path: dir.join("modules.json"),
            reason: "names no sentence_transformers.models.Pooling module".into(),
        })?;
    // A module's path is a folder inside the model's: one that is
    // absolute or climbs out ("../../etc") would have the model read
    // files it does not own.
    let inside = Path::new(&pooling_path)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return Err(ModelError::Malformed {
            path: dir.join("modules.json"),
            reason: format!(
                "the pooling module's path {pooling_path:?} is not a folder inside the model's"
            ),
        });
    }
    let normalize = modules.iter().any(|m| m.kind.ends_with(".Normalize"));
    let pooling_file = Path::new(&pooling_path).join("config.json");
    let pooling_bytes = std::fs::read(dir.join(&pooling_file)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ModelError::Missing {
            dir: dir.to_path_buf(),
            file: "1_Pooling/config.json (the pooling module's config)",
        },
        _ => ModelError::Malformed {
            path: dir.join(&pooling_file),
            reason: e.to_string(),
        },
    })?;
    let pc: PoolingConfig = parse(dir.join(&pooling_file), &pooling_bytes)?;
    let pooling = match (
        pc.pooling_mode_mean_tokens,
        pc.pooling_mode_cls_token,
        pc.pooling_mode_max_tokens,
        pc.pooling_mode_mean_sqrt_len_tokens,
    ) {
        (true, false, false, false) => Pooling::Mean,
        (false, true, false, false) => Pooling::Cls,
        (false, false, true, false) => Pooling::Max,
        (false, false, false, true) => Pooling::MeanSqrtLen,
        _ => {
            return Err(ModelError::Malformed {
                path: dir.join(&pooling_file),
                reason: "exactly one pooling mode (mean, cls, max or mean_sqrt_len) must be true"
                    .into(),
            })
        }
    };
    Ok(Pipeline {
        pooling,
        normalize,
        modules_bytes,
        pooling_bytes,
    })
}

/// Reads `config.json` (a BERT-family encoder's) and its bytes.
fn read_config(dir: &Path) -> Result<(Config, Vec<u8>), ModelError> {
    let config_bytes = read(dir, "config.json")?;
    let config: Config = parse(dir.join("config.json"), &config_bytes)?;
    if config.model_type.as_deref().is_some_and(|t| t != "bert") {
        return Err(ModelError::Malformed {
            path: dir.join("config.json"),
            reason: format!(
                "model_type {:?}: only the BERT family is supported",
                config.model_type.as_deref().unwrap_or_default()
            ),
        });
    }
    Ok((config, config_bytes))
}

/// The word pieces an input is truncated to: `sentence_bert_config.json`'s
/// `max_seq_length`, within the model's position limit.
fn max_seq_length(dir: &Path, config: &Config) -> Result<usize, ModelError> {
    Ok(match std::fs::read(dir.join("sentence_bert_config.json")) {
        Ok(b) => {
            parse::<SentenceBertConfig>(dir.join("sentence_bert_config.json"), &b)?.max_seq_length
        }
        Err(_) => None,
    }
    .unwrap_or(config.max_position_embeddings)
    .min(config.max_position_embeddings))
}

/// Reads `tokenizer.json`, truncating to `max_len` and padding a batch to
/// its longest input; with its bytes.
fn read_tokenizer(
    dir: &Path,
    config: &Config,
    max_len: usize,
) -> Result<(Tokenizer, Vec<u8>), ModelError> {
    let tokenizer_bytes = read(dir, "tokenizer.json")?;
    let mut tokenizer =
        Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| ModelError::Malformed {
            path: dir.join("tokenizer.json"),
            reason: e.to_string(),
        })?;
    let pad_id = config.pad_token_id as u32;
    let pad_token = tokenizer
        .id_to_token(pad_id)
        .unwrap_or_else(|| "[PAD]".into());
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_len,
            ..Default::default()
        }))
        .map_err(|e| ModelError::Malformed {
            path: dir.join("tokenizer.json"),
            reason: e.to_string(),
        })?;
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        pad_id,
        pad_token,
        ..Default::default()
    }));
    Ok((tokenizer, tokenizer_bytes))
}

/// The encoder over the memory-mapped `weights`.
fn load_weights(weights: &Path, config: &Config) -> Result<BertModel, ModelError> {
    // SAFETY: the weights are memory-mapped read-only; recall never
    // writes them, and the user is told not to change the folder while
    // recall runs (docs/configuration.md).
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
        .map_err(|e| ModelError::Malformed {
        path: weights.to_path_buf(),
        reason: e.to_string(),
    })?;
    BertModel::load(vb, config).map_err(|e| ModelError::Malformed {
        path: weights.to_path_buf(),
        reason: format!("not the weights config.json describes: {e}"),
    })
}

/// The identity stored with every vector: the folder's name and a hash of
/// what defines the model (config, tokenizer, the weights' tensor table and
/// size, pooling), given as `defining`.
fn model_name(dir: &Path, defining: [&[u8]; 5]) -> String {
    let mut h = recall_actors::embed::FNV1A_START;
    for b in defining {
        h = recall_actors::embed::fnv1a_extend(h, b);
    }
    let folder = dir
        .canonicalize()
        .ok()
        .and_then(|d| {
            // A wheel's folder is called `model`: name its parent.
            let name = d.file_name()?.to_string_lossy().to_string();
            if name == "model" {
                Some(d.parent()?.file_name()?.to_string_lossy().to_string())
            } else {
                Some(name)
            }
        })
        .unwrap_or_else(|| "model".into());
    format!("local:{folder}:{:08x}", h as u32)
        .chars()
        .take(200)
        .collect()
}

impl LocalEmbed {
    /// Loads a model folder (blocking: reads and maps files). Every file
    /// is checked before anything runs; the error names the first one
    /// that is missing or malformed.
    pub fn load(settings: &LocalEmbedSettings) -> Result<LocalEmbed, ModelError> {
        let dir = PathBuf::from(&settings.model_dir);
        if !dir.is_dir() {
            return Err(ModelError::Malformed {
                path: dir,
                reason: "is not a folder".into(),
            });
        }
        let pipeline = read_pipeline(&dir)?;
        let (config, config_bytes) = read_config(&dir)?;
        let max_len = max_seq_length(&dir, &config)?;
        let (tokenizer, tokenizer_bytes) = read_tokenizer(&dir, &config, max_len)?;
        let weights = dir.join("model.safetensors");
        let header = safetensors_header(&dir, &weights)?;
        let bert = load_weights(&weights, &config)?;
        let name = model_name(
            &dir,
            [
                &config_bytes[..],
                &tokenizer_bytes,
                &header,
                &pipeline.pooling_bytes,
                &pipeline.modules_bytes,
            ],
        );
        Ok(LocalEmbed {
            model: Arc::new(Model {
                bert,
                tokenizer,
                pooling: pipeline.pooling,
                normalize: pipeline.normalize,
                dimensions: config.hidden_size,
            }),
            name,
            batch: settings.batch.max(1),
            permits: Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1))),
        })
    }

    /// The vectors of `texts`, in order, on the calling thread.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.batch) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = self.model.forward(&batch)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    async fn call(self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(texts.len());
        // One permit a batch, so a large call leaves room for a query.
        for chunk in texts.chunks(self.batch) {
            let permit = self
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| EmbedError::Failed("the embedder is closed".into()))?;
            let me = self.clone();
            let chunk = chunk.to_vec();
            let vectors = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                me.embed_blocking(&chunk)
            })
            .await
            .map_err(|e| EmbedError::Failed(format!("the forward pass panicked: {e}")))??;
            out.extend(vectors);
        }
        Ok(out)
    }
}

/// The safetensors file's tensor table (its JSON header) and size.
fn safetensors_header(dir: &Path, path: &Path) -> Result<Vec<u8>, ModelError> {
    use std::io::Read;
    let malformed = |reason: String| ModelError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let mut f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ModelError::Missing {
            dir: dir.to_path_buf(),
            file: "model.safetensors",
        },
        _ => malformed(e.to_string()),
    })?;
    let size = f.metadata().map_err(|e| malformed(e.to_string()))?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| malformed("too short for a safetensors file".into()))?;
    let n = u64::from_le_bytes(len);
    if n == 0 || n > 100 << 20 || n + 8 > size {
        return Err(malformed(format!(
            "not a safetensors file (header of {n} bytes)"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)
        .map_err(|e| malformed(e.to_string()))?;
    header.extend_from_slice(&size.to_le_bytes());
    Ok(header)
}

fn failed(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Failed(e.to_string())
}

impl Model {
    fn forward(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(failed)?;
        let n = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let dev = Device::Cpu;
        let ids = Tensor::from_vec(ids, (n, len), &dev).map_err(failed)?;
        let mask = Tensor::from_vec(mask, (n, len), &dev).map_err(failed)?;
        let types = ids.zeros_like().map_err(failed)?;
        let hidden = self.bert.forward(&ids, &types, &mask).map_err(failed)?;
        let pooled = pool(&hidden, &mask, self.pooling).map_err(failed)?;
        let mut rows: Vec<Vec<f32>> = pooled.to_vec2().map_err(failed)?;
        if self.normalize {
            for r in &mut rows {
                let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    r.iter_mut().for_each(|x| *x /= norm);
                }
            }
        }
        Ok(rows)
    }
}

/// `(n, len, hidden)` token vectors and an `(n, len)` mask to `(n, hidden)`.
fn pool(hidden: &Tensor, mask: &Tensor, pooling: Pooling) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Mean | Pooling::MeanSqrtLen => {
            let sum = hidden.broadcast_mul(&m)?.sum(1)?;
            let count = m.sum(1)?.clamp(1e-9, f32::MAX)?;
            let count = if pooling == Pooling::Mean {
                count
            } else {
                count.sqrt()?
            };
            sum.broadcast_div(&count)
        }
        Pooling::Max => {
            // Padding positions must never win: push them far down.
            let low = ((m.ones_like()? - &m)? * -1e9)?;
            hidden.broadcast_add(&low)?.max(1)
        }
    }
}

impl Embed for LocalEmbed {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> usize {
        self.model.dimensions
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.clone().call(texts))
    }
}
