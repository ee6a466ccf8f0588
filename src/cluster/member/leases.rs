//! The probe lease: asked for when a cooldown ends here, renewed while this instance's
//! probe is out, given back when no request came to send it.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::{Member, millis, timed};
use crate::cluster::wire;
use crate::router::health::DeploymentId;

/// How long a probe lease lasts unless renewed; renewed every sync while its probe is out,
/// so a holder that dies holds up the cluster's probe for at most this.
const LEASE_TTL: Duration = Duration::from_secs(3);
/// A lease whose probe has not gone out by then goes back (this instance's traffic for
/// the deployment stopped), so another instance can probe.
const LEASE_IDLE: Duration = Duration::from_secs(1);
/// Wishes for the same lease closer together than this are one wish.
const WISH_SPACING: Duration = Duration::from_millis(50);

impl Member {
    /// Asks for the probe lease of `id`, whose cooldown is over here.
    pub(super) async fn take_lease(
        &mut self,
        connection: &mut MultiplexedConnection,
        id: DeploymentId,
    ) -> Result<(), &'static str> {
        let now = Instant::now();
        if self
            .wished
            .get(&id)
            .is_some_and(|at| now.duration_since(*at) < WISH_SPACING)
        {
            return Ok(());
        }
        self.wished.insert(id.clone(), now);
        let Some(health) = self.health.upgrade() else {
            return Ok(());
        };
        let Some(version) = health.lease_wanted(&id, now) else {
            return Ok(());
        };
        let field = wire::field(&id);
        let key = self.keys.lease(&field);
        let mut take = self.scripts.take.prepare_invoke();
        take.key(&self.keys.hash)
            .key(&key)
            .arg(&field)
            .arg(version)
            .arg(millis(LEASE_TTL))
            .arg(&self.origin);
        match timed(take.invoke_async::<i64>(connection)).await? {
            1 => {
                if !health.lease_taken(&id, version, Instant::now()) {
                    self.release(connection, &key).await?;
                }
                Ok(())
            }
            // This instance missed a change: read the shared state now.
            -1 => {
                drop(health);
                self.sync(connection).await
            }
            _ => Ok(()),
        }
    }

    /// Renews the leases whose probes are out, and gives back those whose probe never went.
    pub(super) async fn tend_leases(
        &mut self,
        connection: &mut MultiplexedConnection,
    ) -> Result<(), &'static str> {
        let Some(health) = self.health.upgrade() else {
            return Ok(());
        };
        for lease in health.held_leases() {
            let key = self.keys.lease(&wire::field(&lease.id));
            if lease.probing {
                let mut renew = self.scripts.renew.prepare_invoke();
                renew.key(&key).arg(&self.origin).arg(millis(LEASE_TTL));
                timed(renew.invoke_async::<i64>(connection)).await?;
            } else if lease.since.elapsed() >= LEASE_IDLE && health.give_back_lease(&lease.id) {
                self.release(connection, &key).await?;
            }
        }
        let now = Instant::now();
        self.wished
            .retain(|_, at| now.duration_since(*at) < WISH_SPACING);
        Ok(())
    }

    /// Gives a lease back, if it is still this instance's.
    pub(super) async fn release(
        &self,
        connection: &mut MultiplexedConnection,
        key: &str,
    ) -> Result<(), &'static str> {
        let mut release = self.scripts.release.prepare_invoke();
        release.key(key).arg(&self.origin);
        timed(release.invoke_async::<i64>(connection))
            .await
            .map(drop)
    }
}
