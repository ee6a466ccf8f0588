//! The operator's path from a fresh directory to a running gateway: `init`, `check`, `serve`,
//! the version, the service unit, and config errors that point at the line.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// A directory under the system's temp dir that removes itself.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("switchyard-op-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// A gateway process that is killed when the test ends, and the address it said it listens on.
struct Served(Child, String);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(cwd: &Path, config: &Path) -> Served {
    let mut child = Command::new(BIN)
        .current_dir(cwd)
        .args(["serve", "--config"])
        .arg(config)
        .env("SWITCHYARD_LOG", "info")
        .env_remove("SWITCHYARD_MASTER_KEY")
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (said, hear) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.split("switchyard listening on ").nth(1) {
                let url = at.split_whitespace().next().unwrap_or_default();
                let _ = said.send(url.to_owned());
            }
        }
    });
    let url = hear
        .recv_timeout(Duration::from_secs(30))
        .expect("the gateway says where it listens");
    Served(child, url)
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
        .get(format!("{}/v1/models", served.1))
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
        .get(format!("{}/admin/keys", served.1))
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
}

#[test]
fn serve_says_nothing_of_listening_when_the_store_cannot_open() {
    let home = TempDir::new();
    let config = home.0.join("switchyard.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = \"sqlite://no/such/dir/x.db\"\n",
    )
    .unwrap();
    let out = run(&home.0, &["serve", "--config", "switchyard.toml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot open the store"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
    // One cause, said once.
    assert_eq!(
        stderr.matches("unable to open database file").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn check_refuses_what_serve_would_refuse_and_points_at_the_line() {
    let home = TempDir::new();
    let config = home.0.join("switchyard.toml");
    std::fs::write(
        &config,
        "[store]\nurl = \"mysql://db\"\n[limits]\nredis_url = \"http://x\"\n",
    )
    .unwrap();
    let out = run(&home.0, &["check", "--config", "switchyard.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("store.url: `mysql://db` is not a store"),
        "{stderr}"
    );
    assert!(stderr.contains("limits.redis_url: `http://x`"), "{stderr}");

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
