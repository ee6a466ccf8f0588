//! Real services for the tests of the `services` binary: the machine's Redis and
//! PostgreSQL, or a `redis-server`, a PostgreSQL or a Chromium a test runs itself.
//!
//! The binary's harness ([`Need::missing`]) looks for each before any test starts, and runs
//! only the tests whose services are there; so the helpers here never skip, and a service
//! that goes missing mid-run fails the test that wanted it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use switchyard::store::postgres::testdb::TestDb;

/// Redis's own clock at `url`, in seconds since the epoch: the limits' fixed windows and
/// the budgets' days follow it, not the test's clock.
pub async fn redis_seconds(url: &str) -> u64 {
    let client = ::redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let (seconds, _): (u64, u64) = ::redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    seconds
}

/// A service a test needs beside the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// The shared Redis at 127.0.0.1:6379.
    Redis,
    /// The shared PostgreSQL (`SWITCHYARD_TEST_POSTGRES`, default 127.0.0.1:5432).
    Postgres,
    /// `redis-server`, to run one of the test's own.
    RedisServer,
    /// `initdb` and `pg_ctl`, to run a PostgreSQL of the test's own.
    PgServer,
    /// `chromium`, headless.
    Chromium,
}

impl Need {
    /// Why this service cannot be had here, or `None` when it can.
    pub fn missing(self) -> Option<String> {
        match self {
            Need::Redis => {
                let redis = "127.0.0.1:6379".parse().unwrap();
                let reachable = TcpStream::connect_timeout(&redis, Duration::from_secs(1));
                reachable
                    .err()
                    .map(|e| format!("Redis is not reachable at 127.0.0.1:6379 ({e})"))
            }
            Need::Postgres => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(TestDb::usable()).err()
            }
            Need::RedisServer => (!runs("redis-server"))
                .then(|| "redis-server is not installed (apt-get install redis-server)".into()),
            Need::PgServer => pg_bin_dir()
                .is_none()
                .then(|| "initdb is not installed (apt-get install postgresql)".into()),
            Need::Chromium => (!runs("chromium"))
                .then(|| "chromium is not installed (apt-get install chromium)".into()),
        }
    }
}

/// Whether `program --version` runs and succeeds.
fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `redis-server` of the test's own, on a free port.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// Arguments beside the port's, such as TLS's.
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one.
    pub fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        RedisServer::start_with(port, Vec::new())
    }

    /// One that takes TLS connections only, on `port`, with `cert` and `key` (PEM files), and
    /// asks for `password`.
    pub fn start_tls(cert: &str, key: &str, password: &str) -> RedisServer {
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
        let mut server = RedisServer::start_with(0, extra.map(str::to_owned).to_vec());
        server.port = port;
        server
    }

    fn start_with(port: u16, extra: Vec<String>) -> RedisServer {
        let mut server = RedisServer {
            port,
            child: None,
            extra,
        };
        assert!(server.spawn(), "redis-server runs");
        server
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
    /// Initialises and starts one.
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// One that takes connections over TLS only, with `cert` and `key` (PEM), and asks
    /// for `password` (SCRAM) from user `postgres`.
    pub fn start_tls(cert: &str, key: &str, password: &str) -> PgServer {
        PgServer::start_with(Some((cert, key, password)))
    }

    fn start_with(tls: Option<(&str, &str, &str)>) -> PgServer {
        let bin = pg_bin_dir().expect("initdb is installed");
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
        server
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
