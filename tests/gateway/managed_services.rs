//! Cluster mode against managed PostgreSQL and Redis: TLS verified against a CA of the
//! test's own, passwords from the environment or a file, and errors that name the host and
//! port but never the password. PostgreSQL and Redis run here with TLS on spare ports, with
//! certificates made for `localhost` only, so `127.0.0.1` is a wrong host name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::logqueue::{QUIET, Spawned};
use super::services::{PgServer, RedisServer};
use super::support::*;

const PG_PASSWORD: &str = "pg-password-never-shown-4711";
const REDIS_PASSWORD: &str = "redis-password-never-shown-0815";

/// A CA, a server certificate it signed for `localhost`, and a CA that signed nothing here,
/// as PEM files in a directory of the test's own.
struct Certificates {
    dir: PathBuf,
    ca: PathBuf,
    wrong_ca: PathBuf,
    cert_pem: String,
    key_pem: String,
}

impl Certificates {
    fn make() -> Certificates {
        let dir = std::env::temp_dir().join(format!("switchyard-tls-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = authority("Switchyard test CA");
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        Certificates {
            ca: write("ca.pem", &ca.pem()),
            wrong_ca: write("wrong-ca.pem", &authority("Some other CA").pem()),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            dir,
        }
    }

    /// A PostgreSQL of the test's own serving this certificate, TLS only, with
    /// [`PG_PASSWORD`].
    fn postgres(&self) -> PgServer {
        PgServer::start_tls(&self.cert_pem, &self.key_pem, PG_PASSWORD)
    }

    /// The server's certificate and key as files, for Redis.
    fn server_files(&self) -> (String, String) {
        let cert = self.dir.join("server.crt");
        let key = self.dir.join("server.key");
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (shown(&cert), shown(&key))
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// `switchyard check --connect` on `config`, with `env`.
fn check_connect(config: &str, env: &[(&str, &str)]) -> Output {
    let path = std::env::temp_dir().join(format!("switchyard-check-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["check", "--connect", "--config"])
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    output
}

/// What the command said, both streams; asserted free of every password.
fn said(output: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains(PG_PASSWORD) && !text.contains(REDIS_PASSWORD),
        "a password was shown:\n{text}"
    );
    text
}

const ENV: &[(&str, &str)] = &[
    // A PostgreSQL store seals provider keys with it.
    (
        "SWITCHYARD_MASTER_KEY",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    ),
    ("SY_TEST_PG_PASSWORD", PG_PASSWORD),
    ("SY_TEST_REDIS_PASSWORD", REDIS_PASSWORD),
];

pub fn postgres_over_tls_is_verified_as_sslmode_says() {
    let certificates = Certificates::make();
    let pg = certificates.postgres();
    let ca = shown(&certificates.ca);
    let password_file = certificates.dir.join("pg-password");
    std::fs::write(&password_file, format!("{PG_PASSWORD}\n")).unwrap();
    let store = |host: &str, query: &str, password: &str| {
        TestGateway::new()
            .with("[store]\n")
            .set(
                "url",
                format!("postgres://postgres@{host}:{}/postgres?{query}", pg.port),
            )
            .with(password)
            .raw_text()
    };
    let from_env = "password_env = \"SY_TEST_PG_PASSWORD\"";
    let from_file = format!("password_file = \"{}\"", shown(&password_file));
    let at_ip = format!("127.0.0.1:{}", pg.port);

    // Accepted: the chain and the name (verify-full, the password from a file or the
    // environment); the chain alone (verify-ca, by address); encryption alone (require).
    for (host, query, password) in [
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            from_file.as_str(),
        ),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            from_env,
        ),
        (
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            from_env,
        ),
        ("127.0.0.1", "sslmode=require".to_owned(), from_env),
    ] {
        let output = check_connect(&store(host, &query, password), ENV);
        let text = said(&output);
        assert!(output.status.success(), "{host} {query}:\n{text}");
    }

    // Refused, each naming where: a host name the certificate does not bear, a CA that did
    // not sign it, no TLS (the server takes none), a wrong password.
    for (host, query, password, why) in [
        (
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            from_env,
            "not valid for name",
        ),
        (
            "localhost",
            format!(
                "sslmode=verify-full&sslrootcert={}",
                shown(&certificates.wrong_ca)
            ),
            from_env,
            "UnknownIssuer",
        ),
        (
            "127.0.0.1",
            "sslmode=disable".to_owned(),
            from_env,
            "no encryption",
        ),
        ("127.0.0.1", "sslmode=require".to_owned(), "", "password"),
    ] {
        let output = check_connect(&store(host, &query, password), ENV);
        let text = said(&output);
        assert!(
            !output.status.success(),
            "{host} {query} is refused:\n{text}"
        );
        let at = if host == "localhost" {
            format!("localhost:{}", pg.port)
        } else {
            at_ip.clone()
        };
        assert!(text.contains(&at), "{host} {query}: names {at}:\n{text}");
        assert!(text.contains(why), "{host} {query}: says {why}:\n{text}");
    }
}

pub async fn a_gateway_serves_with_its_store_over_verified_tls() {
    let certificates = Certificates::make();
    let pg = certificates.postgres();
    let fake = scripted("up", []).await;
    let url = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg.port,
        shown(&certificates.ca)
    );
    let config = TestGateway::new()
        .with("[auth]\nrequired = false\n[store]\n")
        .set("url", url)
        .with("password_env = \"SY_TEST_PG_PASSWORD\"\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .raw_text();
    let mut started = Spawned::start_all(&[&config], QUIET, ENV);
    let gateway = started.remove(0);
    gateway.ready().await;
    let answer = client()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .json(&serde_json::json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let logs = gateway.stderr.lock().unwrap().clone();
    assert!(!logs.contains(PG_PASSWORD), "{logs}");
    // The listener for store changes connects the same way as the pool.
    assert!(!logs.contains("cannot listen for store changes"), "{logs}");
    gateway.terminate();
}

pub async fn redis_over_tls_is_verified_and_counts_limits() {
    let certificates = Certificates::make();
    let (cert, key) = certificates.server_files();
    let redis = RedisServer::start_tls(&cert, &key, REDIS_PASSWORD);
    let limits = |host: &str, ca: &Path, password: &str| {
        TestGateway::new()
            .with("[store]\nurl = \"sqlite::memory:\"\n[limits]\nbackend = \"redis\"\n")
            .set("redis_url", format!("rediss://{host}:{}", redis.port))
            .set("redis_ca_file", shown(ca))
            .set("key_prefix", format!("tls-{}", uuid::Uuid::now_v7()))
            .with(password)
    };
    let from_env = "redis_password_env = \"SY_TEST_REDIS_PASSWORD\"";
    let good = limits("localhost", &certificates.ca, from_env);
    let output = check_connect(&good.raw_text(), ENV);
    assert!(output.status.success(), "{}", said(&output));

    for (host, ca, password, why) in [
        (
            "127.0.0.1",
            &certificates.ca,
            from_env,
            "not valid for name",
        ),
        (
            "localhost",
            &certificates.wrong_ca,
            from_env,
            "UnknownIssuer",
        ),
        ("localhost", &certificates.ca, "", "NOAUTH"),
    ] {
        let output = check_connect(&limits(host, ca, password).raw_text(), ENV);
        let text = said(&output);
        assert!(!output.status.success(), "{host} is refused:\n{text}");
        let at = format!("{host}:{}", redis.port);
        assert!(text.contains(&at), "{host}: names {at}:\n{text}");
        assert!(text.contains(why), "{host}: says {why}:\n{text}");
    }

    // Served: a limit of 2 a minute, counted in the Redis over TLS.
    let fake = scripted("up", []).await;
    let config = good
        .with("[auth]\nrequired = false\n")
        .with("[[roles]]\nname = \"default\"\nrequests_per_minute = 2\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .raw_text();
    let mut started = Spawned::start_all(&[&config], QUIET, ENV);
    let gateway = started.remove(0);
    gateway.ready().await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let answer = client()
            .post(format!("{}/v1/chat/completions", gateway.url))
            .json(
                &serde_json::json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .await
            .unwrap();
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
    let logs = gateway.stderr.lock().unwrap().clone();
    assert!(!logs.contains("rate-limit backend unavailable"), "{logs}");
    assert!(!logs.contains(REDIS_PASSWORD), "{logs}");
    gateway.terminate();
}
