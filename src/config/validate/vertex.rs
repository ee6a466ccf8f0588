//! A `kind = "vertex"` provider's own settings: its project and location, and where its
//! Google credentials come from. A service account's key is read at load, so a missing or
//! unreadable one is a load error by field, not a failure at the first request.

use std::sync::Arc;

use super::Errors;
use crate::config::raw::RawProvider;
use crate::config::{GoogleCredentials, VertexSettings};
use crate::secret::Secret;

/// The settings of provider `i`, a Vertex one; `None` (with errors) when they are unusable.
pub(super) fn settings(
    errors: &mut Errors,
    i: usize,
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Arc<VertexSettings>> {
    let field = |name: &str| format!("providers[{i}].{name}");
    let mut required = |name: &str, value: &Option<String>| match value.as_deref().map(str::trim) {
        Some(value) if !value.is_empty() => Some(value.to_owned()),
        _ => {
            errors.add(
                field(name),
                format!("is required for kind = \"vertex\" ({})", example(name)),
            );
            None
        }
    };
    let project = required("project", &p.project);
    let location = required("location", &p.location);
    for (name, value) in [("project", &project), ("location", &location)] {
        let bad = value
            .as_deref()
            .is_some_and(|v| !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        if bad {
            errors.add(field(name), "may hold only letters, digits and `-`");
            return None;
        }
    }
    let credentials = match (&p.credentials_file, &p.credentials_env) {
        (Some(_), Some(_)) => {
            errors.add(
                field("credentials_file"),
                "set credentials_file or credentials_env, not both",
            );
            return None;
        }
        (Some(path), None) => match std::fs::read_to_string(path) {
            Ok(json) => GoogleCredentials::ServiceAccount(Secret::new(json)),
            Err(e) => {
                errors.add(
                    field("credentials_file"),
                    format!("cannot read `{path}`: {e}"),
                );
                return None;
            }
        },
        (None, Some(variable)) => match env(variable).filter(|v| !v.trim().is_empty()) {
            Some(json) => GoogleCredentials::ServiceAccount(Secret::new(json)),
            None => {
                errors.add(
                    field("credentials_env"),
                    format!("the environment variable `{variable}` is not set"),
                );
                return None;
            }
        },
        (None, None) => GoogleCredentials::Default,
    };
    if let GoogleCredentials::ServiceAccount(json) = &credentials
        && !is_service_account(json.expose())
    {
        // Never the JSON itself: it holds a private key.
        let name = match &p.credentials_file {
            Some(_) => "credentials_file",
            None => "credentials_env",
        };
        errors.add(
            field(name),
            "is not a service account key (JSON with type = \"service_account\", client_email, private_key and token_uri)",
        );
        return None;
    }
    Some(Arc::new(VertexSettings {
        project: project?,
        location: location?,
        credentials,
    }))
}

/// Vertex's endpoint for a location: `{location}-aiplatform.googleapis.com`, or the global
/// one.
pub(super) fn default_base_url(location: &str) -> String {
    match location {
        "global" => "https://aiplatform.googleapis.com".to_owned(),
        region => format!("https://{region}-aiplatform.googleapis.com"),
    }
}

fn example(name: &str) -> &'static str {
    match name {
        "project" => "the Google Cloud project id, such as `my-project`",
        _ => "a region such as `us-east5`, or `global`",
    }
}

fn is_service_account(json: &str) -> bool {
    let Ok(key) = serde_json::from_str::<serde_json::Value>(json) else {
        return false;
    };
    key["type"] == "service_account"
        && ["client_email", "private_key", "token_uri"]
            .iter()
            .all(|field| key[field].is_string())
        && key["private_key"].as_str().is_some_and(is_rsa_key)
}

/// Whether `pem` is an RSA private key in PKCS#8, as Google issues them and as the JWT is
/// signed with: a broken key fails the load, not every request.
fn is_rsa_key(pem: &str) -> bool {
    use rustls_pki_types::PrivatePkcs8KeyDer;
    use rustls_pki_types::pem::PemObject;
    PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
        .is_ok_and(|der| ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawProvider {
        toml::from_str(&format!("name = \"v\"\nkind = \"vertex\"\n{text}")).unwrap()
    }

    fn check(text: &str, vars: &[(&str, &str)]) -> Result<Arc<VertexSettings>, Vec<String>> {
        let mut errors = Errors::default();
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let settings = settings(&mut errors, 0, &raw(text), &env);
        match (settings, errors.found.is_empty()) {
            (Some(settings), true) => Ok(settings),
            _ => Err(errors.found.iter().map(|e| e.to_string()).collect()),
        }
    }

    /// The test service account's key (tests/fixtures), a real RSA key made for the tests.
    const KEY: &str = include_str!("../../../tests/fixtures/vertex-service-account.json");

    #[test]
    fn project_and_location_are_required_and_credentials_default_to_adc() {
        let settings = check("project = \"p-1\"\nlocation = \"us-east5\"", &[]).unwrap();
        assert_eq!(
            (&*settings.project, &*settings.location),
            ("p-1", "us-east5")
        );
        assert!(matches!(settings.credentials, GoogleCredentials::Default));
        let errors = check("location = \"x/y\"", &[]).unwrap_err();
        assert_eq!(
            errors,
            [
                "providers[0].project: is required for kind = \"vertex\" (the Google Cloud project id, such as `my-project`)",
                "providers[0].location: may hold only letters, digits and `-`"
            ]
        );
        assert_eq!(
            default_base_url("global"),
            "https://aiplatform.googleapis.com"
        );
        assert_eq!(
            default_base_url("europe-west1"),
            "https://europe-west1-aiplatform.googleapis.com"
        );
    }

    #[test]
    fn a_service_account_key_comes_from_the_environment_and_never_shows() {
        let text = "project = \"p\"\nlocation = \"global\"\ncredentials_env = \"SA_JSON\"";
        let settings = check(text, &[("SA_JSON", KEY)]).unwrap();
        assert!(matches!(
            &settings.credentials,
            GoogleCredentials::ServiceAccount(json) if json.expose() == KEY
        ));
        assert!(!format!("{settings:?}").contains("PRIVATE KEY"));
        let errors = check(text, &[("SA_JSON", "{\"private_key\": \"secret\"}")]).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(!errors[0].contains("secret"), "{errors:?}");
        // A key whose PEM is not an RSA key is refused at load, never shown.
        let mut broken: serde_json::Value = serde_json::from_str(KEY).unwrap();
        broken["private_key"] =
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n".into();
        let errors = check(text, &[("SA_JSON", &broken.to_string())]).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].contains("is not a service account key"),
            "{errors:?}"
        );
        assert!(!errors[0].contains("c2VjcmV0"), "{errors:?}");
        let unset = check(text, &[]).unwrap_err();
        assert_eq!(
            unset,
            ["providers[0].credentials_env: the environment variable `SA_JSON` is not set"]
        );
    }
}
