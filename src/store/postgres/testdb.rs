//! Throwaway databases for tests and benches: each gets a fresh one with a unique name on
//! the server `SWITCHYARD_TEST_POSTGRES` names (default `postgres://postgres@127.0.0.1:5432`),
//! dropped again when the handle goes.
//!
//! Whether a server answers is the caller's question to ask first ([`TestDb::usable`]): the
//! `services` test binary asks it before any test starts and lists the tests it skips, so a
//! database that cannot be made here is a failure, never a quiet skip.

use tokio_postgres::NoTls;

/// The server tests use, without a database.
pub fn server_url() -> String {
    std::env::var("SWITCHYARD_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A database of a test's own.
pub struct TestDb {
    server: String,
    pub name: String,
    dropped: bool,
}

impl TestDb {
    /// Whether the test server answers and lets a database be made; why not, if it does not.
    pub async fn usable() -> Result<(), String> {
        let db = TestDb::try_create_on(&server_url()).await?;
        db.drop_now().await;
        Ok(())
    }

    /// Creates a fresh database on the test server.
    ///
    /// # Panics
    /// When the server does not answer: ask [`TestDb::usable`] first.
    pub async fn create() -> TestDb {
        TestDb::create_on(&server_url()).await
    }

    /// Creates a fresh database on the server at `server` (a URL without a database).
    ///
    /// # Panics
    /// When that server does not answer.
    #[allow(
        clippy::panic,
        reason = "a test fixture: a database not made fails the test"
    )]
    pub async fn create_on(server: &str) -> TestDb {
        match TestDb::try_create_on(server).await {
            Ok(db) => db,
            Err(why) => panic!("{why}"),
        }
    }

    async fn try_create_on(server: &str) -> Result<TestDb, String> {
        let name = format!("switchyard_test_{}", uuid::Uuid::now_v7().simple());
        let created = async {
            let client = connect(&format!("{server}/postgres")).await?;
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
        }
        .await;
        match created {
            Ok(()) => Ok(TestDb {
                server: server.to_owned(),
                name,
                dropped: false,
            }),
            Err(error) => {
                // The driver's message names the step; its cause says what went wrong.
                let cause = std::error::Error::source(&error)
                    .map(|cause| format!(" ({cause})"))
                    .unwrap_or_default();
                Err(format!(
                    "PostgreSQL is not usable at {server}: {error}{cause}"
                ))
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
