//! A `kind = "bedrock"` provider's own settings: its region, and where its AWS credentials
//! come from. Keys named by the provider are read at load, so a missing one is a load error
//! by field, not a failure at the first request.

use std::sync::Arc;

use super::Errors;
use crate::config::raw::RawProvider;
use crate::config::{AwsCredentialSource, BedrockSettings};
use crate::secret::Secret;

/// The settings of provider `i`, a Bedrock one; `None` (with errors) when they are unusable.
pub(super) fn settings(
    errors: &mut Errors,
    i: usize,
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Arc<BedrockSettings>> {
    let field = |name: &str| format!("providers[{i}].{name}");
    let region = match p.region.as_deref().map(str::trim) {
        Some(region) if is_region(region) => region.to_owned(),
        Some(_) => {
            errors.add(
                field("region"),
                "must be an AWS region such as `us-east-1`: lowercase letters, digits and `-`",
            );
            return None;
        }
        None => {
            errors.add(
                field("region"),
                "is required for kind = \"bedrock\" (an AWS region such as `us-east-1`)",
            );
            return None;
        }
    };
    let credentials = credentials(errors, i, p, env)?;
    Some(Arc::new(BedrockSettings {
        region,
        credentials,
    }))
}

fn credentials(
    errors: &mut Errors,
    i: usize,
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<AwsCredentialSource> {
    let field = |name: &str| format!("providers[{i}].{name}");
    let named = [
        ("access_key_id_env", &p.access_key_id_env),
        ("secret_access_key_env", &p.secret_access_key_env),
    ];
    match named {
        [(_, None), (_, None)] => {
            if p.session_token_env.is_some() {
                errors.add(
                    field("session_token_env"),
                    "needs access_key_id_env and secret_access_key_env",
                );
                return None;
            }
            let profile = p.profile.clone();
            return Some(match &p.credentials_file {
                Some(path) if !std::path::Path::new(path).is_file() => {
                    errors.add(field("credentials_file"), format!("`{path}` is not a file"));
                    return None;
                }
                Some(path) => AwsCredentialSource::File {
                    path: path.into(),
                    profile,
                },
                None => AwsCredentialSource::Chain { profile },
            });
        }
        [(_, Some(_)), (_, Some(_))] => {}
        [(set, Some(_)), (missing, None)] | [(missing, None), (set, Some(_))] => {
            errors.add(field(missing), format!("is required with {set}"));
            return None;
        }
    }
    for (name, set) in [
        ("profile", p.profile.is_some()),
        ("credentials_file", p.credentials_file.is_some()),
    ] {
        if set {
            errors.add(
                field(name),
                "names where AWS credentials come from: set it or access_key_id_env, not both",
            );
            return None;
        }
    }
    // Each variable must be set and not empty; the message names the variable, never a value.
    let mut read = |name: &str, variable: &Option<String>| -> Option<Option<Secret>> {
        let Some(variable) = variable else {
            return Some(None);
        };
        match env(variable).filter(|v| !v.trim().is_empty()) {
            Some(value) => Some(Some(Secret::new(value.trim()))),
            None => {
                errors.add(
                    field(name),
                    format!("the environment variable `{variable}` is not set"),
                );
                None
            }
        }
    };
    let access_key_id = read("access_key_id_env", &p.access_key_id_env);
    let secret_access_key = read("secret_access_key_env", &p.secret_access_key_env);
    let session_token = read("session_token_env", &p.session_token_env)?;
    Some(AwsCredentialSource::Keys {
        access_key_id: access_key_id??,
        secret_access_key: secret_access_key??,
        session_token,
    })
}

/// Bedrock's runtime endpoint for a region.
pub(super) fn default_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`: letters, digits and dashes, as a host label.
fn is_region(region: &str) -> bool {
    !region.is_empty()
        && !region.starts_with('-')
        && !region.ends_with('-')
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, vars: &[(&str, &str)]) -> Result<Arc<BedrockSettings>, Vec<String>> {
        let raw: RawProvider =
            toml::from_str(&format!("name = \"b\"\nkind = \"bedrock\"\n{text}")).unwrap();
        let mut errors = Errors::default();
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let settings = settings(&mut errors, 0, &raw, &env);
        match (settings, errors.found.is_empty()) {
            (Some(settings), true) => Ok(settings),
            _ => Err(errors.found.iter().map(|e| e.to_string()).collect()),
        }
    }

    #[test]
    fn region_is_required_and_credentials_default_to_the_chain() {
        let settings = check("region = \"us-east-1\"\nprofile = \"prod\"", &[]).unwrap();
        assert_eq!(settings.region, "us-east-1");
        assert!(matches!(
            &settings.credentials,
            AwsCredentialSource::Chain { profile: Some(p) } if p == "prod"
        ));
        assert_eq!(
            check("", &[]).unwrap_err(),
            [
                "providers[0].region: is required for kind = \"bedrock\" (an AWS region such as `us-east-1`)"
            ]
        );
        assert_eq!(
            check("region = \"us-east-1.evil.com/\"", &[])
                .unwrap_err()
                .len(),
            1
        );
        assert_eq!(
            default_base_url("eu-west-3"),
            "https://bedrock-runtime.eu-west-3.amazonaws.com"
        );
    }

    #[test]
    fn named_keys_come_from_the_environment_and_never_show() {
        let text = "region = \"us-west-2\"\naccess_key_id_env = \"K\"\nsecret_access_key_env = \"S\"\nsession_token_env = \"T\"";
        let vars = [("K", "AKIDEXAMPLE"), ("S", "wJalrXUtnFEMI"), ("T", "tok")];
        let settings = check(text, &vars).unwrap();
        let AwsCredentialSource::Keys {
            access_key_id,
            secret_access_key,
            session_token,
        } = &settings.credentials
        else {
            panic!("keys expected");
        };
        assert_eq!(access_key_id.expose(), "AKIDEXAMPLE");
        assert_eq!(secret_access_key.expose(), "wJalrXUtnFEMI");
        assert_eq!(session_token.as_ref().map(Secret::expose), Some("tok"));
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("wJalr") && !shown.contains("AKID"),
            "{shown}"
        );
        let unset = check(text, &vars[..2]).unwrap_err();
        assert_eq!(
            unset,
            ["providers[0].session_token_env: the environment variable `T` is not set"]
        );
        let half = check("region = \"us-west-2\"\naccess_key_id_env = \"K\"", &vars).unwrap_err();
        assert_eq!(
            half,
            ["providers[0].secret_access_key_env: is required with access_key_id_env"]
        );
    }
}
