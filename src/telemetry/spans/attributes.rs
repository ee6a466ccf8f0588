//! The attributes of a request's spans: the GenAI semantic conventions' (v1.37, marked
//! Development), then Switchyard's own under `switchyard.*`. None holds a key, a secret or a
//! URL with its query: providers are named by kind and host only.

use opentelemetry::KeyValue;

use super::millis;
use crate::telemetry::{AttemptRecord, RequestRecord};

/// The server span's: what the client asked, what served it, and what it cost.
pub fn request_attributes(record: &RequestRecord, provider: Option<&'static str>) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", record.operation.unwrap_or("chat")),
        KeyValue::new("switchyard.request_id", record.id.clone()),
        KeyValue::new("switchyard.outcome", record.outcome.as_str()),
        KeyValue::new("http.response.status_code", i64::from(record.status)),
        KeyValue::new("switchyard.attempts", record.attempts.len() as i64),
        KeyValue::new("switchyard.hedged", record.attempts.iter().any(|a| a.hedge)),
    ];
    if let Some(model) = &record.requested_model {
        attributes.push(KeyValue::new("gen_ai.request.model", model.clone()));
    }
    if let Some(max_tokens) = record.max_tokens {
        attributes.push(KeyValue::new(
            "gen_ai.request.max_tokens",
            max_tokens as i64,
        ));
    }
    if let Some(provider) = provider {
        attributes.push(KeyValue::new("gen_ai.provider.name", provider));
    }
    if let Some(model) = &record.model {
        attributes.push(KeyValue::new(
            "gen_ai.response.model",
            model.as_str().to_owned(),
        ));
    }
    if let Some(tokens) = record.tokens_in {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", tokens as i64));
    }
    if let Some(tokens) = record.tokens_out {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", tokens as i64));
    }
    if let Some(route) = &record.route {
        attributes.push(KeyValue::new("switchyard.route", route.as_str().to_owned()));
    }
    if let Some(step) = record.step {
        attributes.push(KeyValue::new("switchyard.step", step as i64));
    }
    if let Some(key_id) = &record.key_id {
        attributes.push(KeyValue::new("switchyard.key_id", key_id.clone()));
    }
    if let Some(cache) = record.cache {
        attributes.push(KeyValue::new("switchyard.cache", cache.as_str()));
    }
    if let Some(error) = &record.error {
        attributes.push(KeyValue::new("error.type", error.clone()));
    }
    if let Some(ttft) = record.ttft.filter(|_| record.stream) {
        attributes.push(KeyValue::new(
            "switchyard.time_to_first_token_ms",
            millis(ttft),
        ));
    }
    attributes
}

/// An attempt's client span: the deployment it went to, and how it ended.
pub fn attempt_attributes(
    record: &RequestRecord,
    attempt: &AttemptRecord,
    provider: Option<(&'static str, &str)>,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", record.operation.unwrap_or("chat")),
        KeyValue::new("gen_ai.request.model", attempt.model.as_str().to_owned()),
        KeyValue::new("switchyard.provider", attempt.provider.as_str().to_owned()),
        KeyValue::new("switchyard.step", attempt.step as i64),
        KeyValue::new("switchyard.hedged", attempt.hedge),
        KeyValue::new(
            "switchyard.attempt.class",
            attempt.failure.map_or("success", |class| class.kind()),
        ),
    ];
    if let Some((name, host)) = provider {
        attributes.push(KeyValue::new("gen_ai.provider.name", name));
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(status) = attempt.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    if let Some(class) = attempt.failure {
        attributes.push(KeyValue::new("error.type", class.kind()));
    }
    attributes
}
