//! The attributes of a request's spans: the GenAI semantic conventions' (v1.37, marked
//! Development, or v1.36 by `[otel] semconv`), then Switchyard's own under `switchyard.*`.
//! None holds a key, a secret or a URL with its query: providers are named by kind and host
//! only. Content is there only when `[otel] capture_content` put it in the record.

use opentelemetry::{Array, KeyValue, StringValue, Value};

use super::millis;
use crate::config::{ProviderKind, SemConv};
use crate::telemetry::trace::SpanDetail;
use crate::telemetry::{AttemptRecord, RequestRecord};

/// The server span's: what the client asked, what served it, and what it cost.
pub fn request_attributes(
    record: &RequestRecord,
    provider: Option<ProviderKind>,
    semconv: SemConv,
) -> Vec<KeyValue> {
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
    if let Some(kind) = provider {
        attributes.push(provider_name(kind, semconv));
    }
    answer_attributes(record, &mut attributes);
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
    if let Some(detail) = &record.detail {
        detail_attributes(detail, &mut attributes);
    }
    attributes
}

/// What only a sampled record's detail holds: the caller's role, its budget, the answer's
/// finish reasons and, when captured, the content.
fn detail_attributes(detail: &SpanDetail, attributes: &mut Vec<KeyValue>) {
    if let Some(role) = &detail.role {
        attributes.push(KeyValue::new("switchyard.role", role.to_string()));
    }
    if let Some((reserved, remaining)) = detail.budget {
        attributes.push(KeyValue::new(
            "switchyard.budget.reserved_usd",
            usd(reserved),
        ));
        if let Some(remaining) = remaining {
            attributes.push(KeyValue::new(
                "switchyard.budget.remaining_usd",
                usd(remaining),
            ));
        }
    }
    if !detail.finish_reasons.is_empty() {
        attributes.push(finish_reasons(detail));
    }
    let content = [
        ("gen_ai.system_instructions", &detail.system_instructions),
        ("gen_ai.input.messages", &detail.input_messages),
        ("gen_ai.output.messages", &detail.output_messages),
    ];
    for (key, json) in content {
        if let Some(json) = json {
            attributes.push(KeyValue::new(key, json.clone()));
        }
    }
}

fn finish_reasons(detail: &SpanDetail) -> KeyValue {
    let reasons: Vec<StringValue> = detail
        .finish_reasons
        .iter()
        .map(|reason| StringValue::from(reason.clone()))
        .collect();
    KeyValue::new(
        "gen_ai.response.finish_reasons",
        Value::Array(Array::String(reasons)),
    )
}

fn usd(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// The provider, as the conventions' version names the attribute and its values.
fn provider_name(kind: ProviderKind, semconv: SemConv) -> KeyValue {
    let name = match (kind, semconv) {
        (ProviderKind::OpenAi, _) => "openai",
        (ProviderKind::Anthropic, _) => "anthropic",
        (ProviderKind::Gemini, _) => "gcp.gemini",
        (ProviderKind::Vertex, _) => "gcp.vertex_ai",
        (ProviderKind::Bedrock, _) => "aws.bedrock",
        (ProviderKind::Azure, SemConv::V1_37) => "azure.ai.openai",
        (ProviderKind::Azure, SemConv::V1_36) => "az.ai.openai",
    };
    match semconv {
        SemConv::V1_37 => KeyValue::new("gen_ai.provider.name", name),
        SemConv::V1_36 => KeyValue::new("gen_ai.system", name),
    }
}

/// An attempt's client span: the deployment it went to, and how it ended; the one that
/// served also what it answered.
pub fn attempt_attributes(
    record: &RequestRecord,
    attempt: &AttemptRecord,
    provider: Option<(ProviderKind, &str)>,
    semconv: SemConv,
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
    if let Some((kind, host)) = provider {
        attributes.push(provider_name(kind, semconv));
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    let served = attempt.failure.is_none()
        && record.step == Some(attempt.step)
        && record.provider.as_ref() == Some(&attempt.provider);
    if served {
        served_attributes(record, &mut attributes);
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

/// The serving attempt's answer: its model, usage and finish reasons, which views built on
/// client spans read there.
fn served_attributes(record: &RequestRecord, attributes: &mut Vec<KeyValue>) {
    answer_attributes(record, attributes);
    if let Some(detail) = record
        .detail
        .as_deref()
        .filter(|d| !d.finish_reasons.is_empty())
    {
        attributes.push(finish_reasons(detail));
    }
}

/// The model that answered, and the tokens it counted.
fn answer_attributes(record: &RequestRecord, attributes: &mut Vec<KeyValue>) {
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
}
