//! What a request can cost at most, and what an answer did cost, in micro-USD.
//!
//! A price per million tokens in dollars is a price per token in micro-dollars, so a cost
//! is `tokens × price`, rounded up to a whole micro-dollar. Rounding up keeps a cost
//! monotonic in its tokens: an answer that used no more tokens than were reserved never
//! costs more than its reservation.

use std::collections::HashMap;

use crate::config::{Config, ModelName, Price, ProviderId, Route, Unpriced};
use crate::providers::{JsonKind, Operation, RequestBody};

/// The fields a client names its output cap with: Chat Completions (old and new), and the
/// Responses API. Anthropic's `max_tokens` is the first.
const MAX_TOKEN_FIELDS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The most tokens a request can use, as admission reserves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenEstimate {
    /// An upper estimate of the prompt: one token per byte of the body.
    pub input: u64,
    /// The output cap the request names (times its `n` choices), or the configured default.
    pub output: u64,
}

/// The tokens `body` can use at most.
///
/// The prompt is estimated at one token per byte of the whole JSON body. Tokenizers in use
/// (byte-pair encodings) never make more tokens than bytes of text, and the body holds the
/// text plus its JSON syntax, so this over-estimates (about four times, for English) and
/// never under-estimates text. It does under-estimate an image given by URL, whose tokens
/// depend on its pixels; the settlement charges what the provider reports.
pub fn estimate(
    body: &RequestBody,
    operation: Operation,
    default_max_tokens: u64,
) -> TokenEstimate {
    let input = body.raw().len() as u64;
    if operation == Operation::Embeddings {
        return TokenEstimate { input, output: 0 };
    }
    let cap = MAX_TOKEN_FIELDS
        .iter()
        .find_map(|field| body.field_as::<u64>(field))
        .unwrap_or(default_max_tokens);
    // `n` asks for that many choices, each up to the cap.
    let choices = match body.field_kind("n") {
        Some(JsonKind::Number) => body.field_as::<u64>("n").unwrap_or(1).max(1),
        _ => 1,
    };
    TokenEstimate {
        input,
        output: cap.saturating_mul(choices),
    }
}

/// A model the price table does not price, which the budget must refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoPrice {
    pub provider: ProviderId,
    pub model: ModelName,
}

/// The price table, keyed by deployment, and what an unpriced model costs.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    table: HashMap<(ProviderId, ModelName), Price>,
    unpriced: Unpriced,
}

impl Prices {
    /// The config's `[[prices]]` and `[budgets] unpriced`.
    pub fn of(config: &Config) -> Prices {
        Prices {
            table: config
                .prices
                .iter()
                .map(|p| ((p.provider.clone(), p.model.clone()), p.clone()))
                .collect(),
            unpriced: config.budgets.unpriced,
        }
    }

    /// What `tokens_in` and `tokens_out` cost at one deployment; `Ok(0)` for an unpriced
    /// model under `unpriced = "free"`.
    pub fn cost(
        &self,
        provider: &ProviderId,
        model: &ModelName,
        tokens_in: u64,
        tokens_out: u64,
    ) -> Result<u64, NoPrice> {
        match self.table.get(&(provider.clone(), model.clone())) {
            Some(price) => Ok(micros(price, tokens_in, tokens_out)),
            None if self.unpriced == Unpriced::Free => Ok(0),
            None => Err(NoPrice {
                provider: provider.clone(),
                model: model.clone(),
            }),
        }
    }

    /// The most `tokens` can cost on `route` from `first_step` on: at its most expensive
    /// deployment, since after a fallback any of them may serve.
    pub fn most_on_route(
        &self,
        route: &Route,
        first_step: usize,
        tokens: TokenEstimate,
    ) -> Result<u64, NoPrice> {
        let mut most = 0;
        for deployment in route
            .steps
            .iter()
            .skip(first_step)
            .flat_map(|s| &s.deployments)
        {
            let cost = self.cost(
                &deployment.provider,
                &deployment.model,
                tokens.input,
                tokens.output,
            )?;
            most = most.max(cost);
        }
        Ok(most)
    }
}

