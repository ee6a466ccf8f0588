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

#[cfg(test)]
mod tests {
    use crate::config::{Config, DirectModels, ModelPattern};

    use crate::config::validate::errors_of as errors;

    #[test]
    fn direct_models_is_a_flag_or_a_list_of_provider_patterns() {
        let parse = |value: &str| {
            Config::parse(&format!("[auth]\ndirect_models = {value}\n"))
                .unwrap()
                .auth
                .direct_models
        };
        assert_eq!(parse("false"), DirectModels::Off);
        assert_eq!(parse("true"), DirectModels::Any);
        assert_eq!(
            parse("[\"openai/*\"]"),
            DirectModels::Matching(vec![ModelPattern("openai/*".into())])
        );
        let errors = errors("[auth]\ndirect_models = [\"openai/*\", \"smart\"]\n");
        assert_eq!(
            errors,
            ["auth.direct_models[1]: `smart` is not a `provider/model` pattern"]
        );
    }

    #[test]
    fn role_models_are_patterns_and_none_may_be_empty() {
        let config =
            Config::parse("[[roles]]\nname = \"ae\"\nmodels = [\"smart\", \"openai/*\"]\n")
                .unwrap();
        let models = config.roles[0].models.as_ref().unwrap();
        assert!(models[1].matches("openai/gpt-4o"));
        let errors = errors("[[roles]]\nname = \"ae\"\nmodels = [\"smart\", \"\"]\n");
        assert_eq!(errors, ["roles[0].models[1]: must not be empty"]);
    }
}
