//! The fuzz targets' checks (`fuzz/checks/`) over their committed corpora
//! (`fuzz/corpus/<target>/`): every input the fuzzer kept, and every crash
//! it found and that was fixed, is replayed on every test run, in the
//! ordinary test build. Fuzzing itself (new inputs, for a bounded time) is
//! `.ci/fuzz`, run on its own: it needs a build of its own.

use std::path::PathBuf;

#[path = "../fuzz/checks/api_bodies.rs"]
mod api_bodies;
#[path = "../fuzz/checks/reflect_parse.rs"]
mod reflect_parse;
#[path = "../fuzz/checks/simulate_script.rs"]
mod simulate_script;

/// The inputs of a target's committed corpus, by file name.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no inputs", dir.display());
    inputs
}

/// Runs `check` on every input of `target`'s corpus, naming the input a
/// failing check was given.
fn replay(target: &str, check: fn(&[u8])) {
    for (path, bytes) in corpus(target) {
        if let Err(panic) = std::panic::catch_unwind(|| check(&bytes)) {
            eprintln!("{target}: the input {} fails its check", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn reflect_parse_corpus() {
    replay("reflect_parse", reflect_parse::check);
}

#[test]
fn simulate_script_corpus() {
    replay("simulate_script", simulate_script::check);
}

#[test]
fn api_bodies_corpus() {
    replay("api_bodies", api_bodies::check);
}
