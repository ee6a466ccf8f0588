//! Metric label values: only names the config defines, escaped for the exposition.
//!
//! A client chooses the `model` it sends, and `provider/<anything>` is a valid direct route;
//! were those strings labels, each would open new series that are never evicted, and a
//! quote or newline in one could forge series or end the scrape early. So every label goes
//! through [`LabelNames`], which keeps a configured name and folds anything else into
//! [`OTHER`], and is written by [`LabelValue`]'s encoder, which escapes it.

use std::fmt::{self, Write};
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

use crate::config::Config;

/// The label value of every name the config does not define.
pub const OTHER: &str = "other";
/// The route label of a request refused before it named a route.
pub const NO_ROUTE: &str = "-";

/// A label value, escaped for the text exposition as it is encoded.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct LabelValue(Arc<str>);

impl LabelValue {
    /// The value as given, unescaped.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Which label this is, among those one [`LabelNames`] hands out: each is one `Arc` it
    /// holds, so equal labels from the same names share an address.
    pub(super) fn id(&self) -> usize {
        Arc::as_ptr(&self.0).cast::<u8>() as usize
    }
}

impl From<&str> for LabelValue {
    fn from(value: &str) -> LabelValue {
        LabelValue(Arc::from(value))
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        // prometheus-client 0.24 writes label values verbatim, so escaping is ours to do.
        write_escaped(encoder, &self.0)
    }
}

/// Writes `value` as the inside of a quoted label value: `\`, `"` and newline escaped as the
/// exposition format defines, and every other control character (which the format cannot
/// escape, and some parsers reject raw) replaced by U+FFFD.
pub fn write_escaped(out: &mut impl Write, value: &str) -> fmt::Result {
    let mut rest = value;
    while let Some(at) = rest.find(|c: char| c == '\\' || c == '"' || c.is_control()) {
        out.write_str(&rest[..at])?;
        let special = rest[at..].chars().next().unwrap_or('\u{FFFD}');
        out.write_str(match special {
            '\\' => "\\\\",
            '"' => "\\\"",
            '\n' => "\\n",
            _ => "\u{FFFD}",
        })?;
        rest = &rest[at + special.len_utf8()..];
    }
    out.write_str(rest)
}

/// The names labels may carry: configured routes, providers and `(provider, model)` pairs
/// (from route steps and the price table), plus `provider/model` as a direct route name.
#[derive(Debug)]
pub struct LabelNames {
    routes: HashSet<Arc<str>>,
    models: HashMap<Arc<str>, HashSet<Arc<str>>>,
    other: LabelValue,
    no_route: LabelValue,
}

impl Default for LabelNames {
    /// No configured names: every name is `other`.
    fn default() -> LabelNames {
        LabelNames::new(
            std::iter::empty::<&str>(),
            std::iter::empty::<(&str, &str)>(),
        )
    }
}

impl LabelNames {
    /// From route names and `(provider, model)` pairs. A provider appears with no model to
    /// name only itself.
    pub fn new<'a>(
        routes: impl IntoIterator<Item = &'a str>,
        models: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> LabelNames {
        let mut names = LabelNames {
            routes: routes.into_iter().map(Arc::from).collect(),
            models: HashMap::new(),
            other: LabelValue::from(OTHER),
            no_route: LabelValue::from(NO_ROUTE),
        };
        for (provider, model) in models {
            let models = names.models.entry(Arc::from(provider)).or_default();
            if !model.is_empty() {
                models.insert(Arc::from(model));
                names
                    .routes
                    .insert(Arc::from(format!("{provider}/{model}")));
            }
        }
        names
    }

    /// Every name `config` defines.
    pub fn from_config(config: &Config) -> LabelNames {
        let deployments = config
            .routes
            .iter()
            .flat_map(|r| &r.steps)
            .flat_map(|s| &s.deployments)
            .map(|d| (d.provider.as_str(), d.model.as_str()));
        let prices = config
            .prices
            .iter()
            .map(|p| (p.provider.as_str(), p.model.as_str()));
        let providers = config.providers.iter().map(|p| (p.id.as_str(), ""));
        LabelNames::new(
            config.routes.iter().map(|r| r.name.as_str()),
            providers.chain(deployments).chain(prices),
        )
    }

    /// A route's label: its name if configured (or a configured direct `provider/model`),
    /// `-` when the request named none, else `other`.
    pub fn route(&self, route: Option<&str>) -> LabelValue {
        match route {
            None => self.no_route.clone(),
            Some(name) => self.known(self.routes.get(name)),
        }
    }

    /// A provider's label: its name if configured, else `other`.
    pub fn provider(&self, provider: &str) -> LabelValue {
        self.known(self.models.get_key_value(provider).map(|(name, _)| name))
    }

    /// A model's label: its name if configured for that provider, else `other`.
    pub fn model(&self, provider: &str, model: &str) -> LabelValue {
        self.known(
            self.models
                .get(provider)
                .and_then(|models| models.get(model)),
        )
    }

    fn known(&self, name: Option<&Arc<str>>) -> LabelValue {
        match name {
            Some(name) => LabelValue(name.clone()),
            None => self.other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(value: &str) -> String {
        let mut out = String::new();
        write_escaped(&mut out, value).unwrap();
        out
    }

    #[test]
    fn quotes_backslashes_and_newlines_are_escaped_and_other_controls_replaced() {
        assert_eq!(escaped("plain-name_1.2"), "plain-name_1.2");
        assert_eq!(escaped("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(
            escaped("x\r\u{1b}[31m\0é"),
            "x\u{FFFD}\u{FFFD}[31m\u{FFFD}é"
        );
    }

    #[test]
    fn only_configured_names_are_labels() {
        let names = LabelNames::new(["smart"], [("groq", ""), ("openai", "gpt-4o")]);
        assert_eq!(names.route(Some("smart")).as_str(), "smart");
        assert_eq!(names.route(Some("openai/gpt-4o")).as_str(), "openai/gpt-4o");
        assert_eq!(names.route(Some("openai/gpt-5")).as_str(), OTHER);
        assert_eq!(names.route(None).as_str(), NO_ROUTE);
        assert_eq!(names.provider("groq").as_str(), "groq");
        assert_eq!(names.provider("nobody").as_str(), OTHER);
        assert_eq!(names.model("openai", "gpt-4o").as_str(), "gpt-4o");
        assert_eq!(names.model("groq", "gpt-4o").as_str(), OTHER);
        // A provider named alone defines no model, not a model named "".
        assert_eq!(names.model("groq", "").as_str(), OTHER);
        assert_eq!(names.route(Some("groq/")).as_str(), OTHER);
    }
}
