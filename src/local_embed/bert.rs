//! The BERT encoder's forward pass over candle's kernels, for inference.
//!
//! Adapted from candle-transformers 0.11.1, `src/models/bert.rs`
//! (<https://github.com/huggingface/candle>, copyright the Hugging Face
//! candle authors, MIT OR Apache-2.0), itself after Hugging Face
//! transformers' `modeling_bert.py`: the same weights' names, the same
//! operations in the same order, without dropout (a no-op at inference)
//! and without the masked-language-model heads. recall needs this one
//! model, and candle-transformers compiles every model it ships: a minute
//! of every clean build and check. `tests/local_embed.rs` checks the
//! vectors against an independent numpy forward pass.

use candle_core::{Module, Result, Tensor, D};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

/// The activation between a layer's two dense projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HiddenAct {
    Gelu,
    GeluApproximate,
    Relu,
}

impl HiddenAct {
    fn forward(self, xs: &Tensor) -> Result<Tensor> {
        match self {
            HiddenAct::Gelu => xs.gelu_erf(),
            HiddenAct::GeluApproximate => xs.gelu(),
            HiddenAct::Relu => xs.relu(),
        }
    }
}

/// Only absolute position embeddings are supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PositionEmbeddingType {
    #[default]
    Absolute,
}

/// A BERT `config.json`. The fields the forward pass does not use are
/// still required, as in transformers' `BertConfig` and candle's `Config`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[allow(dead_code)] // read to check config.json, not used at inference
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HiddenAct,
    pub hidden_dropout_prob: f64,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub initializer_range: f64,
    pub layer_norm_eps: f64,
    pub pad_token_id: usize,
    #[serde(default)]
    pub position_embedding_type: PositionEmbeddingType,
    #[serde(default)]
    pub use_cache: bool,
    pub classifier_dropout: Option<f64>,
    pub model_type: Option<String>,
}

struct Embeddings {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        Ok(Self {
            words: embedding(c.vocab_size, c.hidden_size, vb.pp("word_embeddings"))?,
            positions: embedding(
                c.max_position_embeddings,
                c.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_types: embedding(
                c.type_vocab_size,
                c.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(c.hidden_size, c.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    fn forward(&self, ids: &Tensor, types: &Tensor) -> Result<Tensor> {
        let (_, len) = ids.dims2()?;
        let xs = (self.words.forward(ids)? + self.token_types.forward(types)?)?;
        let positions = Tensor::new(&(0..len as u32).collect::<Vec<_>>()[..], ids.device())?;
        let xs = xs.broadcast_add(&self.positions.forward(&positions)?)?;
        self.norm.forward(&xs)
    }
}

/// Multi-head self-attention and its output projection, with the residual.
struct Attention {
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    norm: LayerNorm,
    heads: usize,
    head_size: usize,
}

impl Attention {
    fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        let head_size = c.hidden_size / c.num_attention_heads;
        let all = c.num_attention_heads * head_size;
        let own = vb.pp("self");
        let output = vb.pp("output");
        Ok(Self {
            query: linear(c.hidden_size, all, own.pp("query"))?,
            value: linear(c.hidden_size, all, own.pp("value"))?,
            key: linear(c.hidden_size, all, own.pp("key"))?,
            out: linear(c.hidden_size, c.hidden_size, output.pp("dense"))?,
            norm: layer_norm(c.hidden_size, c.layer_norm_eps, output.pp("LayerNorm"))?,
            heads: c.num_attention_heads,
            head_size,
        })
    }

    /// `(n, len, hidden)` to `(n, heads, len, head_size)`.
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (n, len, _) = xs.dims3()?;
        xs.reshape((n, len, self.heads, self.head_size))?
            .transpose(1, 2)?
            .contiguous()
    }

    fn forward(&self, xs: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let q = self.split_heads(&self.query.forward(xs)?)?;
        let k = self.split_heads(&self.key.forward(xs)?)?;
        let v = self.split_heads(&self.value.forward(xs)?)?;
        let scores = (q.matmul(&k.t()?)? / (self.head_size as f64).sqrt())?;
        let probs = candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)?;
        self.norm.forward(&(self.out.forward(&context)? + xs)?)
    }
}

struct Layer {
    attention: Attention,
    intermediate: Linear,
    act: HiddenAct,
    output: Linear,
    norm: LayerNorm,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        Ok(Self {
            attention: Attention::load(vb.pp("attention"), c)?,
            intermediate: linear(
                c.hidden_size,
                c.intermediate_size,
                vb.pp("intermediate").pp("dense"),
            )?,
            act: c.hidden_act,
            output: linear(
                c.intermediate_size,
                c.hidden_size,
                vb.pp("output").pp("dense"),
            )?,
            norm: layer_norm(
                c.hidden_size,
                c.layer_norm_eps,
                vb.pp("output").pp("LayerNorm"),
            )?,
        })
    }

    fn forward(&self, xs: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let attended = self.attention.forward(xs, mask)?;
        let inner = self.act.forward(&self.intermediate.forward(&attended)?)?;
        self.norm
            .forward(&(self.output.forward(&inner)? + attended)?)
    }
}

/// The encoder: embeddings, then the layers; gives every token's vector.
pub struct BertModel {
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl BertModel {
    /// Loads the weights under `bert.`, under `<model_type>.` or at the
    /// top, as candle-transformers does.
    pub fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        let vb = if vb.contains_tensor("bert") {
            vb.pp("bert")
        } else {
            vb
        };
        let at = |vb: VarBuilder| -> Result<Self> {
            let encoder = vb.pp("encoder");
            Ok(Self {
                embeddings: Embeddings::load(vb.pp("embeddings"), c)?,
                layers: (0..c.num_hidden_layers)
                    .map(|i| Layer::load(encoder.pp(format!("layer.{i}")), c))
                    .collect::<Result<_>>()?,
            })
        };
        match at(vb.clone()) {
            Ok(model) => Ok(model),
            Err(e) => match &c.model_type {
                Some(prefix) => at(vb.pp(prefix)).map_err(|_| e),
                None => Err(e),
            },
        }
    }

    /// `(n, len)` word-piece ids, token types and attention mask (1 for a
    /// token, 0 for padding) to `(n, len, hidden)`.
    pub fn forward(&self, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let mut xs = self.embeddings.forward(ids, types)?;
        // Padding gets the lowest score before the softmax: (1 - mask) * min.
        let mask = mask.unsqueeze(1)?.unsqueeze(1)?.to_dtype(xs.dtype())?;
        let low = Tensor::new(f32::MIN, mask.device())?.to_dtype(xs.dtype())?;
        let mask = (mask.ones_like()? - &mask)?.broadcast_mul(&low)?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &mask)?;
        }
        Ok(xs)
    }
}
