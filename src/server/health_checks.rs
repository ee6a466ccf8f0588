//! Active health checks (`health_check = { every }` on a provider): while one of its
//! deployments' breakers is open, the gateway sends the smallest real request it can (the
//! deployment's model, `max_tokens = 1`, its key) every `every`, and that request is the
//! breaker's probe: a success closes it, a failure keeps it open. A user's request is never
//! the probe of a checked provider, so no user waits on, or fails through, a probe. Checks
//! never run while a breaker is closed. Each check is a log row of its own kind (outcome
//! `health_check`), so its tokens and cost show in the metrics.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use foldhash::{HashMap, HashMapExt};
use tokio::time::Instant;

use super::Shared;
use crate::config::Deployment;
use crate::providers::{ClientFormat, ClientRequest, Operation, RequestBody};
use crate::router::breaker::{CallerTag, Verdict};
use crate::router::health::DeploymentId;
use crate::router::upstream::JsonAttempter;
use crate::router::{Attempt, Attempter, FailureClass};
use crate::telemetry::trace::Propagation;
use crate::telemetry::{AttemptRecord, Outcome, RecordGuard, RequestRecord};

/// How often the checker looks for breakers opened elsewhere (another instance's, through
/// the cluster) when nothing wakes it sooner. Local opens wake it at once.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Runs until the gateway is gone (nothing else holds its state); holds none of it while it
/// waits, so a stopping gateway is never kept alive by the checker.
pub async fn run(state: Weak<Shared>) {
    let Some(opened) = state.upgrade().map(|s| s.health.breaker_opened()) else {
        return;
    };
    // When each open breaker's next check is due; forgotten once it is no longer open.
    let mut due: HashMap<DeploymentId, Instant> = HashMap::new();
    loop {
        let Some(shared) = state.upgrade() else {
            return;
        };
        let now = Instant::now();
        let mut wake = now + LOOK_EVERY;
        let awaiting = shared.health.awaiting_health_checks();
        due.retain(|id, _| awaiting.contains(id));
        let live = shared.live();
        for id in awaiting {
            let Some(every) = live
                .config
                .provider(&id.provider)
                .and_then(|p| p.health_check)
                .map(|check| check.every)
            else {
                continue;
            };
            // The first check comes `every` after the breaker was seen open: the failures
            // that opened it are fresh, and a check at once would only repeat them.
            let at = *due.entry(id.clone()).or_insert(now + every);
            if at > now {
                wake = wake.min(at);
                continue;
            }
            due.insert(id.clone(), now + every);
            wake = wake.min(now + every);
            // A gateway shutting down starts no new check.
            if !shared.draining.load(Ordering::Relaxed) {
                tokio::spawn(check(Weak::clone(&state), id));
            }
        }
        drop(live);
        drop(shared);
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = opened.notified() => {}
        }
    }
}

/// Sends one check to `id` as its breaker's probe, reports it, and logs it. While the check
/// is out it holds none of the gateway's state but the health table, the client and the
/// config: a shutdown (whose log writer waits for every holder of the state) never waits on
/// a check, which then simply goes unlogged.
async fn check(state: Weak<Shared>, id: DeploymentId) {
    let Some(shared) = state.upgrade() else {
        return;
    };
    let live = shared.live();
    let (client, health) = (shared.client.clone(), Arc::clone(&shared.health));
    let key = match &id.key {
        // The key went away (rotated or removed): its breaker goes with it.
        Some(wanted) => match shared
            .keys
            .ring
            .pick_where(&id.provider, &[], |k| k == &**wanted)
        {
            Some(lease) => Some(lease),
            None => return,
        },
        None => None,
    };
    drop(shared);
    let config = &live.config;
    let (Some(provider), Some(request)) = (config.provider(&id.provider), smallest_request(&id))
    else {
        return;
    };
    let Some(permit) = health.admit_health_check(&id, key) else {
        return;
    };
    let deployment = Deployment {
        provider: id.provider.clone(),
        model: id.model.clone(),
        weight: 1,
    };
    let timeout = config.retry.attempt_timeout;
    let attempter = JsonAttempter {
        client: &client,
        request,
        fallback_on_context_length: false,
        deadline: Instant::now() + timeout,
        max_body_bytes: config.server.max_upstream_body_bytes,
        propagation: Propagation::None,
    };
    let started = Instant::now();
    let span = opentelemetry::trace::SpanId::INVALID;
    let attempt = attempter
        .attempt(&deployment, provider, permit.key.as_ref(), timeout, span)
        .await;
    let latency = started.elapsed();
    let key_id = permit.key.as_ref().map(|k| k.id.clone());
    let (failure, status, usage) = match attempt {
        Attempt::Served(reply) => (None, Some(reply.reply.status.as_u16()), reply.usage),
        Attempt::Failed(failure) => {
            let status = failure.reply.as_ref().map(|r| r.status.as_u16());
            (Some(failure.class), status, None)
        }
    };
    permit.finish(
        Verdict::of(failure),
        None,
        None,
        CallerTag::new("health_check"),
    );
    match failure {
        None => tracing::info!(provider = %id.provider, model = %id.model, "health check passed"),
        Some(class) => tracing::warn!(
            provider = %id.provider,
            model = %id.model,
            class = class.kind(),
            "health check failed: the breaker stays open"
        ),
    }
    let Some(shared) = state.upgrade() else {
        return;
    };
    if let (Some(FailureClass::Auth), Some(key)) = (failure, &key_id) {
        let cooldown = config.breaker.cooldown;
        shared.keys.ring.bench(&id.provider, key, cooldown);
    }
    let record = RequestRecord::new(uuid::Uuid::now_v7().to_string(), false);
    let mut guard = RecordGuard::new(shared.telemetry.clone(), record).since(started);
    drop(shared);
    let record = guard.record();
    record.outcome = Outcome::HealthCheck;
    record.step = Some(0);
    record.provider = Some(id.provider.clone());
    record.model = Some(id.model.clone());
    // No answer at all (a timeout, a refused connection): as a proxy would say it.
    record.status = status.unwrap_or(502);
    record.error = failure.map(|class| class.kind().into());
    record.tokens_in = usage.as_ref().map(|u| u.prompt_tokens);
    record.tokens_out = usage.as_ref().map(|u| u.completion_tokens);
    record.attempts.push(AttemptRecord {
        step: 0,
        provider: id.provider.clone(),
        model: id.model.clone(),
        failure,
        status,
        latency,
        hedge: false,
        span: None,
    });
    guard.finish();
}

/// The smallest real request to `id`'s model: one word in, at most one token out, in the
/// OpenAI format every provider kind's adapter translates from.
fn smallest_request(id: &DeploymentId) -> Option<ClientRequest> {
    let body = serde_json::json!({
        "model": id.model.as_str(),
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
    });
    let body = RequestBody::parse(Bytes::from(body.to_string())).ok()?;
    Some(ClientRequest {
        format: ClientFormat::OpenAi,
        operation: Operation::Chat,
        body,
        anthropic_beta: None,
        forwarded: Vec::new(),
    })
}
