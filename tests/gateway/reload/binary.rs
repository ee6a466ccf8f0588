//! The binary: `check`, `serve` and a reload refuse the same files, and `SIGHUP` reloads a
//! running `serve` instead of ending it.

use std::path::Path;

use super::super::process::*;
use super::super::support::*;
use super::{FromFile, TOKEN, one_route};

fn run(cwd: &Path, args: &[&str]) -> std::process::Output {
    run_switchyard(cwd, args)
}

#[tokio::test]
async fn check_serve_and_reload_refuse_the_same_store_and_redis_urls() {
    let up = scripted("up", []).await;
    let served = FromFile::start(&one_route(&up)).await;
    let dir = TempDir::new();
    let bad = [
        (
            "limits.redis_url",
            TestGateway::new().with(
                "[limits]\nbackend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379/not-a-db\"\n",
            ),
        ),
        (
            "store.url",
            // A directory, not a file: SQLite cannot open it.
            TestGateway::new()
                .with("[store]\n")
                .set("url", format!("sqlite://{}", dir.0.display())),
        ),
    ];
    for (field, section) in bad {
        let text = section
            .with("[server]\nlisten = \"127.0.0.1:0\"\n")
            .provider("up", &up)
            .route("r", &[("up", "m")], "");
        served.rewrite(&text);
        let (status, body) = served.reload().await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["param"], field, "{body}");
        assert_eq!(post(&served.gateway, &chat("r")).await.status(), 200);

        let file = served.file.to_str().unwrap();
        let check = run(&dir.0, &["check", "--config", file]);
        let said = String::from_utf8_lossy(&check.stderr);
        assert_eq!(check.status.code(), Some(1), "check: {said}");
        assert!(said.contains(&format!("  {field}: ")), "check: {said}");

        let serve = run(&dir.0, &["serve", "--config", file]);
        let said = String::from_utf8_lossy(&serve.stderr);
        assert!(!serve.status.success(), "serve: {said}");
        assert!(said.contains(&format!("{field}: ")), "serve: {said}");
        assert!(!said.contains("listening"), "serve: {said}");
    }
}

#[tokio::test]
async fn sighup_reloads_the_file_and_the_process_keeps_serving() {
    let up = scripted("up", []).await;
    let home = TempDir::new();
    let file = home.0.join("switchyard.toml");
    let config = TestGateway::new()
        .with(concat!(
            "[server]\nlisten = \"127.0.0.1:0\"\n",
            "[auth]\nrequired = false\n",
            "[store]\nurl = \"sqlite://gw.db\"\n",
        ))
        .provider("up", &up)
        .route("r", &[("up", "m")], "");
    std::fs::write(&file, config.text()).unwrap();
    let mut served = serve_with(&home.0, &file, &[("SWITCHYARD_ADMIN_TOKEN", TOKEN)]);
    let url = format!("{}/v1/chat/completions", served.url);
    let ask = |model: &'static str| {
        let url = url.clone();
        async move {
            client()
                .post(url)
                .json(&chat(model))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(ask("r").await, 200);
    assert_eq!(ask("fresh").await, 404);

    let fresh = config.clone().route("fresh", &[("up", "m2")], "");
    std::fs::write(&file, fresh.text()).unwrap();
    served.signal("HUP");
    served.wait_for_line(&["config reloaded"]);
    assert_eq!(ask("fresh").await, 200, "the reloaded route serves");
    assert!(served.running(), "SIGHUP does not end the process");

    // An invalid file: refused, logged with its field, and the running config serves on.
    let bad = config
        .clone()
        .with("[[routes]]\nname = \"bad\"\nsteps = []\n");
    std::fs::write(&file, bad.text()).unwrap();
    served.signal("HUP");
    let line = served.wait_for_line(&["config reload refused"]);
    assert!(line.contains("routes[1].steps"), "{line}");
    assert_eq!(ask("r").await, 200);
    assert_eq!(ask("fresh").await, 200);

    // It still stops cleanly, with every answered request in its log.
    served.signal("TERM");
    assert!(served.child.wait().unwrap().success());
    std::fs::write(&file, config.text()).unwrap();
    let rows = run(
        &home.0,
        &["logs", "--config", file.to_str().unwrap(), "--json"],
    );
    let said = String::from_utf8_lossy(&rows.stderr).into_owned();
    let rows = String::from_utf8_lossy(&rows.stdout).lines().count();
    assert_eq!(rows, 5, "one row per request: {said}");
}
