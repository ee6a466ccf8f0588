//! What a gateway needs to start besides its config, and why a start fails.

use crate::config::Config;
use crate::keys::Secret;
use crate::keys::provider_keys::KeyError;
use crate::keys::vault::MASTER_KEY_ENV;
use crate::router::upstream::ClientError;
use crate::store::StoreError;
use std::path::PathBuf;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] ClientError),
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    #[error("cannot start the serving threads: {0}")]
    Threads(std::io::Error),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("[limits] redis_url: {0}")]
    Redis(String),
    #[error("provider keys: {0}")]
    Keys(#[from] KeyError),
    #[error("[admin] token_file {0}")]
    AdminTokenFile(String),
    /// Never the URL, which may carry a password.
    #[error("[cluster] redis_url: {0}")]
    ClusterRedis(String),
    /// Never the URL, which may carry a password.
    #[error("[cache] redis_url: {0}")]
    CacheRedis(String),
}

/// What a gateway takes besides its config: things that come from the environment.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// The admin API's bearer token (`SWITCHYARD_ADMIN_TOKEN`); `None` turns it off.
    pub admin_token: Option<Secret>,
    /// The master key for provider secrets (`SWITCHYARD_MASTER_KEY`, base64).
    pub master_key: Option<Secret>,
    /// The file the config came from, which `SIGHUP` and `POST /admin/reload` read again;
    /// `None` (a config built in memory) answers a reload with 409.
    pub config_path: Option<PathBuf>,
}

impl StartOptions {
    /// The environment's options, with the admin token from `[admin] token_file` when the
    /// environment gives none. A token file others can read is refused, as ssh refuses keys.
    pub fn for_config(config: &Config) -> Result<StartOptions, StartError> {
        let mut options = StartOptions::from_env();
        if options.admin_token.is_none()
            && let Some(path) = &config.admin.token_file
        {
            options.admin_token = Some(read_token_file(path)?);
        }
        Ok(options)
    }

    /// Reads the options from the process environment, as `switchyard serve` does.
    pub fn from_env() -> StartOptions {
        StartOptions {
            admin_token: std::env::var("SWITCHYARD_ADMIN_TOKEN")
                .ok()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            master_key: std::env::var(MASTER_KEY_ENV)
                .ok()
                .filter(|k| !k.is_empty())
                .map(Secret::new),
            config_path: None,
        }
    }
}

/// Whether a token file's mode keeps it private: its owner's alone, or, owned by root, also
/// its group's to read (as PostgreSQL allows for its key files), so a service user reads a
/// token it cannot change (deploy/switchyard.service). Never anyone else's, never writable
/// by the group.
fn private_enough(mode: u32, owner: u32) -> bool {
    let allowed = if owner == 0 { 0o740 } else { 0o700 };
    mode & !allowed == 0
}

fn read_token_file(path: &std::path::Path) -> Result<Secret, StartError> {
    let shown = path.display();
    let fail = |why: String| StartError::AdminTokenFile(format!("{shown}: {why}"));
    let metadata = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = metadata.permissions().mode() & 0o777;
        if !private_enough(mode, metadata.uid()) {
            return Err(fail(format!(
                "is mode {mode:04o}; make it readable by its owner only (chmod 600), or owned \
                 by root and readable by the service's group (chown root:GROUP, chmod 640)"
            )));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(fail("is empty".into()));
    }
    Ok(Secret::new(token.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::private_enough;

    #[test]
    fn a_token_file_is_its_owners_or_roots_and_its_groups_to_read() {
        assert!(private_enough(0o600, 1000));
        assert!(private_enough(0o400, 1000));
        assert!(
            !private_enough(0o640, 1000),
            "a user's file, readable by its group"
        );
        assert!(
            private_enough(0o640, 0),
            "root's, readable by the service's group"
        );
        assert!(!private_enough(0o660, 0), "writable by the group");
        assert!(!private_enough(0o644, 0), "readable by anyone");
        assert!(!private_enough(0o604, 1000));
    }
}
