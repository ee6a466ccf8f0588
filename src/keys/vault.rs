//! Provider secrets at rest: AES-256-GCM under the master key.
//!
//! The master key comes from `SWITCHYARD_MASTER_KEY` (32 bytes, base64). An embedded store
//! without it gets a key file beside the database, created once with mode 0600. Each
//! secret is sealed with a fresh random nonce and bound to its provider and key id, so a
//! sealed secret moved to another row does not open.

use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::Secret;

/// The environment variable that holds the master key.
pub const MASTER_KEY_ENV: &str = "SWITCHYARD_MASTER_KEY";

// The store keeps sealed bytes and knows nothing of sealing, so it owns their type.
pub use crate::store::Sealed;

/// Why secrets cannot be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("{MASTER_KEY_ENV} must be 32 bytes in base64 (try: openssl rand -base64 32)")]
    BadMasterKey,
    #[error("cannot read or create the master key file {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the master key does not open this store's secrets: it is not the key they were sealed with"
    )]
    WrongMasterKey,
    #[error("a PostgreSQL store needs {MASTER_KEY_ENV}")]
    MasterKeyRequired,
    #[error("cannot draw random bytes: {0}")]
    Random(#[from] getrandom::Error),
}

/// Where the master key came from, said once at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    Environment,
    /// A key file that already existed.
    File(PathBuf),
    /// A key file made just now.
    Generated(PathBuf),
    /// A throwaway key for an in-memory store.
    Ephemeral,
}

/// Seals and opens provider secrets. Its `Debug` never shows the key.
pub struct Vault {
    cipher: Aes256Gcm,
    pub source: KeySource,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// A vault from 32 raw key bytes.
    pub fn from_bytes(key: &[u8; 32], source: KeySource) -> Vault {
        Vault {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)),
            source,
        }
    }

    /// The vault for a store url: the environment's key, else (SQLite) a key file beside
    /// the database, else (in memory) a throwaway key.
    pub fn for_store(store_url: &str, env_key: Option<&str>) -> Result<Vault, VaultError> {
        if let Some(encoded) = env_key.filter(|k| !k.is_empty()) {
            let bytes = STANDARD
                .decode(encoded.trim())
                .map_err(|_| VaultError::BadMasterKey)?;
            let key: [u8; 32] = bytes.try_into().map_err(|_| VaultError::BadMasterKey)?;
            return Ok(Vault::from_bytes(&key, KeySource::Environment));
        }
        match store_url.strip_prefix("sqlite://") {
            Some(path) => Vault::from_key_file(&PathBuf::from(format!("{path}.key"))),
            None if store_url == "sqlite::memory:" => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key)?;
                Ok(Vault::from_bytes(&key, KeySource::Ephemeral))
            }
            None => Err(VaultError::MasterKeyRequired),
        }
    }

    fn from_key_file(path: &Path) -> Result<Vault, VaultError> {
        let file_error = |source| VaultError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = STANDARD
                    .decode(text.trim())
                    .map_err(|_| VaultError::BadMasterKey)?;
                let key: [u8; 32] = bytes.try_into().map_err(|_| VaultError::BadMasterKey)?;
                Ok(Vault::from_bytes(&key, KeySource::File(path.to_owned())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key)?;
                write_private(path, &STANDARD.encode(key)).map_err(file_error)?;
                Ok(Vault::from_bytes(
                    &key,
                    KeySource::Generated(path.to_owned()),
                ))
            }
            Err(e) => Err(file_error(e)),
        }
    }

    /// Seals `secret` for `provider`'s key `key_id`.
    pub fn seal(&self, provider: &str, key_id: &str, secret: &str) -> Result<Sealed, VaultError> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce)?;
        let aad = binding(provider, key_id);
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: &aad,
                },
            )
            // Encryption fails only for absurd lengths (over 64 GiB).
            .map_err(|_| VaultError::WrongMasterKey)?;
        Ok(Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Opens a sealed secret; fails when the key or the binding does not match.
    pub fn open(
        &self,
        provider: &str,
        key_id: &str,
        sealed: &Sealed,
    ) -> Result<Secret, VaultError> {
        if sealed.nonce.len() != 12 {
            return Err(VaultError::WrongMasterKey);
        }
        let aad = binding(provider, key_id);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::WrongMasterKey)?;
        let text = String::from_utf8(plain).map_err(|_| VaultError::WrongMasterKey)?;
        Ok(Secret::new(text))
    }

    /// A known value sealed under this key, kept in the store to recognise the key later.
    pub fn check_value(&self) -> Result<Sealed, VaultError> {
        self.seal("switchyard", "master-key-check", CHECK)
    }

    /// Whether `sealed` (a check value from the store) was sealed under this key.
    pub fn verify(&self, sealed: &Sealed) -> Result<(), VaultError> {
        match self.open("switchyard", "master-key-check", sealed) {
            Ok(secret) if secret.expose() == CHECK => Ok(()),
            _ => Err(VaultError::WrongMasterKey),
        }
    }
}

const CHECK: &str = "switchyard master key check";

fn binding(provider: &str, key_id: &str) -> Vec<u8> {
    format!("{provider}\u{0}{key_id}").into_bytes()
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vault(byte: u8) -> Vault {
        Vault::from_bytes(&[byte; 32], KeySource::Ephemeral)
    }

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_binding() {
        let sealed = vault(1).seal("openai", "main", "sk-live-1234").unwrap();
        assert!(!sealed.ciphertext.windows(4).any(|w| w == b"1234"));
        assert_eq!(
            vault(1).open("openai", "main", &sealed).unwrap().expose(),
            "sk-live-1234"
        );
        assert!(
            vault(2).open("openai", "main", &sealed).is_err(),
            "another master key"
        );
        assert!(
            vault(1).open("groq", "main", &sealed).is_err(),
            "another row"
        );
    }

    #[test]
    fn the_check_value_recognises_the_master_key() {
        let check = vault(1).check_value().unwrap();
        assert!(vault(1).verify(&check).is_ok());
        assert!(matches!(
            vault(2).verify(&check),
            Err(VaultError::WrongMasterKey)
        ));
    }

    #[test]
    fn an_environment_key_must_be_32_bytes_of_base64() {
        assert!(matches!(
            Vault::for_store("sqlite::memory:", Some("short")),
            Err(VaultError::BadMasterKey)
        ));
        let key = STANDARD.encode([7u8; 32]);
        assert_eq!(
            Vault::for_store("sqlite::memory:", Some(&key))
                .unwrap()
                .source,
            KeySource::Environment
        );
    }

    #[test]
    fn a_key_file_is_made_once_with_mode_0600() {
        let path =
            std::env::temp_dir().join(format!("switchyard-vault-{}.db", uuid::Uuid::now_v7()));
        let url = format!("sqlite://{}", path.display());
        let first = Vault::for_store(&url, None).unwrap();
        assert!(matches!(first.source, KeySource::Generated(_)));
        let key_path = PathBuf::from(format!("{}.key", path.display()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sealed = first.seal("p", "k", "s").unwrap();
        let second = Vault::for_store(&url, None).unwrap();
        assert!(matches!(second.source, KeySource::File(_)));
        assert_eq!(second.open("p", "k", &sealed).unwrap().expose(), "s");
        let _ = std::fs::remove_file(key_path);
    }
}
