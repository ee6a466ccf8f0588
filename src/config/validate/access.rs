//! `[auth] direct_models` and each role's `models`: lists of model-name patterns.

use super::Errors;
use crate::config::raw::RawDirectModels;
use crate::config::{DirectModels, ModelPattern};

/// `[auth] direct_models`: `false`, `true`, or a list of `provider/model` patterns.
pub(super) fn direct_models(errors: &mut Errors, raw: Option<RawDirectModels>) -> DirectModels {
    match raw {
        None => DirectModels::InRoutes,
        Some(RawDirectModels::Flag(false)) => DirectModels::Off,
        Some(RawDirectModels::Flag(true)) => DirectModels::Any,
        Some(RawDirectModels::Patterns(patterns)) => {
            for (i, pattern) in patterns.iter().enumerate() {
                if !pattern.contains('/') {
                    errors.add(
                        format!("auth.direct_models[{i}]"),
                        format!("`{pattern}` is not a `provider/model` pattern"),
                    );
                }
            }
            DirectModels::Matching(patterns.into_iter().map(ModelPattern).collect())
        }
    }
}

/// A role's `models`: route names and `provider/model` patterns.
pub(super) fn role_models(
    errors: &mut Errors,
    role: usize,
    raw: Option<Vec<String>>,
) -> Option<Vec<ModelPattern>> {
    let patterns = raw?;
    for (i, pattern) in patterns.iter().enumerate() {
        if pattern.is_empty() {
            errors.add(format!("roles[{role}].models[{i}]"), "must not be empty");
        }
    }
    Some(patterns.into_iter().map(ModelPattern).collect())
}
