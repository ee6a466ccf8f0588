//! What a virtual key may be given, checked against the config before it is stored: by
//! `vkeys create` and by the admin API alike, so both refuse the same things.

use crate::config::{Config, pattern_matches};
use crate::store::LimitOverrides;

use super::{KeyRequest, usd};

/// The permissions a key can carry; `debug` allows `x-switchyard-force-fallback`.
pub const PERMISSIONS: &[&str] = &["debug"];

/// Why a key request was refused, and the field at fault.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    /// The request field at fault, as the admin API's JSON names it.
    pub field: &'static str,
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        field,
        message: message.into(),
    }
}

impl KeyRequest {
    /// Whether the config knows the key's role, models and permissions, and its limits make
    /// sense.
    pub fn validate(&self, config: &Config) -> Result<(), Invalid> {
        if self.user.trim().is_empty() {
            return Err(invalid("user", "must not be empty"));
        }
        if self.user.chars().any(char::is_control) {
            return Err(invalid("user", "must not contain control characters"));
        }
        role(config, &self.role)?;
        permissions(&self.permissions)?;
        if let Some(models) = &self.models {
            self::models(config, models)?;
        }
        limits(&self.limits)
    }
}

/// The role must be `[auth] default_role` or one of `[[roles]]`.
pub fn role(config: &Config, role: &str) -> Result<(), Invalid> {
    if role == config.auth.default_role || config.roles.iter().any(|r| r.name == role) {
        return Ok(());
    }
    let mut known: Vec<&str> = config.roles.iter().map(|r| r.name.as_str()).collect();
    if !known.contains(&config.auth.default_role.as_str()) {
        known.push(&config.auth.default_role);
    }
    Err(invalid(
        "role",
        format!(
            "`{role}` is not defined in [[roles]] (known: {})",
            known.join(", ")
        ),
    ))
}

/// Each permission must be one the gateway knows.
pub fn permissions(permissions: &[String]) -> Result<(), Invalid> {
    match permissions
        .iter()
        .find(|p| !PERMISSIONS.contains(&p.as_str()))
    {
        Some(unknown) => Err(invalid(
            "permissions",
            format!(
                "`{unknown}` is not a permission (known: {})",
                PERMISSIONS.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// Each entry must be a route (or a pattern matching one), or a `provider/model` pattern of
/// a configured provider: a typo would otherwise leave a key that can reach nothing.
pub fn models(config: &Config, models: &[String]) -> Result<(), Invalid> {
    if models.is_empty() {
        return Err(invalid(
            "models",
            "must name at least one route or provider/model; leave it out (or null) for all",
        ));
    }
    for model in models {
        if model.is_empty() {
            return Err(invalid("models", "an entry is empty"));
        }
        // The store keeps the list comma-separated.
        if model.contains(',') || model.chars().any(char::is_whitespace) {
            return Err(invalid(
                "models",
                format!("`{model}` is not a route or provider/model pattern"),
            ));
        }
        let known = match model.split_once('/') {
            Some((provider, _)) => config
                .providers
                .iter()
                .any(|p| pattern_matches(provider, &p.id.0)),
            None => config
                .routes
                .iter()
                .any(|r| pattern_matches(model, r.name.as_str())),
        };
        if !known {
            return Err(invalid(
                "models",
                format!(
                    "`{model}` matches no route, and no provider/model of a configured provider"
                ),
            ));
        }
    }
    Ok(())
}

/// Each limit and budget, where set, must be at least 1 (a key that may do nothing is a
/// revoked key) and fit the store.
pub fn limits(limits: &LimitOverrides) -> Result<(), Invalid> {
    let named = [
        ("requests_per_minute", limits.requests_per_minute),
        ("tokens_per_minute", limits.tokens_per_minute),
        ("max_concurrent", limits.max_concurrent),
    ];
    for (field, value) in named {
        match value {
            Some(0) => {
                return Err(invalid(
                    field,
                    "must be at least 1; to stop a key, revoke it",
                ));
            }
            Some(v) if i64::try_from(v).is_err() => {
                return Err(invalid(field, format!("must be at most {}", i64::MAX)));
            }
            _ => {}
        }
    }
    let budgets = [
        ("budget_per_day", limits.budget_per_day_micros),
        ("budget_per_month", limits.budget_per_month_micros),
    ];
    for (field, micros) in budgets {
        match micros {
            Some(0) => {
                return Err(invalid(
                    field,
                    "must be more than 0 US dollars; to stop a key, revoke it",
                ));
            }
            Some(micros) if micros > usd::MAX_MICROS => {
                return Err(invalid(field, usd::UsdError::TooLarge.to_string()));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            "[[roles]]\nname = \"ae\"\n\
             [[providers]]\nname = \"groq\"\nkind = \"openai\"\nkey_required = false\n\
             [[routes]]\nname = \"smart\"\nsteps = [{ provider = \"groq\", model = \"m\" }]\n",
        )
        .unwrap()
    }

    fn request() -> KeyRequest {
        KeyRequest {
            user: "ana".into(),
            role: "ae".into(),
            permissions: vec![],
            models: None,
            limits: LimitOverrides::default(),
        }
    }

    fn field_of(request: KeyRequest) -> Option<&'static str> {
        request.validate(&config()).err().map(|e| e.field)
    }

    #[test]
    fn known_roles_models_and_permissions_pass() {
        let mut ok = request();
        ok.models = Some(vec![
            "smart".into(),
            "sm*".into(),
            "groq/llama".into(),
            "groq/*".into(),
            "*/m".into(),
        ]);
        ok.permissions = vec!["debug".into()];
        ok.limits.requests_per_minute = Some(1);
        ok.limits.budget_per_day_micros = Some(1);
        ok.limits.budget_per_month_micros = Some(usd::MAX_MICROS);
        assert!(ok.validate(&config()).is_ok());
        // The default role needs no [[roles]] entry.
        assert!(role(&config(), "default").is_ok());
    }

    #[test]
    fn each_refusal_names_its_field() {
        let with = |change: fn(&mut KeyRequest)| {
            let mut request = request();
            change(&mut request);
            field_of(request)
        };
        assert_eq!(with(|r| r.user = " ".into()), Some("user"));
        assert_eq!(with(|r| r.role = "boss".into()), Some("role"));
        assert_eq!(
            with(|r| r.permissions = vec!["root".into()]),
            Some("permissions")
        );
        for bad in ["dumb", "openai/gpt-4o", "", "smart,groq/x", "a b"] {
            let mut request = request();
            request.models = Some(vec![bad.into()]);
            assert_eq!(field_of(request), Some("models"), "{bad:?}");
        }
        assert_eq!(with(|r| r.models = Some(vec![])), Some("models"));
        assert_eq!(
            with(|r| r.limits.max_concurrent = Some(0)),
            Some("max_concurrent")
        );
        assert_eq!(
            with(|r| r.limits.tokens_per_minute = Some(u64::MAX)),
            Some("tokens_per_minute")
        );
        assert_eq!(
            with(|r| r.limits.budget_per_day_micros = Some(0)),
            Some("budget_per_day")
        );
        assert_eq!(
            with(|r| r.limits.budget_per_month_micros = Some(usd::MAX_MICROS + 1)),
            Some("budget_per_month")
        );
    }

    #[test]
    fn an_unknown_role_lists_the_known_ones() {
        let error = role(&config(), "boss").unwrap_err();
        assert_eq!(
            error.to_string(),
            "role: `boss` is not defined in [[roles]] (known: ae, default)"
        );
    }
}
