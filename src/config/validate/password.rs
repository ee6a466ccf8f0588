//! Passwords kept out of the config file: named by an environment variable or a file (a
//! systemd credential, a Kubernetes secret), read once at start.

use super::Errors;
use crate::secret::Secret;

/// The password `env` or `file` names, if either does; both at once is an error. `field`
/// is the pair's prefix (`store.password`, `limits.redis_password`).
pub fn password(
    errors: &mut Errors,
    field: &str,
    env: Option<String>,
    file: Option<String>,
) -> Option<Secret> {
    match (env, file) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            errors.add(
                format!("{field}_env"),
                format!("set {field}_env or {field}_file, not both"),
            );
            None
        }
        (Some(name), None) => match std::env::var(&name) {
            Ok(value) if !value.is_empty() => Some(Secret::new(value)),
            // The variable's value is never repeated, only its name.
            _ => {
                errors.add(
                    format!("{field}_env"),
                    format!("the environment variable `{name}` is not set"),
                );
                None
            }
        },
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            // Files written by `echo` end in a newline that is not part of the password.
            Ok(value) if !value.trim_end_matches(['\r', '\n']).is_empty() => {
                Some(Secret::new(value.trim_end_matches(['\r', '\n'])))
            }
            Ok(_) => {
                errors.add(format!("{field}_file"), format!("`{path}` is empty"));
                None
            }
            Err(e) => {
                errors.add(
                    format!("{field}_file"),
                    format!("cannot read `{path}`: {e}"),
                );
                None
            }
        },
    }
}
