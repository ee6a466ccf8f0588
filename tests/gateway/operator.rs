//! The operator's path from a fresh directory to a running gateway: `init`, `check`, `serve`,
//! the version, the service unit, and config errors that point at the line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::*;
use super::support::*;

/// Writes `text` as `switchyard.toml` in `home`; its path.
fn write_config(home: &TempDir, text: &str) -> PathBuf {
    let config = home.0.join("switchyard.toml");
    std::fs::write(&config, text).unwrap();
    config
}

fn run(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .current_dir(cwd)
        .args(args)
        .env_remove("SWITCHYARD_MASTER_KEY")
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .output()
        .unwrap()
}

#[tokio::test]
async fn init_check_and_serve_from_another_directory_use_the_same_store() {
    let home = TempDir::new();
    let elsewhere = TempDir::new();
    let init = run(&home.0, &["init", "--dir", "conf"]);
    assert!(init.status.success(), "{init:?}");
    let config = home.0.join("conf/switchyard.toml");
    // Any free port, so tests can run side by side.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\""),
    )
    .unwrap();

    let check = run(
        &elsewhere.0,
        &["check", "--config", config.to_str().unwrap()],
    );
    assert!(check.status.success(), "{check:?}");
    assert!(String::from_utf8_lossy(&check.stdout).contains("route smart"));

    // The key is made from the config's directory...
    let created = run(
        &home.0.join("conf"),
        &[
            "vkeys",
            "create",
            "--config",
            "switchyard.toml",
            "--user",
            "ops",
            "--role",
            "default",
        ],
    );
    assert!(created.status.success(), "{created:?}");
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    // ...and the gateway is started from somewhere else entirely.
    let served = serve(&elsewhere.0, &config);
    let models = client()
        .get(format!("{}/v1/models", served.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200, "the key made beside the config works");
    assert!(home.0.join("conf/switchyard.db").exists());
    assert!(!elsewhere.0.join("conf/switchyard.db").exists());
    assert!(!elsewhere.0.join("switchyard.db").exists());

    // The admin token comes from the file init wrote.
    let token = std::fs::read_to_string(home.0.join("conf/admin-token")).unwrap();
    let keys = client()
        .get(format!("{}/admin/keys", served.url))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(keys.status(), 200);
}

