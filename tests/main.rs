//! recall's integration tests, in one test binary: each file beside this
//! one is a module (what it tests is in its own header), `common/` their
//! shared helpers. One binary links once, not once per file, and its test
//! threads run the long tests of every file side by side (one binary per
//! file ran them one file after another). Run a file's tests by its name:
//! `cargo test --test integration crash::`.

mod common;

mod blocks;
mod crash;
mod dialogues;
mod embeddings;
mod eval;
mod facts;
mod forget;
mod fuzz_corpus;
mod local_embed;
mod openai;
mod replay;
mod retrieval;
mod rollup;
mod runtime;
mod serve_binary;
mod server;
mod settings;
mod simulate;
