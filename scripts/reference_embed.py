#!/usr/bin/env python3
"""An independent reference for recall's local embedder.

The BERT forward pass of a sentence-transformers model folder, written
out in numpy from the published architecture (embeddings, post-norm
encoder layers with erf GELU, masked mean/CLS/max pooling, optional L2
normalization), reading the weights with the `safetensors` package and
the word pieces with the `tokenizers` package. It shares no code with
recall (which runs candle). Run once to produce the fixture vectors that
`tests/local_embed.rs` compares recall's vectors with:

    pip install numpy safetensors tokenizers
    python3 scripts/reference_embed.py MODEL_DIR > tests/fixtures/embed_reference.json
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SENTENCES = [
    "My dog is called Biscuit.",
    "We named our puppy Biscuit.",
    "I signed up for the Chicago marathon in October.",
    "The quarterly tax filing is due next week.",
    "Google invited me to an onsite interview on Thursday.",
    "I'm preparing for my job interview at Google.",
    "Shellfish and I do not get along, I found that out the hard way.",
    "What am I allergic to?",
    "hi",
    "",
    "Naïve café owners in São Paulo — 3 of them — said “hello” 👋 twice.",
    " ".join(["long"] * 400),
]


def erf(x):
    # numpy has no erf; math.erf element-wise is exact enough here
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def main(model_dir):
    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    modules = json.loads((d / "modules.json").read_text())
    pool_dir = next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
    pool = json.loads((d / pool_dir / "config.json").read_text())
    normalize = any(m["type"].endswith(".Normalize") for m in modules)
    max_len = cfg["max_position_embeddings"]
    sbc = d / "sentence_bert_config.json"
    if sbc.exists():
        max_len = min(max_len, json.loads(sbc.read_text()).get("max_seq_length") or max_len)
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in load_file(str(d / "model.safetensors")).items()}
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    h, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    dh = h // heads
    out = []
    for s in SENTENCES:
        ids = np.array(tok.encode(s).ids)
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(n)]
            + w["embeddings.token_type_embeddings.weight"][np.zeros(n, dtype=int)]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            q = lin(x, "attention.self.query").reshape(n, heads, dh).transpose(1, 0, 2)
            k = lin(x, "attention.self.key").reshape(n, heads, dh).transpose(1, 0, 2)
            v = lin(x, "attention.self.value").reshape(n, heads, dh).transpose(1, 0, 2)
            a = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
            a = np.exp(a - a.max(-1, keepdims=True))
            a = a / a.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(1, 0, 2).reshape(n, h)
            x = layer_norm(
                lin(ctx, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            inter = lin(x, "intermediate.dense")
            inter = 0.5 * inter * (1.0 + erf(inter / math.sqrt(2.0)))
            x = layer_norm(
                lin(inter, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                eps,
            )
        if pool.get("pooling_mode_cls_token"):
            v = x[0]
        elif pool.get("pooling_mode_max_tokens"):
            v = x.max(0)
        elif pool.get("pooling_mode_mean_sqrt_len_tokens"):
            v = x.sum(0) / math.sqrt(n)
        else:
            v = x.mean(0)
        if normalize:
            v = v / np.linalg.norm(v)
        out.append({"text": s, "tokens": int(n), "vector": [round(float(t), 7) for t in v]})
    json.dump({"model": "all-MiniLM-L6-v2", "normalized": normalize, "max_seq_length": max_len, "sentences": out}, sys.stdout, indent=None, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