#[test]
fn a_token_file_others_can_read_is_refused_before_listening() {
    let home = TempDir::new();
    assert!(run(&home.0, &["init", "--dir", "."]).status.success());
    let token = home.0.join("admin-token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = run(&home.0, &["serve", "--config", "switchyard.toml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
    // check refuses it just as serve does.
    let check = run(&home.0, &["check", "--config", "switchyard.toml"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("chmod 600"));
}

#[test]
fn serve_says_nothing_of_listening_when_the_store_cannot_open() {
    let home = TempDir::new();
    write_config(
        &home,
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = \"sqlite://no/such/dir/x.db\"\n",
    );
    let out = run(&home.0, &["serve", "--config", "switchyard.toml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Refused before opening anything, in the same words as `check` (and a reload).
    assert!(
        stderr.contains("store.url: the store's directory"),
        "{stderr}"
    );
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
    let check = run(&home.0, &["check", "--config", "switchyard.toml"]);
    assert_eq!(
        check.status.code(),
        Some(1),
        "check refuses what serve cannot open"
    );
    assert!(String::from_utf8_lossy(&check.stderr).contains("store.url: the store's directory"));
}

#[test]
fn check_refuses_what_serve_would_refuse_and_points_at_the_line() {
    let home = TempDir::new();
    let config = write_config(
        &home,
        "[store]\nurl = \"mysql://db\"\n[limits]\nredis_url = \"http://x\"\n",
    );
    let out = run(&home.0, &["check", "--config", "switchyard.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("store.url: `mysql://db` is not a store"),
        "{stderr}"
    );
    assert!(
        stderr.contains("limits.redis_url: is not a Redis URL"),
        "{stderr}"
    );

    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[[routes]\nname = 1\n",
    )
    .unwrap();
    let out = run(&home.0, &["check", "--config", "switchyard.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(line 3, column 10)"), "{stderr}");
    assert!(stderr.contains("    | [[routes]\n"), "{stderr}");
}

#[test]
fn version_names_the_commit_and_help_names_the_environment() {
    let out = run(Path::new("."), &["--version"]);
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(version.starts_with("switchyard 0."), "{version}");
    assert!(version.contains("(commit "), "{version}");
    for (command, variable) in [
        ("serve", "SWITCHYARD_MASTER_KEY"),
        ("serve", "SWITCHYARD_ADMIN_TOKEN"),
        ("keys", "SWITCHYARD_MASTER_KEY"),
        ("check", "SWITCHYARD_LOG"),
        ("demo", "SWITCHYARD_LOG"),
    ] {
        let help = run(Path::new("."), &[command, "--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.contains(variable), "{command} --help: {text}");
    }
}

/// The unit in deploy/ is valid: `systemd-analyze verify` where systemd is installed, else a
/// parse of its sections and keys.
#[test]
fn the_systemd_unit_is_valid() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/switchyard.service"),
    )
    .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart");
    assert!(
        exec.starts_with("/usr/local/bin/switchyard serve --config /"),
        "{exec}"
    );
    let has_systemd = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok();
    if has_systemd {
        let dir = TempDir::new();
        let path = dir.0.join("switchyard.service");
        std::fs::write(&path, unit.replace("/usr/local/bin/switchyard", BIN)).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("switchyard.service"), "{stderr}");
    } else {
        let mut sections = Vec::new();
        for line in unit.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                sections.push(section.to_owned());
            } else {
                let (key, _) = line.split_once('=').expect("Key=Value");
                assert!(key.chars().all(|c| c.is_ascii_alphanumeric()), "{line}");
            }
        }
        assert_eq!(sections, ["Unit", "Service", "Install"]);
    }
}

#[tokio::test]
async fn logs_show_the_key_by_name_and_the_user_filter_and_follow() {
    let home = TempDir::new();
    let fake = scripted("up", []).await;
    let config = home.0.join("switchyard.toml");
    let text = TestGateway::new()
        .with("[server]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = \"sqlite://gw.db\"\n")
        .with("[[roles]]\nname = \"default\"\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .raw_text();
    std::fs::write(&config, text).unwrap();
    let config_arg = config.to_str().unwrap();
    let mut keys = Vec::new();
    for user in ["ana", "bo"] {
        let created = run(
            &home.0,
            &[
                "vkeys", "create", "--config", config_arg, "--user", user, "--role", "default",
            ],
        );
        assert!(created.status.success(), "{created:?}");
        keys.push(String::from_utf8(created.stdout).unwrap().trim().to_owned());
    }
    let served = serve(&home.0, &config);
    let send = |key: String| {
        let url = format!("{}/v1/chat/completions", served.url);
        async move {
            let response = client()
                .post(url)
                .bearer_auth(key)
                .json(&chat("r"))
                .send()
                .await;
            assert_eq!(response.unwrap().status(), 200);
        }
    };
    send(keys[0].clone()).await;
    send(keys[1].clone()).await;

    // Rows reach the store off the request path. `logs --follow` prints each row once it is
    // stored: when it has printed two, both are in.
    let mut all = Command::new(BIN)
        .args(["logs", "--config", config_arg, "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stored = lines_of(all.stdout.take().unwrap());
    for n in 1..=2 {
        stored
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("only {} of 2 rows are stored", n - 1));
    }
    let _ = all.kill();
    let _ = all.wait();
    let out = run(&home.0, &["logs", "--config", config_arg, "--user", "ana"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        table.lines().count(),
        2,
        "a header and ana's one row:\n{table}"
    );
    assert!(table.lines().next().unwrap().contains("KEY"), "{table}");
    let row = table.lines().nth(1).unwrap();
    assert!(row.contains("ana") && !row.contains(" bo "), "{row}");
    assert!(
        row.contains(&keys[0][..8]),
        "the key's name (its prefix): {row}"
    );
    assert!(!row.contains(&keys[0]), "never the whole key: {row}");
    let later = run(&home.0, &["logs", "--config", config_arg, "--until", "1h"]);
    assert_eq!(String::from_utf8(later.stdout).unwrap().lines().count(), 1);

    // --follow prints a row stored after it started.
    let mut follow = Command::new(BIN)
        .args([
            "logs", "--config", config_arg, "--follow", "--json", "--user", "bo",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let hear = lines_of(follow.stdout.take().unwrap());
    let first = hear
        .recv_timeout(Duration::from_secs(10))
        .expect("bo's first row");
    send(keys[1].clone()).await;
    let second = hear
        .recv_timeout(Duration::from_secs(10))
        .expect("bo's new row, followed");
    let _ = follow.kill();
    let _ = follow.wait();
    let ids: Vec<String> = [first, second]
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .collect();
    assert_ne!(ids[0], ids[1]);
}

/// Serves `config` until one request is answered, then SIGTERM; every stderr line.
async fn stderr_of_one_request(cwd: &Path, config: &Path) -> Vec<String> {
    let mut child = Command::new(BIN)
        .current_dir(cwd)
        .args(["serve", "--config"])
        .arg(config)
        .env("SWITCHYARD_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let hear = lines_of(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    let addr = loop {
        let line = hear
            .recv_timeout(Duration::from_secs(30))
            .expect("a log line");
        let addr = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["fields"]["addr"].as_str().map(str::to_owned));
        lines.push(line);
        if let Some(addr) = addr {
            break addr;
        }
    };
    let response = client()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&chat("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(killed.unwrap().success());
    assert!(child.wait().unwrap().success());
    lines.extend(hear.try_iter());
    lines
}

#[tokio::test]
async fn json_logs_and_an_access_log_that_can_be_turned_off() {
    let home = TempDir::new();
    let fake = scripted("up", []).await;
    let base = TestGateway::new()
        .with("[server]\nlisten = \"127.0.0.1:0\"\n")
        .with("[auth]\nrequired = false\n[store]\nurl = \"sqlite::memory:\"\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "");
    let is_request = |line: &String| {
        serde_json::from_str::<serde_json::Value>(line)
            .is_ok_and(|v| v["fields"]["message"] == "request")
    };
    for (access_log, expected) in [(true, 1), (false, 0)] {
        let config = home.0.join(format!("access-{access_log}.toml"));
        let text = base
            .clone()
            .with("[log]\nformat = \"json\"\n")
            .set("access_log", access_log)
            .raw_text();
        std::fs::write(&config, text).unwrap();
        let lines = stderr_of_one_request(&home.0, &config).await;
        for line in &lines {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "not JSON: {line}"
            );
        }
        assert_eq!(
            lines.iter().filter(|l| is_request(l)).count(),
            expected,
            "access_log = {access_log}: {lines:#?}"
        );
    }
}
