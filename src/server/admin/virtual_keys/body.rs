//! The bodies of the virtual-key admin API: parsed strictly (unknown fields are errors),
//! then checked against the config and turned into what the store keeps.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::auth::{Invalid, KeyRequest, usd, validate};
use crate::config::{Config, parse_duration};
use crate::keys::provider_keys::MAX_EXPIRES_IN_DAYS;
use crate::server::ApiError;
use crate::store::{LimitOverrides, VirtualKey};

/// `POST /admin/virtual-keys`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    user: String,
    role: String,
    #[serde(default)]
    permissions: Vec<String>,
    /// Routes and `provider/model` patterns; all when absent or null.
    models: Option<Vec<String>>,
    requests_per_minute: Option<u64>,
    tokens_per_minute: Option<u64>,
    max_concurrent: Option<u64>,
    /// Spend budgets in US dollars (a JSON number, read as written: see [`budget`]).
    budget_per_day: Option<Box<RawValue>>,
    budget_per_month: Option<Box<RawValue>>,
    /// A duration such as `"30d"`.
    expires_in: Option<String>,
    /// Milliseconds since the epoch.
    expires_ms: Option<i64>,
}

impl CreateKey {
    /// The checked request, and when the key expires.
    pub fn into_request(
        self,
        config: &Config,
        now: i64,
    ) -> Result<(KeyRequest, Option<i64>), ApiError> {
        let expires_ms = expiry(self.expires_in.as_deref(), self.expires_ms, now)?;
        let request = KeyRequest {
            user: self.user,
            role: self.role,
            permissions: self.permissions,
            models: self.models,
            limits: LimitOverrides {
                requests_per_minute: self.requests_per_minute,
                tokens_per_minute: self.tokens_per_minute,
                max_concurrent: self.max_concurrent,
                budget_per_day_micros: budget("budget_per_day", self.budget_per_day)?,
                budget_per_month_micros: budget("budget_per_month", self.budget_per_month)?,
            },
        };
        request.validate(config).map_err(refused)?;
        Ok((request, expires_ms))
    }
}

/// `PATCH /admin/virtual-keys/{id}`'s body: what it names changes, the rest stays. A null
/// clears: `models` to all, a limit or budget to the role's, `expires_ms` to never.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateKey {
    role: Option<String>,
    permissions: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    models: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    requests_per_minute: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    tokens_per_minute: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    max_concurrent: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    budget_per_day: Option<Option<Box<RawValue>>>,
    #[serde(default, deserialize_with = "present")]
    budget_per_month: Option<Option<Box<RawValue>>>,
    expires_in: Option<String>,
    #[serde(default, deserialize_with = "present")]
    expires_ms: Option<Option<i64>>,
}

/// Tells a field that is null (`Some(None)`) from one that is absent (`None`, by default).
fn present<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

impl UpdateKey {
    /// Applies the change to `key`, checking only what it changes: a route renamed since
    /// the key was made does not block a change of its limits.
    pub fn apply(self, key: &mut VirtualKey, config: &Config, now: i64) -> Result<(), ApiError> {
        let mut changed = false;
        if let Some(role) = self.role {
            validate::role(config, &role).map_err(refused)?;
            key.role = role;
            changed = true;
        }
        if let Some(permissions) = self.permissions {
            validate::permissions(&permissions).map_err(refused)?;
            key.permissions = permissions;
            changed = true;
        }
        if let Some(models) = self.models {
            if let Some(models) = &models {
                validate::models(config, models).map_err(refused)?;
            }
            key.models = models;
            changed = true;
        }
        let limits = [
            (
                self.requests_per_minute,
                &mut key.limits.requests_per_minute,
            ),
            (self.tokens_per_minute, &mut key.limits.tokens_per_minute),
            (self.max_concurrent, &mut key.limits.max_concurrent),
        ];
        for (new, limit) in limits {
            if let Some(new) = new {
                *limit = new;
                changed = true;
            }
        }
        let budgets = [
            (
                "budget_per_day",
                self.budget_per_day,
                &mut key.limits.budget_per_day_micros,
            ),
            (
                "budget_per_month",
                self.budget_per_month,
                &mut key.limits.budget_per_month_micros,
            ),
        ];
        for (field, new, micros) in budgets {
            if let Some(new) = new {
                *micros = budget(field, new)?;
                changed = true;
            }
        }
        validate::limits(&key.limits).map_err(refused)?;
        match (self.expires_in.as_deref(), self.expires_ms) {
            (None, None) => {}
            (None, Some(None)) => {
                key.expires_ms = None;
                changed = true;
            }
            (Some(_), Some(_)) => return Err(both_expiries()),
            (expires_in, expires_ms) => {
                key.expires_ms = expiry(expires_in, expires_ms.flatten(), now)?;
                changed = true;
            }
        }
        if !changed {
            return Err(invalid(
                None,
                "the body changes nothing: give one or more of role, permissions, models, \
                 requests_per_minute, tokens_per_minute, max_concurrent, budget_per_day, \
                 budget_per_month, expires_in, expires_ms",
            ));
        }
        Ok(())
    }
}

