//! Throwaway databases for tests and benches: each gets a fresh one with a unique name on
//! the server `SWITCHYARD_TEST_POSTGRES` names (default `postgres://postgres@127.0.0.1:5432`),
//! dropped again when the handle goes.
//!
//! Where no PostgreSQL answers, [`TestDb::create`] says which test it skips; with
//! `SWITCHYARD_REQUIRE_SERVICES=1` (as `scripts/test` sets) it fails the test instead.

use std::io::Write;

use tokio_postgres::NoTls;

/// The server tests use, without a database.
pub fn server_url() -> String {
    std::env::var("SWITCHYARD_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn required() -> bool {
    std::env::var("SWITCHYARD_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// A database of a test's own.
pub struct TestDb {
    server: String,
    pub name: String,
    dropped: bool,
}

impl TestDb {
    /// Creates a fresh database on the test server, or returns `None` (having said which
    /// test it skips and why) when no server answers.
    pub async fn create(test: &str) -> Option<TestDb> {
        TestDb::create_on(&server_url(), test).await
    }

    /// Creates a fresh database on the server at `server` (a URL without a database).
    pub async fn create_on(server: &str, test: &str) -> Option<TestDb> {
        let name = format!("switchyard_test_{}", uuid::Uuid::now_v7().simple());
        let created = async {
            let client = connect(&format!("{server}/postgres")).await?;
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
        }
        .await;
        match created {
            Ok(()) => Some(TestDb {
                server: server.to_owned(),
                name,
                dropped: false,
            }),
            Err(error) => {
                let why = format!("PostgreSQL is not usable at {server}: {error}");
                assert!(
                    !required(),
                    "{test}: {why}, and SWITCHYARD_REQUIRE_SERVICES=1 forbids skipping"
                );
                // Straight to stderr, past the test harness's capture: a plain `cargo test`
                // shows every skip.
                let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
                None
            }
        }
    }

    /// The `[store] url` of this database.
    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    /// Drops the database now, closing any connection still open to it.
    pub async fn drop_now(mut self) {
        self.dropped = true;
        drop_database(&self.server, &self.name).await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop may run inside a runtime, where blocking on another is not allowed: a thread
        // of its own has none.
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(drop_database(&server, &name));
            }
        });
        let _ = dropping.join();
    }
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config: tokio_postgres::Config = url.parse()?;
    config.connect_timeout(std::time::Duration::from_secs(3));
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn drop_database(server: &str, name: &str) {
    let dropped = async {
        let client = connect(&format!("{server}/postgres")).await?;
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
    }
    .await;
    if let Err(error) = dropped {
        eprintln!("cannot drop test database {name}: {error}");
    }
}
