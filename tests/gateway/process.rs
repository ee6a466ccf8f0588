//! The `switchyard` binary as a process: a scratch directory, and `serve` with its log
//! lines read as they come.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// A directory under the system's temp dir that removes itself.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
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

/// A gateway process that is killed when the test ends: the url it said it listens on,
/// and its stderr lines from then on.
pub struct Served {
    pub child: Child,
    pub url: String,
    pub lines: Receiver<String>,
}

impl Served {
    /// Waits (at most 30 s) for a log line that contains every one of `words`; returns it.
    pub fn wait_for_line(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line with {words:?}"));
            if words.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    }

    /// Sends the process a signal by name (`HUP`, `TERM`).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name}");
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each line `output` writes, as it comes, read on a thread of its own.
pub fn lines_of(output: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (said, hear) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    hear
}

/// `switchyard serve --config CONFIG` from `cwd`, with `env` set; once it says it listens.
pub fn serve_with(cwd: &Path, config: &Path, env: &[(&str, &str)]) -> Served {
    serve_without(cwd, config, env, &[])
}

/// [`serve_with`], with the variables named in `removed` taken out of the environment the
/// process would inherit (before `env` is set).
pub fn serve_without(cwd: &Path, config: &Path, env: &[(&str, &str)], removed: &[&str]) -> Served {
    let mut command = Command::new(BIN);
    for name in removed {
        command.env_remove(name);
    }
    let mut child = command
        .current_dir(cwd)
        .args(["serve", "--config"])
        .arg(config)
        .env("SWITCHYARD_LOG", "info")
        .env_remove("SWITCHYARD_MASTER_KEY")
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hear = lines_of(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = hear
            .recv_timeout(left)
            .expect("the gateway says where it listens");
        if let Some(at) = line.split("switchyard listening on ").nth(1) {
            break at.split_whitespace().next().unwrap_or_default().to_owned();
        }
    };
    Served {
        child,
        url,
        lines: hear,
    }
}

/// `switchyard serve` with no extra environment.
pub fn serve(cwd: &Path, config: &Path) -> Served {
    serve_with(cwd, config, &[])
}
