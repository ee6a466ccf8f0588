//! A secret value: a provider's key, a database's password. It never prints.

use std::fmt;
use std::sync::Arc;

/// A secret. It never prints: `Debug` shows `***`, and there is no `Display`.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<Arc<str>>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it on.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
