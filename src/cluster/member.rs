//! The background task that makes one gateway a member of the cluster: it carries this
//! instance's breaker changes to Redis and the others' back, keeps the shared state read as
//! a backstop, takes and tends probe leases, and falls back to local breakers (and rejoins)
//! as Redis goes and comes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Script};
use tokio::time::{Instant, MissedTickBehavior};

use super::wire::{self, Message};
use super::{Change, Inbox, Link, scripts};
use crate::config::ClusterConfig;
use crate::config::RedisTarget;
use crate::router::Health;
use crate::router::breaker::Transition;
use crate::router::health::{DeploymentId, SharedState};
use crate::telemetry::metrics::Metrics;

/// A Redis slower than this is treated as down.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the shared state is read (the backstop) and held leases are tended.
const SYNC_INTERVAL: Duration = Duration::from_millis(500);
/// How long to wait before trying to rejoin a Redis that could not be reached.
const REJOIN_AFTER: Duration = Duration::from_millis(500);

/// Where this cluster's breakers live in Redis.
struct Keys {
    hash: String,
    version: String,
    channel: String,
    lease_prefix: String,
}

impl Keys {
    fn new(prefix: &str) -> Keys {
        Keys {
            hash: format!("{prefix}:breakers"),
            version: format!("{prefix}:breakers:version"),
            channel: format!("{prefix}:breakers:events"),
            lease_prefix: format!("{prefix}:breakers:lease:"),
        }
    }

    fn lease(&self, field: &str) -> String {
        format!("{}{field}", self.lease_prefix)
    }
}

/// Why a session with Redis ended.
enum Ended {
    /// The gateway is gone.
    Gone,
    /// Redis could not be reached or stopped answering; in words safe to show.
    Lost(&'static str),
}

/// One gateway's membership.
pub struct Member {
    client: redis::Client,
    /// Host and port, for logs: never the URL, which may carry a password.
    at: String,
    keys: Keys,
    /// This instance's name on the channel, so it skips its own messages.
    origin: String,
    health: Weak<Health>,
    link: Arc<Link>,
    metrics: Arc<Metrics>,
    scripts: Scripts,
    /// When each lease was last asked for.
    wished: HashMap<DeploymentId, Instant>,
}

struct Scripts {
    moved: Script,
    reset: Script,
    snapshot: Script,
    take: Script,
    renew: Script,
    release: Script,
}

mod leases;

impl Member {
    /// Starts the member for `health`, whose table holds `link`; it runs until the health
    /// table is gone. Fails only on a URL the Redis client cannot use.
    pub fn spawn(
        config: &ClusterConfig,
        target: &RedisTarget,
        health: &Arc<Health>,
        link: Arc<Link>,
        inbox: Inbox,
        metrics: Arc<Metrics>,
    ) -> Result<(), String> {
        let client = target.client()?;
        let member = Member {
            client,
            at: target.shown(),
            keys: Keys::new(&config.key_prefix),
            origin: format!("{:016x}", fastrand::u64(..)),
            health: Arc::downgrade(health),
            link,
            metrics,
            scripts: Scripts {
                moved: Script::new(scripts::MOVE),
                reset: Script::new(scripts::RESET),
                snapshot: Script::new(scripts::SNAPSHOT),
                take: Script::new(scripts::TAKE_LEASE),
                renew: Script::new(scripts::RENEW_LEASE),
                release: Script::new(scripts::RELEASE_LEASE),
            },
            wished: HashMap::new(),
        };
        tokio::spawn(member.run(inbox));
        Ok(())
    }

    async fn run(mut self, mut inbox: Inbox) {
        let mut last_problem = None;
        loop {
            // Changes made while breakers were local reach the cluster through the rejoin's
            // merge, not one by one.
            while inbox.changes.try_recv().is_ok() {}
            while inbox.wishes.try_recv().is_ok() {}
            match self.session(&mut inbox).await {
                Ended::Gone => return,
                Ended::Lost(problem) => {
                    if self.link.shared() || last_problem.is_none() {
                        tracing::warn!(
                            redis = self.at,
                            problem,
                            "breakers are local: the cluster's Redis cannot be reached"
                        );
                    }
                    last_problem = Some(problem);
                    self.fall_back(problem);
                }
            }
            tokio::time::sleep(REJOIN_AFTER).await;
            if self.health.strong_count() == 0 {
                return;
            }
        }
    }

