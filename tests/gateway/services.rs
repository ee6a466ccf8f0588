//! Real services for cluster-mode tests: the machine's Redis, or one a test runs itself.
//!
//! `scripts/test` sets `SWITCHYARD_REQUIRE_SERVICES=1`, so in CI a missing service fails the
//! test; a plain `cargo test` elsewhere prints which tests it skipped and why.

use std::io::{BufRead, BufReader, Write};
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
    // Straight to stderr, past the test harness's capture: a plain `cargo test` shows it.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
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
    /// Arguments beside the port's, such as TLS's.
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one, or returns `None` (having said why) when `redis-server` is missing.
    pub fn start(test: &str) -> Option<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        RedisServer::start_with(test, port, Vec::new())
    }

    /// One that takes TLS connections only, on `port`, with `cert` and `key` (PEM files), and
    /// asks for `password`.
    pub fn start_tls(test: &str, cert: &str, key: &str, password: &str) -> Option<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let extra = [
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            cert,
            "--tls-key-file",
            key,
            "--tls-ca-cert-file",
            cert,
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
        ];
        // The plain port is 0: off.
        RedisServer::start_with(test, 0, extra.map(str::to_owned).to_vec()).map(|mut server| {
            server.port = port;
            server
        })
    }

    fn start_with(test: &str, port: u16, extra: Vec<String>) -> Option<RedisServer> {
        let mut server = RedisServer {
            port,
            child: None,
            extra,
        };
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
            .args(&self.extra)
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

/// A PostgreSQL server of the test's own, on a free port, in a data directory it removes:
/// for the tests that stop the store, never the shared one. Built with `initdb` and
/// `pg_ctl` from the PATH or the Debian packages' directory; as root, they run as the
/// `postgres` user, since PostgreSQL refuses to run as root.
pub struct PgServer {
    pub port: u16,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
}

impl PgServer {
    /// Initialises and starts one, or returns `None` (having said why) without `initdb`.
    pub fn start(test: &str) -> Option<PgServer> {
        PgServer::start_with(test, None)
    }

    /// One that takes connections over TLS only, with `cert` and `key` (PEM), and asks
    /// for `password` (SCRAM) from user `postgres`.
    pub fn start_tls(test: &str, cert: &str, key: &str, password: &str) -> Option<PgServer> {
        PgServer::start_with(test, Some((cert, key, password)))
    }

    fn start_with(test: &str, tls: Option<(&str, &str, &str)>) -> Option<PgServer> {
        let Some(bin) = pg_bin_dir() else {
            skip(test, "initdb is not installed (apt-get install postgresql)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("switchyard-pg-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        if as_root() {
            assert!(
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&dir)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let server = PgServer { port, dir, bin };
        let data = server.dir.join("data");
        let mut initdb = server.command("initdb");
        initdb.args(["--auth=trust", "--username=postgres", "--no-sync"]);
        if let Some((_, _, password)) = tls {
            let file = server.dir.join("password");
            std::fs::write(&file, password).unwrap();
            server.own(&file);
            initdb
                .arg("--auth-host=scram-sha-256")
                .arg("--pwfile")
                .arg(&file);
        }
        let init = initdb
            .arg("-D")
            .arg(&data)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        if let Some((cert, key, _)) = tls {
            for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                let path = data.join(name);
                std::fs::write(&path, pem).unwrap();
                let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
                std::fs::set_permissions(&path, owner_only).unwrap();
                server.own(&path);
            }
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .unwrap();
            writeln!(
                conf,
                "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'"
            )
            .unwrap();
            // TCP over TLS only, with the password; the socket (the test's own tools) trusted.
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 scram-sha-256\n\
                 hostssl all all ::1/128 scram-sha-256\n\
                 hostnossl all all 0.0.0.0/0 reject\n",
            )
            .unwrap();
        }
        server.restart();
        Some(server)
    }

    /// Hands a file to the `postgres` user, when the test runs as root.
    fn own(&self, path: &std::path::Path) {
        if as_root() {
            let chown = Command::new("chown")
                .arg("postgres:postgres")
                .arg(path)
                .status();
            assert!(chown.unwrap().success());
        }
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// The server's URL, without a database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// Stops it (fast shutdown: open connections are cut) and waits until it is down.
    pub fn stop(&self) {
        let stopped = self
            .command("pg_ctl")
            .args(["-m", "fast", "-w", "stop", "-D"])
            .arg(self.dir.join("data"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(stopped.success(), "pg_ctl stop");
    }

    /// Starts it (again) on its port and waits until it accepts connections.
    pub fn restart(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        let started = self
            .command("pg_ctl")
            .args(["-w", "-o", &options, "-l"])
            .arg(self.dir.join("log"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("start")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(started.success(), "pg_ctl start");
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-w", "stop", "-D"])
            .arg(self.dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn as_root() -> bool {
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// Where `initdb` and `pg_ctl` are: the PATH, else the newest Debian PostgreSQL.
fn pg_bin_dir() -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>());
    let mut debian: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("bin"))
        .collect();
    debian.sort();
    on_path
        .chain(debian.into_iter().rev())
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}
