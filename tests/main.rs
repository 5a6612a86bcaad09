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
mod mcp;
mod mirror;
mod openai;
mod replay;
mod retrieval;
mod rollup;
mod runtime;
mod serve_binary;
mod server;
mod settings;
mod simulate;
mod tokens;

/// Every file beside this one is one of its modules: with one binary
/// declared (`autotests = false`), a file left out here would never be
/// built or run, and nothing else would say so.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let declared = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
            continue;
        };
        let file = path.extension().is_some_and(|e| e == "rs");
        if file && name != "main" && !declared.contains(&format!("\nmod {name};\n")) {
            missing.push(name.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "not modules of tests/main.rs: {missing:?}"
    );
}