    fn fall_back(&self, problem: &'static str) {
        self.link.set_shared(false, Some(problem));
        self.metrics.breakers_shared.set(0);
        if let Some(health) = self.health.upgrade() {
            health.set_shared(false);
        }
    }

    /// Connects, subscribes, rejoins, then serves until Redis or the gateway goes away.
    async fn session(&mut self, inbox: &mut Inbox) -> Ended {
        let connect = async {
            let connection = self.client.get_multiplexed_async_connection().await?;
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&self.keys.channel).await?;
            RedisResult::Ok((connection, pubsub))
        };
        let (mut connection, pubsub) = match timed(connect).await {
            Ok(both) => both,
            Err(problem) => return Ended::Lost(problem),
        };
        let mut messages = pubsub.into_on_message();
        if let Err(problem) = self.rejoin(&mut connection).await {
            return Ended::Lost(problem);
        }
        let mut ticks = tokio::time::interval(SYNC_INTERVAL);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            let step = tokio::select! {
                biased;
                change = inbox.changes.recv() => match change {
                    Some(change) => self.publish(&mut connection, change).await,
                    None => return Ended::Gone,
                },
                message = messages.next() => match message {
                    Some(message) => {
                        self.receive(&message);
                        Ok(())
                    }
                    None => Err("subscription lost"),
                },
                wish = inbox.wishes.recv() => match wish {
                    Some(id) => self.take_lease(&mut connection, id).await,
                    None => return Ended::Gone,
                },
                _ = ticks.tick() => {
                    if self.health.strong_count() == 0 {
                        return Ended::Gone;
                    }
                    self.sync(&mut connection).await
                }
            };
            if let Err(problem) = step {
                return Ended::Lost(problem);
            }
        }
    }

    /// Joins (or rejoins) the cluster: what opened here while breakers were local is
    /// told to the others, then the shared state is taken as the truth.
    async fn rejoin(&mut self, connection: &mut MultiplexedConnection) -> Result<(), &'static str> {
        let Some(health) = self.health.upgrade() else {
            return Ok(());
        };
        health.set_shared(false);
        let (open, _, _) = self.snapshot(connection).await?;
        let now = Instant::now();
        for (id, remaining, cooldown) in health.local_opens(now) {
            if !open.contains_key(&id) {
                let transition = Transition::Opened { cooldown };
                self.run_move(connection, &id, transition, remaining)
                    .await?;
            }
        }
        health.set_shared(true);
        self.link.set_shared(true, None);
        self.metrics.breakers_shared.set(1);
        tracing::info!("breakers are shared through the cluster's Redis");
        drop(health);
        self.sync(connection).await
    }

    /// Sends a change of this instance's to every instance.
    async fn publish(
        &mut self,
        connection: &mut MultiplexedConnection,
        change: Change,
    ) -> Result<(), &'static str> {
        match change {
            Change::Moved { id, transition } => {
                let remaining = match transition {
                    Transition::Opened { cooldown } => cooldown,
                    Transition::Closed => Duration::ZERO,
                };
                let version = self
                    .run_move(connection, &id, transition, remaining)
                    .await?;
                if let Some(health) = self.health.upgrade() {
                    health.change_arrived(&id, version);
                }
                Ok(())
            }
            Change::Reset { provider, model } => {
                let fields: Vec<String> = timed(
                    redis::cmd("HKEYS")
                        .arg(&self.keys.hash)
                        .query_async(connection),
                )
                .await?;
                let matching: Vec<String> = fields
                    .into_iter()
                    .filter(|field| {
                        wire::parse_field(field).is_some_and(|id| {
                            provider
                                .as_deref()
                                .is_none_or(|p| id.provider.as_str() == p)
                                && model.as_deref().is_none_or(|m| id.model.as_str() == m)
                        })
                    })
                    .collect();
                let mut invocation = self.scripts.reset.key(&self.keys.hash);
                invocation.key(&self.keys.version);
                for field in &matching {
                    invocation.key(self.keys.lease(field));
                }
                invocation
                    .arg(&self.keys.channel)
                    .arg(&self.origin)
                    .arg(provider.as_deref().unwrap_or(""))
                    .arg(model.as_deref().unwrap_or(""))
                    .arg(&matching);
                timed(invocation.invoke_async::<u64>(connection))
                    .await
                    .map(drop)
            }
        }
    }

    async fn run_move(
        &self,
        connection: &mut MultiplexedConnection,
        id: &DeploymentId,
        transition: Transition,
        remaining: Duration,
    ) -> Result<u64, &'static str> {
        let field = wire::field(id);
        let (kind, cooldown) = match transition {
            Transition::Opened { cooldown } => ("open", cooldown),
            Transition::Closed => ("closed", Duration::ZERO),
        };
        let mut invocation = self.scripts.moved.prepare_invoke();
        invocation
            .key(&self.keys.hash)
            .key(&self.keys.version)
            .key(self.keys.lease(&field))
            .arg(&field)
            .arg(kind)
            .arg(millis(remaining))
            .arg(millis(cooldown))
            .arg(&self.keys.channel)
            .arg(&self.origin);
        timed(invocation.invoke_async::<u64>(connection)).await
    }

    /// Applies another instance's change.
    fn receive(&self, message: &redis::Msg) {
        let Ok(payload) = message.get_payload::<String>() else {
            return;
        };
        let Ok(message) = serde_json::from_str::<Message>(&payload) else {
            tracing::warn!("an unreadable message on the breakers channel was skipped");
            return;
        };
        if message.origin == self.origin {
            return;
        }
        let Some(health) = self.health.upgrade() else {
            return;
        };
        let now = Instant::now();
        let state = match message.kind.as_str() {
            "open" => SharedState::Open {
                remaining: Duration::from_millis(message.remaining_ms),
                cooldown: Duration::from_millis(message.cooldown_ms),
            },
            "closed" => SharedState::Closed,
            "reset" => {
                let filter = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                let (provider, model) = (filter(&message.provider), filter(&message.model));
                health.adopt_reset(provider.as_deref(), model.as_deref(), message.v);
                return;
            }
            _ => return,
        };
        if let Some(id) = wire::parse_field(&message.field) {
            health.adopt(&id, message.v, state, now);
        }
    }

    /// Reads every open breaker, with the cluster's version and the server's clock.
    async fn snapshot(
        &self,
        connection: &mut MultiplexedConnection,
    ) -> Result<(HashMap<DeploymentId, (u64, SharedState)>, u64, u64), &'static str> {
        let mut invocation = self.scripts.snapshot.prepare_invoke();
        invocation.key(&self.keys.hash).key(&self.keys.version);
        let (version, now_ms, flat): (String, String, Vec<String>) =
            timed(invocation.invoke_async(connection)).await?;
        let version = version.parse().unwrap_or(0);
        let now_ms: u64 = now_ms.parse().unwrap_or(0);
        let mut open = HashMap::new();
        for pair in flat.chunks_exact(2) {
            let (Some(id), Some((v, until, cooldown))) =
                (wire::parse_field(&pair[0]), wire::parse_entry(&pair[1]))
            else {
                continue;
            };
            let state = SharedState::Open {
                remaining: Duration::from_millis(until.saturating_sub(now_ms)),
                cooldown: Duration::from_millis(cooldown),
            };
            open.insert(id, (v, state));
        }
        Ok((open, version, now_ms))
    }

    /// The backstop read, and the leases' upkeep.
    async fn sync(&mut self, connection: &mut MultiplexedConnection) -> Result<(), &'static str> {
        let (open, version, _) = self.snapshot(connection).await?;
        let Some(health) = self.health.upgrade() else {
            return Ok(());
        };
        health.adopt_snapshot(&open, version, Instant::now());
        drop(health);
        self.tend_leases(connection).await
    }
}

/// Runs one Redis command with a deadline; the failure in words safe to show.
async fn timed<T>(command: impl Future<Output = RedisResult<T>>) -> Result<T, &'static str> {
    match tokio::time::timeout(COMMAND_TIMEOUT, command).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(crate::limits::RedisFailure::Redis(e).class()),
        Err(_) => Err("no answer in time"),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
