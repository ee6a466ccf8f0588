//! The documentation's examples work as written, in README.md and every page under docs/src:
//! - a ```` ```sh ```` block is either marked `sh runnable`, and runs against a live gateway set
//!   up the way the getting-started page sets one up, or the line before it says why it cannot
//!   run: `<!-- not run: REASON -->`. Other shell fences (`bash`, `console`, …) are refused, so
//!   no block slips past the rule.
//! - a ```` ```toml ```` block is a whole config and loads with the gateway's own loader, or
//!   the line before it says what it needs from elsewhere: `<!-- fragment: REASON -->`; a
//!   fragment is still TOML that parses.

use std::path::{Path, PathBuf};
use std::process::Command;

use switchyard::config::Config;
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
/// Where the walkthroughs keep their files; the test puts them in a directory of its own.
const CONFIG_DIR: &str = "/etc/switchyard";

/// One fenced block of a documentation file.
#[derive(Debug)]
struct Block {
    /// `path:line` of its opening fence.
    place: String,
    /// The fence's info string, such as `sh runnable`.
    info: String,
    /// The line just before the fence, trimmed: where a block says why it does not run.
    before: String,
    body: String,
}

/// README.md, then every Markdown page under docs/src, in a stable order.
fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = Vec::new();
    let mut dirs = vec![root.join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(pages);
    files
}

/// Every fenced block of `text`; `name` labels where each one is.
fn blocks_of(name: &str, text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (index, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                open = Some(Block {
                    place: format!("{name}:{}", index + 1),
                    info: info.trim().to_owned(),
                    before: previous.trim().to_owned(),
                    body: String::new(),
                });
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => found.extend(open.take()),
            (Some(block), _) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            (None, None) => {}
        }
        previous = line;
    }
    assert!(open.is_none(), "{name}: a fenced block is never closed");
    found
}

fn all_blocks() -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    doc_files()
        .iter()
        .flat_map(|path| {
            let name = path.strip_prefix(root).unwrap().display().to_string();
            blocks_of(&name, &std::fs::read_to_string(path).unwrap())
        })
        .collect()
}

/// The reason a block gives in the line before it, as `<!-- {tag}: REASON -->`.
fn reason<'a>(block: &'a Block, tag: &str) -> Option<&'a str> {
    let inner = block
        .before
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix(tag)?
        .strip_prefix(':')?
        .trim();
    (!inner.is_empty()).then_some(inner)
}

fn language(block: &Block) -> &str {
    block.info.split_whitespace().next().unwrap_or("")
}

#[test]
fn every_shell_block_runs_or_says_why_not() {
    let mut unexplained = Vec::new();
    for block in all_blocks() {
        match language(&block) {
            "bash" | "shell" | "console" | "zsh" | "shell-session" => unexplained.push(format!(
                "{}: write shell examples as ```sh (runnable or not), not ```{}",
                block.place, block.info
            )),
            "sh" if block.info == "sh runnable" => {}
            "sh" if block.info == "sh" && reason(&block, "not run").is_some() => {}
            "sh" => unexplained.push(format!(
                "{}: mark it `sh runnable`, or put `<!-- not run: why -->` on the line before",
                block.place
            )),
            _ => {}
        }
    }
    assert!(unexplained.is_empty(), "{}", unexplained.join("\n"));
}

#[test]
fn every_toml_block_is_a_whole_valid_config_or_a_marked_fragment() {
    let mut wrong = Vec::new();
    let mut whole = 0;
    for block in all_blocks().iter().filter(|b| language(b) == "toml") {
        if reason(block, "fragment").is_some() {
            if let Err(e) = block.body.parse::<toml::Table>() {
                wrong.push(format!("{}: the fragment is not TOML: {e}", block.place));
            }
            continue;
        }
        whole += 1;
        if let Err(e) = Config::parse(&block.body) {
            wrong.push(format!(
                "{}: not a valid config (or mark it `<!-- fragment: what it needs -->`):\n{e}",
                block.place
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(whole >= 10, "the docs show whole configs; found {whole}");
}

/// A directory that `switchyard init` filled, as the getting-started page makes one.
fn initialised_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-docs-{}", uuid::Uuid::now_v7()));
    let output = Command::new(BIN)
        .args(["init", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "switchyard init failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

#[tokio::test]
async fn every_runnable_block_runs_against_a_gateway() {
    let runnable: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.info == "sh runnable")
        .collect();
    assert!(
        runnable.len() >= 5,
        "the docs mark their admin and CLI examples runnable"
    );
    // The gateway of the walkthroughs: `init`'s config and admin token file, served as
    // `switchyard serve` serves it, on a port of its own.
    let dir = initialised_dir();
    let config_path = dir.join("switchyard.toml");
    let config = Config::load(&config_path).unwrap();
    let token = std::fs::read_to_string(dir.join("admin-token")).unwrap();
    let options = StartOptions {
        admin_token: Some(Secret::new(token.trim())),
        master_key: None,
        config_path: Some(config_path),
    };
    let gateway = Gateway::start_with(config, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .unwrap();
    let address = gateway.admin_url().trim_start_matches("http://").to_owned();
    let bin_dir = Path::new(BIN).parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    for block in runnable {
        // curl answers 0 for a 4xx; --fail-with-body makes a refused example fail the test.
        let script = format!(
            "set -euo pipefail\ncurl() {{ command curl -sS --fail-with-body \"$@\"; }}\n{}",
            block
                .body
                .replace("localhost:8080", &address)
                .replace(CONFIG_DIR, &dir.display().to_string())
        );
        let (dir, path) = (dir.clone(), path.clone());
        let output = tokio::task::spawn_blocking(move || {
            // Nothing the walkthrough does not set up itself: no admin token in the
            // environment, only the provider keys a reader would have exported.
            Command::new("bash")
                .arg("-c")
                .arg(&script)
                .current_dir(&dir)
                .env_remove("SWITCHYARD_ADMIN_TOKEN")
                .env_remove("SWITCHYARD_MASTER_KEY")
                .env("PATH", path)
                .env("OPENAI_API_KEY", "sk-docs-example-openai")
                .env("ANTHROPIC_API_KEY", "sk-ant-docs-example")
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(
            output.status.success(),
            "{} failed:\n{}\nstdout: {}\nstderr: {}",
            block.place,
            block.body,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over HTTP there is no `--id`: an ambiguous rollback names the body's field.
#[tokio::test]
async fn an_ambiguous_rollback_over_http_names_the_body_field() {
    let dir = initialised_dir();
    let config_path = dir.join("switchyard.toml");
    let config = Config::load(&config_path).unwrap();
    let options = StartOptions {
        admin_token: Some(Secret::new("docs-admin-token")),
        master_key: None,
        config_path: Some(config_path),
    };
    let gateway = Gateway::start_with(config, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let admin = gateway.admin_url();
    for id in ["main", "backup"] {
        let put = client
            .put(format!("{admin}/admin/keys/openai"))
            .bearer_auth("docs-admin-token")
            .body(format!(r#"{{"secret":"sk-{id}-secret","id":"{id}"}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    }
    let rollback = client
        .post(format!("{admin}/admin/keys/openai/rollback"))
        .bearer_auth("docs-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(rollback.status(), 400);
    let body: serde_json::Value = rollback.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("--id"), "{body}");
    assert!(message.contains(r#""id""#), "{body}");
    assert_eq!(body["error"]["param"], "id", "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}
