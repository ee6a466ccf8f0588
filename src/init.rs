//! `switchyard init`: a complete, commented config to start from, and an admin token file.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;

/// The example config: every section a deployment needs, each explained.
pub const EXAMPLE_CONFIG: &str = include_str!("../deploy/switchyard.toml");

/// The config's file name in the directory `init` writes to.
pub const CONFIG_FILE: &str = "switchyard.toml";
/// The admin token's file name, as the example config names it.
pub const TOKEN_FILE: &str = "admin-token";

/// What `init` wrote.
#[derive(Debug)]
pub struct Written {
    pub config: PathBuf,
    pub token: PathBuf,
    /// False when a token file was already there and was kept.
    pub token_created: bool,
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{0} already exists; init never overwrites a config")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the system's random generator failed: {0}")]
    Random(String),
}

/// Writes the example config and a random admin token (mode 0600) into `dir`.
pub fn write(dir: &Path) -> Result<Written, InitError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let config = dir.join(CONFIG_FILE);
    if config.exists() {
        return Err(InitError::Exists(config));
    }
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InitError::Write { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(failed(&dir))?;
    let token = dir.join(TOKEN_FILE);
    let token_created = !token.exists();
    if token_created {
        write_private(&token, &new_token()?).map_err(failed(&token))?;
    }
    std::fs::write(&config, EXAMPLE_CONFIG).map_err(failed(&config))?;
    Ok(Written {
        config,
        token,
        token_created,
    })
}

/// 32 random bytes, base64url: as strong as the virtual keys.
fn new_token() -> Result<String, InitError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| InitError::Random(e.to_string()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Creates `path` readable by its owner only, before a byte of the secret is written.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_example_config_is_valid() {
        let config = Config::parse(EXAMPLE_CONFIG).expect("the example config validates");
        assert!(config.auth.required);
        assert_eq!(config.routes[0].steps.len(), 2);
        assert!(config.routes[0].degraded.is_some());
        assert!(config.admin.token_file.is_some());
    }

    #[test]
    fn init_writes_a_private_token_and_never_overwrites() {
        let dir = std::env::temp_dir().join(format!("switchyard-init-{}", uuid::Uuid::now_v7()));
        let written = write(&dir).expect("init writes");
        assert!(written.token_created);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&written.token)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(matches!(write(&dir), Err(InitError::Exists(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
