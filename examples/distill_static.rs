//! Distils a sentence-transformers model folder into the static word
//! vectors of the built-in offline embedder (`embed.kind = "static"`), the way
//! Model2Vec does: every whole word of the model's vocabulary is run
//! through the model alone, the vectors are reduced by principal
//! components, weighted by how rare the word is (Zipf: the vocabulary is
//! in order of frequency, a word's weight is `ln(1 + rank)`, so "the"
//! weighs nothing) and stored as one signed byte per number with a scale
//! per word. A text's vector is then the sum of its words' vectors:
//! meaning learned by the model, at the cost of a table look-up.
//!
//! The model's vocabulary alone misses everyday words it splits into
//! pieces ("cilantro", "terrier", "decaf"). A word-frequency list (one
//! `word count` per line, most frequent first; `scripts/fetch-words`
//! fetches SymSpell's English list) adds them: the table's words are then
//! the list's, in its order, one per stem (the most frequent form), then
//! the model's whole words of the stems the list lacks, one per stem.
//!
//! ```text
//! scripts/fetch-model && scripts/fetch-words
//! cargo run --release --features local-embed --example distill_static -- \
//!     target/models/all-MiniLM-L6-v2 actors/data/static-words.bin 256 \
//!     target/words/frequency_dictionary_en_82_765.txt
//! ```
//!
//! The file: `RCSW1\n`, then little-endian `u32` dimensions and `u32`
//! words, then per word its length in bytes (`u8`), its bytes, its scale
//! (`f32`) and its numbers (`i8` each).

use std::io::Write;

use recall::engine::lang::stem;
use recall::engine::settings::LocalEmbedSettings;
use recall::local_embed::LocalEmbed;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: distill_static MODEL_DIR OUT [DIMENSIONS [WORD_LIST]]";
    let model_dir = args.next().ok_or(usage)?;
    let out = args.next().ok_or(usage)?;
    let dims: usize = args.next().map_or(Ok(256), |d| d.parse())?;
    let list = args.next().map(std::fs::read_to_string).transpose()?;

    let tokenizer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{model_dir}/tokenizer.json"))?)?;
    let vocab = tokenizer["model"]["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no model.vocab")?;
    // Whole words (no "##" pieces, no marks, no single letters), in the
    // vocabulary's order.
    let whole =
        |w: &str| w.len() >= 2 && w.len() < 256 && w.chars().all(|c| c.is_ascii_lowercase());
    let mut words: Vec<(u64, &str)> = vocab
        .iter()
        .filter(|(w, _)| whole(w))
        .filter_map(|(w, id)| Some((id.as_u64()?, w.as_str())))
        .collect();
    words.sort();
    let mut texts: Vec<String> = Vec::new();
    if let Some(list) = &list {
        // The list's words in its order, one per stem; then the model's
        // words of stems the list lacks. (Another form of a stem the
        // list holds would land at the end and weigh as the rarest word
        // there is; the table finds it by its stem.)
        let mut stems = std::collections::HashSet::new();
        for line in list.lines() {
            let Some(word) = line.split_whitespace().next() else {
                continue;
            };
            if whole(word) && stems.insert(stem(word)) {
                texts.push(word.to_string());
            }
        }
        let from_list = texts.len();
        for (_, w) in &words {
            if stems.insert(stem(w)) {
                texts.push(w.to_string());
            }
        }
        eprintln!(
            "{} words: {from_list} from the list, {} more from the model",
            texts.len(),
            texts.len() - from_list
        );
    } else {
        texts = words.iter().map(|(_, w)| w.to_string()).collect();
        eprintln!("{} words", texts.len());
    }

    let model = LocalEmbed::load(&LocalEmbedSettings {
        model_dir: model_dir.clone(),
        ..Default::default()
    })?;
    let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(256) {
        vectors.extend(model.embed_blocking(chunk)?);
        eprint!("\r{} embedded", vectors.len());
    }
    eprintln!();

    let width = vectors.first().map_or(0, Vec::len);
    if dims == 0 || dims > width {
        return Err(format!("DIMENSIONS must be 1 to the model's {width}").into());
    }
    let projected = principal_components(&vectors, dims);
    let mut file = std::io::BufWriter::new(std::fs::File::create(&out)?);
    file.write_all(b"RCSW1\n")?;
    file.write_all(&(dims as u32).to_le_bytes())?;
    file.write_all(&(texts.len() as u32).to_le_bytes())?;
    for (rank, (word, v)) in texts.iter().zip(&projected).enumerate() {
        let weight = (1.0 + rank as f32).ln();
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs())) * weight;
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        file.write_all(&[word.len() as u8])?;
        file.write_all(word.as_bytes())?;
        file.write_all(&scale.to_le_bytes())?;
        let bytes: Vec<u8> = v
            .iter()
            .map(|x| ((x * weight / scale).round().clamp(-127.0, 127.0) as i8) as u8)
            .collect();
        file.write_all(&bytes)?;
    }
    file.flush()?;
    eprintln!("wrote {out}");
    Ok(())
}

/// The vectors, centred and projected on their first `dims` principal
/// components (eigenvectors of the covariance, by cyclic Jacobi
/// rotations).
#[allow(clippy::needless_range_loop)] // a matrix reads best by its indices
fn principal_components(vectors: &[Vec<f32>], dims: usize) -> Vec<Vec<f32>> {
    let n = vectors[0].len();
    let count = vectors.len() as f64;
    let mut mean = vec![0f64; n];
    for v in vectors {
        for (m, x) in mean.iter_mut().zip(v) {
            *m += *x as f64 / count;
        }
    }
    let mut cov = vec![vec![0f64; n]; n];
    for v in vectors {
        let c: Vec<f64> = v.iter().zip(&mean).map(|(x, m)| *x as f64 - m).collect();
        for i in 0..n {
            for j in i..n {
                cov[i][j] += c[i] * c[j] / count;
            }
        }
    }
    for i in 0..n {
        for j in 0..i {
            cov[i][j] = cov[j][i];
        }
    }
    let (values, vecs) = jacobi(cov);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    let total: f64 = values.iter().sum();
    let kept: f64 = order.iter().take(dims).map(|&i| values[i]).sum();
    eprintln!(
        "{dims} components keep {:.1} % of the variance",
        100.0 * kept / total
    );
    vectors
        .iter()
        .map(|v| {
            order
                .iter()
                .take(dims)
                .map(|&k| {
                    (0..n)
                        .map(|i| (v[i] as f64 - mean[i]) * vecs[i][k])
                        .sum::<f64>() as f32
                })
                .collect()
        })
        .collect()
}

/// Eigenvalues and eigenvectors (as columns) of a symmetric matrix.
#[allow(clippy::needless_range_loop)] // a matrix reads best by its indices
fn jacobi(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    let mut v = vec![vec![0f64; n]; n];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for _sweep in 0..50 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-18 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-15 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vkp, vkq) = (row[p], row[q]);
                    row[p] = c * vkp - s * vkq;
                    row[q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..n).map(|i| a[i][i]).collect(), v)
}