/// Micro-dollars, rounded up; saturating, so an absurd count cannot wrap to a small one.
fn micros(price: &Price, tokens_in: u64, tokens_out: u64) -> u64 {
    let cost = tokens_in as f64 * price.input_per_1m + tokens_out as f64 * price.output_per_1m;
    // `as` saturates a float too large for u64 at u64::MAX.
    cost.ceil() as u64
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;

    fn body(json: &str) -> RequestBody {
        RequestBody::parse(Bytes::from(json.to_owned())).unwrap()
    }

    fn config() -> Config {
        Config::parse(
            "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n\
             [[routes]]\nname = \"r\"\nsteps = [{ provider = \"a\", model = \"cheap\" }, { provider = \"a\", model = \"dear\" }]\n\
             [[prices]]\nprovider = \"a\"\nmodel = \"cheap\"\ninput_per_1m = 0.5\noutput_per_1m = 1.5\n\
             [[prices]]\nprovider = \"a\"\nmodel = \"dear\"\ninput_per_1m = 3.0\noutput_per_1m = 15.0\n",
        )
        .unwrap()
    }

    #[test]
    fn the_estimate_is_the_body_in_bytes_and_the_named_cap() {
        let text = r#"{"model":"r","max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}"#;
        let tokens = estimate(&body(text), Operation::Chat, 4096);
        assert_eq!(
            tokens,
            TokenEstimate {
                input: text.len() as u64,
                output: 100
            }
        );
        for field in ["max_completion_tokens", "max_output_tokens"] {
            let text = format!(r#"{{"model":"r","{field}":7,"n":3}}"#);
            assert_eq!(
                estimate(&body(&text), Operation::Chat, 4096).output,
                21,
                "{field}"
            );
        }
        let none = estimate(&body(r#"{"model":"r"}"#), Operation::Chat, 4096);
        assert_eq!(none.output, 4096);
        let embeddings = estimate(
            &body(r#"{"model":"r","input":"x"}"#),
            Operation::Embeddings,
            4096,
        );
        assert_eq!(embeddings.output, 0);
    }

    #[test]
    fn the_estimate_never_undercounts_text_tokens() {
        // A byte-pair tokenizer makes at most one token per byte; the JSON around the text
        // adds bytes but no tokens, so the body's length bounds the prompt from above.
        let prompt = "naïve 日本語 text with some words, and punctuation!".repeat(20);
        let json =
            serde_json::json!({"model": "r", "messages": [{"role": "user", "content": prompt}]});
        let tokens = estimate(&body(&json.to_string()), Operation::Chat, 1);
        assert!(tokens.input >= prompt.len() as u64);
    }

    #[test]
    fn a_route_is_priced_at_its_dearest_deployment_from_its_first_step() {
        let config = config();
        let prices = Prices::of(&config);
        let route = &config.routes[0];
        let tokens = TokenEstimate {
            input: 1000,
            output: 100,
        };
        // dear: 1000 × 3 + 100 × 15 = 4500 micro-dollars; cheap: 500 + 150 = 650.
        assert_eq!(prices.most_on_route(route, 0, tokens), Ok(4500));
        assert_eq!(prices.most_on_route(route, 1, tokens), Ok(4500));
        let cheap = (ProviderId(Arc::from("a")), ModelName(Arc::from("cheap")));
        assert_eq!(prices.cost(&cheap.0, &cheap.1, 1000, 100), Ok(650));
        // Fractions of a micro-dollar round up.
        assert_eq!(prices.cost(&cheap.0, &cheap.1, 1, 0), Ok(1));
    }

    #[test]
    fn an_unpriced_model_is_refused_or_free() {
        let mut config = config();
        config.prices.pop();
        let route = config.routes[0].clone();
        let tokens = TokenEstimate {
            input: 10,
            output: 10,
        };
        let refused = Prices::of(&config).most_on_route(&route, 0, tokens);
        assert_eq!(refused.unwrap_err().model.as_str(), "dear");
        config.budgets.unpriced = Unpriced::Free;
        assert_eq!(Prices::of(&config).most_on_route(&route, 0, tokens), Ok(20));
    }
}
