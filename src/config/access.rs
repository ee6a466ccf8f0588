//! Which model names callers may use: patterns of route and `provider/model` names, and
//! the rule for direct `provider/model` names.

use super::Config;

/// A route name or `provider/model` name, in which `*` stands for any run of characters
/// (`openai/*`, `*/gpt-4o*`, `smart`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPattern(pub String);

impl ModelPattern {
    /// Whether `name` matches the pattern, whole.
    pub fn matches(&self, name: &str) -> bool {
        pattern_matches(&self.0, name)
    }
}

/// Whether `name` matches `pattern` whole, where `*` in the pattern stands for any run of
/// characters. Per-key model lists are stored as strings, so this is the one matcher.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    // `split` always yields a first part: the prefix before any `*`.
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*`: the prefix must have been the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Which direct `provider/model` names (as opposed to route names) clients may use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DirectModels {
    /// Only names that are some route's step (the default): what the operator has vetted.
    #[default]
    InRoutes,
    /// None: clients use routes only (`direct_models = false`).
    Off,
    /// Any model of any configured provider (`direct_models = true`).
    Any,
    /// Names matching one of these patterns (`direct_models = ["openai/*"]`).
    Matching(Vec<ModelPattern>),
}

impl DirectModels {
    /// Whether the direct name `provider/model` may be used under `config`.
    pub fn allows(&self, config: &Config, name: &str) -> bool {
        match self {
            DirectModels::InRoutes => config.in_some_route(name),
            DirectModels::Off => false,
            DirectModels::Any => true,
            DirectModels::Matching(patterns) => patterns.iter().any(|p| p.matches(name)),
        }
    }
}

impl Config {
    /// Whether `name` is a configured route's name.
    pub fn is_route(&self, name: &str) -> bool {
        self.routes.iter().any(|r| r.name.as_str() == name)
    }

    /// Whether the direct name `provider/model` is a deployment of some route's step.
    pub fn in_some_route(&self, name: &str) -> bool {
        let Some((provider, model)) = name.split_once('/') else {
            return false;
        };
        self.routes
            .iter()
            .flat_map(|r| &r.steps)
            .flat_map(|s| &s.deployments)
            .any(|d| d.provider.as_str() == provider && d.model.as_str() == model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names_with_star_as_any_run() {
        let cases = [
            ("smart", "smart", true),
            ("smart", "smarter", false),
            ("openai/*", "openai/gpt-4o", true),
            ("openai/*", "openai/", true),
            ("openai/*", "openaix/gpt", false),
            ("*/gpt-4o*", "azure/gpt-4o-mini", true),
            ("*/gpt-4o*", "azure/gpt-3.5", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("*", "anything/at-all", true),
            ("", "", true),
            ("", "x", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(
                pattern_matches(pattern, name),
                expected,
                "{pattern} ~ {name}"
            );
        }
    }

    #[test]
    fn direct_names_default_to_those_in_routes() {
        let config = Config::parse(
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nkey_required = false\n\
             [[routes]]\nname = \"r\"\nsteps = [{ provider = \"p\", model = \"m\" }]\n",
        )
        .unwrap();
        assert_eq!(config.auth.direct_models, DirectModels::InRoutes);
        assert!(config.is_route("r") && !config.is_route("p/m"));
        assert!(DirectModels::InRoutes.allows(&config, "p/m"));
        assert!(!DirectModels::InRoutes.allows(&config, "p/other"));
        assert!(!DirectModels::Off.allows(&config, "p/m"));
        assert!(DirectModels::Any.allows(&config, "p/other"));
        let some = DirectModels::Matching(vec![ModelPattern("p/o*".into())]);
        assert!(some.allows(&config, "p/other") && !some.allows(&config, "p/m"));
    }
}
