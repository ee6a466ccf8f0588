//! The real binary as its own process, so its memory and file descriptors can be measured
//! from outside and its resource limits set for it alone.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::gateway::support::TestGateway;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// A running `switchyard serve`, killed when dropped.
pub struct Spawned {
    child: Option<Child>,
    pid: u32,
    pub addr: SocketAddr,
    config: std::path::PathBuf,
}

impl Spawned {
    /// Starts the gateway on an ephemeral port: `server` holds lines of its `[server]`
    /// section, `rest` the other sections (auth is optional and the store is in memory, as
    /// [`TestGateway::text`] makes them, unless `rest` has its own). Runs under a
    /// file-descriptor limit if `nofile` says so. Waits for the gateway's own word that it listens.
    pub fn start(server: &str, rest: &str, nofile: Option<u64>) -> Spawned {
        let config =
            std::env::temp_dir().join(format!("switchyard-bounds-{}.toml", uuid::Uuid::now_v7()));
        // No drain delay unless the test asks for one: it has no load balancer to tell.
        let drain = if server.contains("drain_delay") {
            ""
        } else {
            "drain_delay = \"0s\"\n"
        };
        let text = TestGateway::new()
            .with("[server]\nlisten = \"127.0.0.1:0\"\n")
            .with(drain)
            .with(server)
            .with(rest)
            .text();
        std::fs::write(&config, text).expect("config written");
        let mut command = match nofile {
            Some(n) => {
                // The shell sets the limit, then becomes the gateway: the pid stays the same.
                let mut command = Command::new("sh");
                command
                    .arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                command
            }
            None => Command::new(BIN),
        };
        let mut child = command
            .args(["serve", "--config"])
            .arg(&config)
            .env("SWITCHYARD_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the gateway starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (said, hear) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("addr=").nth(1)
                    && line.contains("switchyard listening")
                {
                    let _ = said.send(addr.trim().to_owned());
                }
            }
        });
        let addr = hear
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway says where it listens");
        Spawned {
            pid: child.id(),
            child: Some(child),
            addr: addr.parse().expect("a socket address"),
            config,
        }
    }

    /// Runs another command of the binary on the same config; its standard output.
    pub fn command(&self, args: &[&str]) -> String {
        let output = Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .output()
            .expect("the command runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A field of `/proc/<pid>/status` in kB, such as `VmHWM` (peak resident memory).
    pub fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the gateway is running");
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// File descriptors the gateway has open now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|dir| dir.count())
            .unwrap_or(0)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the process to exit; `None` if it has not within `limit` (it is then killed).
    pub async fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = self.pid;
        let waiting = tokio::task::spawn_blocking(move || child.wait());
        match tokio::time::timeout(limit, waiting).await {
            Ok(Ok(Ok(status))) => Some(status),
            _ => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                None
            }
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// A client that waits as long as any step of these tests may take, and no longer.
pub fn patient_client(limit: Duration) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(limit)
        .build()
        .expect("client builds")
}
