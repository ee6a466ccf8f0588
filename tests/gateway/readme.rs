//! The README's examples work as written: every block marked `sh runnable` runs against a live
//! gateway, and every `toml` block that is a whole config passes validation.

use std::process::Command;

use switchyard::config::Config;
use switchyard::fake::FakeUpstream;
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::support::*;

const ADMIN_TOKEN: &str = "readme-admin-token";

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The bodies of the fenced blocks whose info string is `info`.
fn blocks(text: &str, info: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(rest)) if rest.trim() == info => current = Some(String::new()),
            (Some(_), Some("")) => found.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    found
}

#[tokio::test]
async fn every_runnable_block_runs_against_a_gateway() {
    let runnable = blocks(&readme(), "sh runnable");
    assert!(
        runnable.len() >= 2,
        "the README marks its admin examples runnable"
    );
    let fake = FakeUpstream::new("openai").start().await.unwrap();
    let config = TestGateway::new()
        .provider("openai", &fake)
        .route("smart", &[("openai", "gpt-4o")], "")
        .config();
    let options = StartOptions {
        admin_token: Some(Secret::new(ADMIN_TOKEN)),
        ..StartOptions::default()
    };
    let gateway = Gateway::start_with(config, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .unwrap();
    let address = gateway.admin_url().trim_start_matches("http://").to_owned();
    for block in runnable {
        // curl answers 0 for a 4xx; --fail-with-body makes a refused example fail the test.
        let script = format!(
            "set -euo pipefail\ncurl() {{ command curl -sS --fail-with-body \"$@\"; }}\n{}",
            block.replace("localhost:8080", &address)
        );
        let output = tokio::task::spawn_blocking(move || {
            Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(
            output.status.success(),
            "README block failed:\n{block}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn the_configuration_example_is_a_valid_config() {
    let text = readme();
    let toml = blocks(&text, "toml");
    let complete = toml
        .iter()
        .find(|b| b.contains("[server]") && b.contains("[[routes]]"))
        .expect("the README shows a complete config");
    if let Err(e) = Config::parse(complete) {
        panic!("the README's config does not validate:\n{e}\n{complete}");
    }
}
