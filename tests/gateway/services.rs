//! Real services for cluster-mode tests: the machine's Redis, or one a test runs itself.
//!
//! `scripts/test` sets `SWITCHYARD_REQUIRE_SERVICES=1`, so in CI a missing service fails the
//! test; a plain `cargo test` elsewhere prints which tests it skipped and why.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn required() -> bool {
    std::env::var("SWITCHYARD_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

fn skip(test: &str, why: &str) {
    assert!(
        !required(),
        "{test}: {why}, and SWITCHYARD_REQUIRE_SERVICES=1 forbids skipping"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// Whether the shared Redis answers at 127.0.0.1:6379; says so when it does not.
pub fn redis_reachable(test: &str) -> bool {
    let reachable =
        TcpStream::connect_timeout(&"127.0.0.1:6379".parse().unwrap(), Duration::from_secs(1))
            .is_ok();
    if !reachable {
        skip(test, "Redis is not reachable at 127.0.0.1:6379");
    }
    reachable
}

/// A `redis-server` of the test's own, on a free port.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one, or returns `None` (having said why) when `redis-server` is missing.
    pub fn start(test: &str) -> Option<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = RedisServer { port, child: None };
        if !server.spawn() {
            skip(test, "redis-server is not installed");
            return None;
        }
        Some(server)
    }

    /// Runs the server and waits for its own word that it accepts connections.
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            return false;
        };
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("Ready to accept connections"));
        assert!(ready, "redis-server did not start");
        std::thread::spawn(move || lines.for_each(drop));
        self.child = Some(child);
        true
    }

    /// Kills the server and waits until it is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        assert!(self.spawn(), "redis-server restarts");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The headless browser for the dashboard test: `chromium` on the PATH, or `None` (having
/// said why) where it is missing and skipping is allowed.
pub fn chromium(test: &str) -> Option<String> {
    let found = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        skip(test, "chromium is not installed (apt-get install chromium)");
        return None;
    }
    Some("chromium".into())
}