/// When a key given `expires_in` or `expires_ms` expires: in the future, at most a hundred
/// years ahead (as provider keys).
fn expiry(
    expires_in: Option<&str>,
    expires_ms: Option<i64>,
    now: i64,
) -> Result<Option<i64>, ApiError> {
    let max = Duration::from_secs(MAX_EXPIRES_IN_DAYS * 86_400);
    // Whole milliseconds of a hundred years: far inside an i64.
    let max_ms = i64::try_from(max.as_millis()).unwrap_or(i64::MAX);
    match (expires_in, expires_ms) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(both_expiries()),
        (Some(text), None) => {
            let wait = parse_duration(text).map_err(|e| invalid(Some("expires_in"), &e))?;
            if wait.is_zero() || wait > max {
                return Err(invalid(
                    Some("expires_in"),
                    &format!("must be more than 0 and at most {MAX_EXPIRES_IN_DAYS}d"),
                ));
            }
            let wait = i64::try_from(wait.as_millis()).unwrap_or(max_ms);
            Ok(Some(now.saturating_add(wait)))
        }
        (None, Some(at)) if at <= now => Err(invalid(
            Some("expires_ms"),
            &format!("{at} lies in the past (now is {now}); to stop a key now, revoke it"),
        )),
        (None, Some(at)) if at - now > max_ms => Err(invalid(
            Some("expires_ms"),
            &format!("must be at most {MAX_EXPIRES_IN_DAYS} days ahead"),
        )),
        (None, Some(at)) => Ok(Some(at)),
    }
}

/// A budget given in US dollars, as micro-dollars. The JSON number is read from the body's
/// own text, not through a float, so `12.50` is exactly 12 500 000.
fn budget(field: &'static str, raw: Option<Box<RawValue>>) -> Result<Option<u64>, ApiError> {
    raw.map(|raw| {
        usd::parse_json(raw.get()).map_err(|e| invalid(Some(field), &format!("{field}: {e}")))
    })
    .transpose()
}

/// Parses a JSON body; the error says what is wrong (unknown fields included). Bodies here
/// carry no secret, so quoting them is safe.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::InvalidRequest {
        message: format!("the body is not a valid request: {e}"),
        param: None,
    })
}

fn both_expiries() -> ApiError {
    invalid(
        Some("expires_in"),
        "give expires_in or expires_ms, not both",
    )
}

fn refused(error: Invalid) -> ApiError {
    ApiError::InvalidRequest {
        message: error.to_string(),
        param: Some(error.field),
    }
}

fn invalid(param: Option<&'static str>, message: &str) -> ApiError {
    ApiError::InvalidRequest {
        message: message.to_owned(),
        param,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn param_of(result: Result<Option<i64>, ApiError>) -> Option<&'static str> {
        match result {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_expiry_lies_ahead_within_a_hundred_years() {
        assert_eq!(expiry(None, None, NOW).unwrap(), None);
        assert_eq!(
            expiry(Some("1h"), None, NOW).unwrap(),
            Some(NOW + 3_600_000)
        );
        assert_eq!(expiry(None, Some(NOW + 1), NOW).unwrap(), Some(NOW + 1));
        assert_eq!(param_of(expiry(None, Some(NOW), NOW)), Some("expires_ms"));
        assert_eq!(
            param_of(expiry(None, Some(i64::MAX), NOW)),
            Some("expires_ms")
        );
        assert_eq!(param_of(expiry(Some("0s"), None, NOW)), Some("expires_in"));
        assert_eq!(
            param_of(expiry(Some("36501d"), None, NOW)),
            Some("expires_in")
        );
        assert_eq!(
            param_of(expiry(Some("1d"), Some(NOW + 1), NOW)),
            Some("expires_in")
        );
    }
}
