//! Sync mode: decisions stay in this process's core at in-memory speed; every interval one
//! pipelined round trip pushes each key's usage since the last push to a counter in Redis and reads
//! the counter back, and what the other nodes added meanwhile is charged to the local state
//! (`Limiter::absorb`). Counters expire with their group's horizon, so Redis holds only active keys.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::StateStore;
use crate::backend::client::{Client, Failure};
use crate::backend::health::{Health, HealthReport};
use crate::backend::{reset_failed, script, unlink_owned, unlink_peer, Spec};
use crate::error::{Error, Result};
use crate::limiter::Limiter;

/// One key this node tracks: what it has yet to push, and the counter's total when last read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tracked {
    unpushed: u64,
    last_total: u64,
    /// The limiter's clock when this node last admitted or absorbed on the key.
    touched: u64,
}

/// What one sync did: for tests and `stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    pub keys: usize,
    /// Units the other nodes used, charged here.
    pub absorbed: u64,
}

pub struct Syncer {
    client: Client,
    prefix: String,
    /// Keyed by (group, peer).
    tracked: Mutex<HashMap<(String, String), Tracked>>,
    /// One sync at a time: the timer's and `sync_now`'s never interleave.
    running: tokio::sync::Mutex<()>,
    /// Syncs that failed (their usage kept for the next) and outages, as exact mode counts them.
    health: Health,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Syncer {
    #[must_use]
    pub fn new(client: Client, prefix: String) -> Arc<Self> {
        Arc::new(Self {
            client,
            prefix,
            tracked: Mutex::new(HashMap::new()),
            running: tokio::sync::Mutex::new(()),
            health: Health::default(),
        })
    }

    /// Syncs every `interval` on the client's runtime while `limiter` lives.
    pub fn start(self: &Arc<Self>, limiter: Weak<Limiter>, interval: Duration) {
        let syncer = Arc::clone(self);
        self.client.runtime().spawn(async move {
            let mut timer = tokio::time::interval(interval);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            timer.tick().await;
            loop {
                timer.tick().await;
                let Some(limiter) = limiter.upgrade() else { break };
                // A failed sync keeps its usage for the next one; nothing to report here.
                let _ = syncer.sync(&limiter).await;
            }
        });
    }

    /// One sync now, waited for (call it without the GIL).
    ///
    /// # Errors
    /// Redis did not answer: the usage is kept for the next sync.
    pub fn sync_now(&self, limiter: &Limiter) -> std::result::Result<SyncReport, Failure> {
        self.client.runtime().block_on(self.sync(limiter))
    }

    /// Forgets `peer`'s usage (every peer's with `None`): in this process (states and usage not yet
    /// pushed) and in Redis (the counters), between two syncs, so that a push in flight cannot bring a
    /// counter back. Call it without the GIL.
    ///
    /// # Errors
    /// Redis did not answer: the counters stay (this process's usage is forgotten all the same).
    pub fn reset(&self, limiter: &Limiter, peer: Option<&str>) -> std::result::Result<(), Failure> {
        self.client.runtime().block_on(async {
            let _one = self.running.lock().await;
            limiter.reset(peer);
            match peer {
                Some(peer) => self.tracked.lock().retain(|(_, tracked), _| tracked != peer),
                None => self.tracked.lock().clear(),
            }
            match peer {
                Some(peer) => unlink_peer(&self.client, &self.prefix, limiter, peer).await,
                None => unlink_owned(&self.client, &self.prefix).await,
            }
        })
    }

    fn counter(&self, group: &str, peer: &str) -> String {
        script::usage_key(&self.prefix, group, peer)
    }

    async fn sync(&self, limiter: &Limiter) -> std::result::Result<SyncReport, Failure> {
        let (seen, round_trip) = (self.health.seen(), self.health.round_trip());
        let result = self.exchange(limiter).await;
        round_trip.done();
        if result.is_err() {
            self.health.failed(seen);
        } else {
            self.health.answered(seen);
        }
        result
    }

    async fn exchange(&self, limiter: &Limiter) -> std::result::Result<SyncReport, Failure> {
        let _one = self.running.lock().await;
        let now = limiter.now_ns();
        let horizons = limiter.group_horizons();
        let drained = limiter.drain_pending().map_err(|e| Failure(e.to_string()))?;
        let batch: Vec<((String, String), Tracked)> = {
            let mut tracked = self.tracked.lock();
            for (peer, group, units) in drained {
                let entry = tracked.entry((group, peer)).or_default();
                entry.unpushed = entry.unpushed.saturating_add(units);
                entry.touched = now;
            }
            // Keys idle for longer than their group's horizon no longer constrain anything here.
            tracked.retain(|(group, _), t| {
                now.saturating_sub(t.touched) <= horizons.get(group.as_str()).copied().unwrap_or(0)
            });
            tracked.iter().map(|(k, t)| (k.clone(), *t)).collect()
        };
        if batch.is_empty() {
            return Ok(SyncReport::default());
        }
        // One small pipeline per key (its two commands share the key's slot), all sent at once: the
        // multiplexed connection writes them together, one round trip in all; a Cluster sends each to
        // its node.
        let pushes = batch.iter().map(|((group, peer), t)| {
            let key = self.counter(group, peer);
            let ttl_ms = horizons.get(group.as_str()).copied().unwrap_or(0).div_ceil(1_000_000).max(1);
            let mut pipe = redis::pipe();
            pipe.cmd("INCRBY").arg(&key).arg(t.unpushed).cmd("PEXPIRE").arg(&key).arg(ttl_ms).ignore();
            self.client.pipeline::<(u64,)>(pipe)
        });
        let totals: Vec<u64> = futures_util::future::try_join_all(pushes).await?.into_iter().map(|(t,)| t).collect();
        let mut synced = SyncReport { keys: batch.len(), absorbed: 0 };
        let mut tracked = self.tracked.lock();
        for (((group, peer), sent), total) in batch.into_iter().zip(totals) {
            // Others' usage since the last read: what the counter grew by, less this node's push. A
            // counter that expired and restarted counts from zero.
            let before = if total >= sent.last_total + sent.unpushed { sent.last_total } else { 0 };
            let others = total.saturating_sub(before).saturating_sub(sent.unpushed);
            if let Some(t) = tracked.get_mut(&(group.clone(), peer.clone())) {
                // Only a sync drains usage into `unpushed`, and syncs never overlap.
                t.unpushed = t.unpushed.saturating_sub(sent.unpushed);
                t.last_total = total;
                if others > 0 {
                    t.touched = now;
                }
            }
            if others > 0 && limiter.absorb(&peer, &group, others).is_ok() {
                synced.absorbed += others;
            }
        }
        Ok(synced)
    }
}

/// Sync mode as a store: this process decides, on the limiter's own states; the syncer shares the usage.
#[derive(Debug)]
pub struct Synced {
    limiter: Arc<Limiter>,
    syncer: Arc<Syncer>,
}

impl Synced {
    /// Starts syncing `limiter` (held weakly by the timer: its task ends with the store) every
    /// `spec.sync_interval`.
    ///
    /// # Errors
    /// A bad URL or option.
    pub fn open(limiter: Arc<Limiter>, spec: &Spec) -> Result<Self> {
        let client = Client::open(&spec.settings, script::DECIDE)?;
        let syncer = Syncer::new(client, spec.settings.prefix.clone());
        syncer.start(Arc::downgrade(&limiter), spec.sync_interval.unwrap_or(Duration::from_secs(1)));
        Ok(Self { limiter, syncer })
    }
}

/// The limiter's own states decide (the defaults); the syncer shares the usage and forgets it on reset.
impl StateStore for Synced {
    fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    fn reset(&self, peer: Option<&str>) -> Result<()> {
        self.syncer.reset(&self.limiter, peer).map_err(|failure| reset_failed(&failure))
    }

    fn health(&self) -> HealthReport {
        self.syncer.health.report()
    }

    fn sync_now(&self) -> Result<SyncReport> {
        self.syncer.sync_now(&self.limiter).map_err(|f| Error::backend(f.0))
    }
}
