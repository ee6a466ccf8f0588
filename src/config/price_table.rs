//! The prices the gateway ships with (`price_table/prices.toml`), so that budgets and cost
//! work on a route whose models `[[prices]]` does not name. Each entry names its source and
//! that source's date; `[[prices]]` overrides any of them.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use serde::Deserialize;

use super::{ModelName, Price, PriceOrigin, Provider, ProviderKind, Route};

/// One model's prices, per million tokens, at one provider kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// `openai`, `anthropic`, `gemini`, `vertex` or `bedrock`.
    pub kind: String,
    pub model: String,
    /// Other names the provider's API takes for the same model.
    #[serde(default)]
    pub aliases: Vec<String>,
    pub input_per_1m: f64,
    pub output_per_1m: f64,
    pub cached_input_per_1m: Option<f64>,
    pub cache_write_per_1m: Option<f64>,
    pub source: String,
    /// The date of the source, `YYYY-MM-DD`.
    pub as_of: String,
}

#[derive(Deserialize)]
struct Table {
    model: Vec<Entry>,
}

/// The table, read once; a test proves it parses.
static TABLE: LazyLock<Vec<Entry>> = LazyLock::new(|| {
    toml::from_str::<Table>(include_str!("price_table/prices.toml"))
        .map(|table| table.model)
        .unwrap_or_default()
});

/// The shipped price of `model` at a provider of `kind`, if the table has one.
pub fn lookup(kind: ProviderKind, model: &str) -> Option<&'static Entry> {
    // Gemini's API also takes a model as `models/{name}`.
    let model = model.strip_prefix("models/").unwrap_or(model);
    TABLE.iter().find(|entry| {
        entry.kind == kind.as_str()
            && (entry.model == model || entry.aliases.iter().any(|alias| alias == model))
    })
}

/// `prices` (the file's), with a shipped price added for each deployment of `routes` the file
/// does not price. A provider with a `compat` preset serves another vendor's models, whose
/// names the table does not hold prices for, so it takes none.
pub fn with_shipped(
    mut prices: Vec<Price>,
    providers: &[Provider],
    routes: &[Route],
) -> Vec<Price> {
    let mut priced: BTreeSet<(String, String)> = prices
        .iter()
        .map(|p| (p.provider.as_str().to_owned(), p.model.as_str().to_owned()))
        .collect();
    let deployments = routes
        .iter()
        .flat_map(|route| &route.steps)
        .flat_map(|step| &step.deployments);
    for deployment in deployments {
        let key = (
            deployment.provider.as_str().to_owned(),
            deployment.model.as_str().to_owned(),
        );
        if priced.contains(&key) {
            continue;
        }
        let Some(provider) = providers.iter().find(|p| p.id == deployment.provider) else {
            continue;
        };
        if provider.compat.is_some() {
            continue;
        }
        if let Some(entry) = lookup(provider.kind, deployment.model.as_str()) {
            prices.push(Price {
                provider: provider.id.clone(),
                model: ModelName(Arc::from(deployment.model.as_str())),
                input_per_1m: entry.input_per_1m,
                output_per_1m: entry.output_per_1m,
                cached_input_per_1m: entry.cached_input_per_1m,
                cache_write_per_1m: entry.cache_write_per_1m,
                origin: PriceOrigin::Shipped {
                    as_of: &entry.as_of,
                },
            });
            priced.insert(key);
        }
    }
    prices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_price_parses_and_names_its_source_and_date() {
        let table: Table = toml::from_str(include_str!("price_table/prices.toml")).unwrap();
        assert_eq!(table.model.len(), TABLE.len());
        assert!(TABLE.len() >= 50);
        let kinds = ["openai", "anthropic", "gemini", "vertex", "bedrock"];
        let mut seen = BTreeSet::new();
        for entry in TABLE.iter() {
            let name = format!("{}/{}", entry.kind, entry.model);
            assert!(kinds.contains(&entry.kind.as_str()), "{name}");
            assert!(seen.insert(name.clone()), "{name} is listed twice");
            assert!(!entry.source.is_empty(), "{name} has no source");
            let date = entry.as_of.as_bytes();
            let dated = date.len() == 10 && date[4] == b'-' && date[7] == b'-';
            assert!(dated, "{name}: as_of is not YYYY-MM-DD");
            let prices = [Some(entry.input_per_1m), Some(entry.output_per_1m)];
            let optional = [entry.cached_input_per_1m, entry.cache_write_per_1m];
            for price in prices.into_iter().chain(optional).flatten() {
                assert!(price.is_finite() && price >= 0.0, "{name}");
            }
        }
    }

    #[test]
    fn a_model_is_found_by_kind_name_and_alias() {
        let gpt = lookup(ProviderKind::OpenAi, "gpt-4o-mini").unwrap();
        assert_eq!((gpt.input_per_1m, gpt.output_per_1m), (0.15, 0.60));
        let alias = lookup(ProviderKind::Anthropic, "claude-sonnet-4-5").unwrap();
        assert_eq!(alias.model, "claude-sonnet-4-5-20250929");
        assert_eq!(alias.cache_write_per_1m, Some(3.75));
        assert!(lookup(ProviderKind::Gemini, "models/gemini-2.5-flash").is_some());
        assert!(lookup(ProviderKind::Vertex, "claude-sonnet-4@20250514").is_some());
        assert!(
            lookup(ProviderKind::OpenAi, "claude-sonnet-4-5").is_none(),
            "by kind"
        );
        assert!(
            lookup(ProviderKind::Azure, "gpt-4o").is_none(),
            "Azure names deployments"
        );
    }
}
