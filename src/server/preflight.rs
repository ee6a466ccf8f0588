//! The one check of a config file that `check`, `serve` and a reload all make, so that none
//! accepts what another refuses: what the file cannot say of itself (a store it can open, an
//! admin token file it may read).

use crate::config::{Config, FieldError};

use super::{StartError, StartOptions};

/// Everything `serve` needs of a valid file besides the file itself: a store it can open
/// and an admin token file it may read. The one check `check`, `serve` and a reload all
/// make, so none accepts what another refuses; each problem names its field. Returns the
/// options `serve` starts with.
pub fn preflight(config: &Config) -> Result<StartOptions, Vec<FieldError>> {
    let mut errors = Vec::new();
    if let Some(problem) = store_path_problem(config) {
        errors.push(FieldError {
            field: "store.url".into(),
            message: problem,
        });
    }
    let options = StartOptions::for_config(config).map_err(|e| FieldError {
        field: "admin.token_file".into(),
        message: match e {
            StartError::AdminTokenFile(why) => why,
            other => other.to_string(),
        },
    });
    match options {
        Ok(options) if errors.is_empty() => Ok(options),
        Ok(_) => Err(errors),
        Err(e) => {
            errors.push(e);
            Err(errors)
        }
    }
}

/// Why `serve` could not open the SQLite file the config names, when that is already plain:
/// its directory does not exist (SQLite creates the file, never the directory), or the
/// path is a directory itself.
pub fn store_path_problem(config: &Config) -> Option<String> {
    let file = std::path::Path::new(config.store.url.strip_prefix("sqlite://")?);
    if file.is_dir() {
        return Some(format!(
            "{} is a directory: name a file in it, such as {}",
            file.display(),
            file.join("switchyard.db").display()
        ));
    }
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty())?;
    (!dir.is_dir()).then(|| format!("the store's directory {} does not exist", dir.display()))
}
