//! The binary's lifecycle: config checks and graceful shutdown on SIGTERM.

use std::process::{Command, Stdio};

use futures_util::StreamExt;
use switchyard::fake::Behavior;

use super::process::lines_of;
use super::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn write_config(text: &str) -> tempfile_path::TempPath {
    tempfile_path::TempPath::new(text)
}

/// A config file that removes itself.
mod tempfile_path {
    pub struct TempPath(pub std::path::PathBuf);

    impl TempPath {
        pub fn new(text: &str) -> TempPath {
            let path =
                std::env::temp_dir().join(format!("switchyard-test-{}.toml", uuid::Uuid::now_v7()));
            std::fs::write(&path, text).unwrap();
            TempPath(path)
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn check_names_the_field_at_fault_and_exits_1() {
    let config = write_config(
        "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n\
         [[routes]]\nname = \"r\"\nsteps = [{ provider = \"a\", model = \"m\" }]\n\
         [[routes]]\nname = \"s\"\nsteps = [{ provider = \"a\", model = \"m\" }, { provider = \"ghost\", model = \"m\" }]\n",
    );
    let output = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config.0)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("routes[1].steps[1].provider: no provider is named `ghost`"),
        "{stderr}"
    );
}

#[test]
fn check_prints_each_routes_worst_case() {
    let config = write_config(
        "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n\
         [[routes]]\nname = \"smart\"\nsteps = [{ provider = \"a\", model = \"m\" }]\n",
    );
    let output = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config.0)
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("route smart"), "{stdout}");
    assert!(
        stdout.contains("worst case: 1m (capped by request_deadline)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn sigterm_during_a_stream_lets_the_stream_complete() {
    let fake = scripted("up", [Behavior::ok().content("a b c d e").chunks(5, 200)]).await;
    let port = closed_addr().port();
    let config = TestGateway::new()
        .with("[server]\n")
        .set("listen", format!("127.0.0.1:{port}"))
        .with("[auth]\nrequired = false\n[store]\nurl = \"sqlite::memory:\"\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "");
    let config = write_config(&config.text());
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config.0)
        .env("SWITCHYARD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the gateway's own word that it listens, not for a while.
    let lines = lines_of(child.stderr.take().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !lines
        .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        .expect("the gateway says it is listening")
        .contains("switchyard listening")
    {}

    let response = client()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .json(&chat_stream("r"))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream is not cut"),
        ));
    }
    assert_eq!(streamed_text(&sse_data(&text)), "a b c d e");
    assert!(text.ends_with("data: [DONE]\n\n"));
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(fake.stats().streams_completed, 1);
}
