//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/`, minimised) and every input
//! that once found a bug (`fuzz/regressions/<target>/`) through the same target bodies the
//! fuzzer ran (`fuzz/targets.rs`), so `cargo test` keeps what fuzzing found without needing
//! the fuzzer. `scripts/fuzz` runs a deep fuzz.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

/// Keeps the replay quick whatever the machine: corpora are minimised before a commit.
const MAX_FILES: usize = 3_000;
const MAX_BYTES: u64 = 2 * 1024 * 1024;

/// Runs every file of `fuzz/corpus/<name>` and `fuzz/regressions/<name>` through `target`,
/// naming the file that fails.
fn replay(name: &str, target: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = files_in(&fuzz.join("corpus").join(name));
    let regressions = fuzz.join("regressions").join(name);
    if regressions.is_dir() {
        files.extend(files_in(&regressions));
    }
    assert!(!files.is_empty(), "the {name} corpus is empty");
    assert!(files.len() <= MAX_FILES, "{name}: {} files", files.len());
    let bytes: u64 = files
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(
        bytes <= MAX_BYTES,
        "{name}: {bytes} bytes; run cargo fuzz cmin"
    );
    for file in &files {
        let data = std::fs::read(file).expect("a corpus file reads");
        let outcome = std::panic::catch_unwind(|| target(&data));
        assert!(outcome.is_ok(), "{name} fails on {}", file.display());
    }
}

#[test]
fn sse_corpus() {
    replay("sse", targets::sse);
}

#[test]
fn retry_after_corpus() {
    replay("retry_after", targets::retry_after);
}

#[test]
fn config_corpus() {
    replay("config", targets::config);
}

#[test]
fn request_translator_corpus() {
    replay("request", targets::request);
}

#[test]
fn response_translator_corpus() {
    replay("response", targets::response);
}

#[test]
fn stream_translator_corpus() {
    replay("stream", targets::stream);
}

/// The files of `dir`, in a stable order.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("no corpus at {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}
