//! Where a limiter's adaptive gates live in its process: striped maps from a gate's key to its state.
//! A gate's lock is a leaf: nothing else is locked while it is held.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{Gate, GateView, Sample, Settings};

const STRIPES: usize = 16;

/// The gates of one limiter, at most `capacity` of them: past it an idle gate (nothing in flight), the
/// least recently used of its stripe, makes room; a stripe whose gates are all busy refuses a new one.
#[derive(Debug)]
pub struct HeapGates {
    stripes: Vec<Mutex<HashMap<u64, Gate, ahash::RandomState>>>,
    per_stripe: usize,
    /// Mixed into each gate's seed: this process's own on a real clock, so that the gates of a group in
    /// several worker processes do not probe in step (their limits pinned low at once); 0 on a manual
    /// clock, so that a run repeats.
    salt: u64,
}

impl HeapGates {
    #[must_use]
    pub fn new(capacity: usize, salt: u64) -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Mutex::new(HashMap::default())).collect(),
            per_stripe: capacity.div_ceil(STRIPES).max(1),
            salt,
        }
    }

    fn stripe(&self, key: u64) -> &Mutex<HashMap<u64, Gate, ahash::RandomState>> {
        #[allow(clippy::cast_possible_truncation)] // a stripe index
        let index = (key.rotate_left(17) as usize) % STRIPES;
        &self.stripes[index]
    }

    /// Runs `f` on the gate of `key` (set up from `settings` and `key` at `now` if new); `None` when it
    /// is new and its stripe is full of busy gates.
    pub fn with<T>(
        &self,
        (key, owner): (u64, u64),
        settings: &Settings,
        now: u64,
        f: impl FnOnce(&mut Gate) -> T,
    ) -> Option<T> {
        let mut gates = self.stripe(key).lock();
        if !gates.contains_key(&key) && gates.len() >= self.per_stripe {
            Self::make_room(&mut gates, self.per_stripe);
            if gates.len() >= self.per_stripe {
                return None;
            }
        }
        let gate = gates.entry(key).or_insert_with(|| {
            let mut fresh = Gate::fresh(settings, key ^ self.salt, now);
            fresh.owner = owner;
            fresh
        });
        gate.rebound(settings);
        Some(f(gate))
    }

    /// Drops the least recently used eighth of a full stripe's idle gates (nothing in flight): one scan
    /// of the stripe makes room for many new gates, where dropping one gate a scan cost a scan of every
    /// gate per new key (per-key limits with many keys: 160 µs a request at 100,000 keys).
    fn make_room(gates: &mut HashMap<u64, Gate, ahash::RandomState>, per_stripe: usize) {
        let mut idle: Vec<(u64, u64)> =
            gates.iter().filter(|(_, g)| g.in_flight() == 0).map(|(&k, g)| (g.last_used, k)).collect();
        if idle.is_empty() {
            return;
        }
        let dropped = (per_stripe / 8).clamp(1, idle.len());
        if dropped < idle.len() {
            idle.select_nth_unstable(dropped - 1);
        }
        for &(_, key) in &idle[..dropped] {
            gates.remove(&key);
        }
    }

    /// Runs `f` on the gate of `key` if there is one.
    pub fn existing<T>(&self, key: u64, f: impl FnOnce(&mut Gate) -> T) -> Option<T> {
        self.stripe(key).lock().get_mut(&key).map(f)
    }

    /// Takes `cost` permits of the gate `key`.
    #[must_use]
    pub fn admit(&self, key: (u64, u64), settings: &Settings, cost: u64, now: u64) -> bool {
        self.with(key, settings, now, |gate| gate.admit(settings, cost, now)).unwrap_or(false)
    }

    pub fn cancel(&self, key: u64, cost: u64) {
        self.existing(key, |gate| gate.cancel(cost));
    }

    pub fn release(&self, key: u64, settings: &Settings, cost: u64, sample: Option<Sample>, now: u64) {
        self.existing(key, |gate| gate.release(settings, cost, sample, now));
    }

    #[must_use]
    pub fn view(&self, key: u64, settings: &Settings) -> Option<GateView> {
        self.existing(key, |gate| gate.view(settings))
    }

    /// The views of every gate of `owner` (see `Gate::owner`), for `stats()`.
    #[must_use]
    pub fn views_of(&self, owner: u64, settings: &Settings) -> Vec<GateView> {
        let mut views = Vec::new();
        for stripe in &self.stripes {
            views.extend(stripe.lock().values().filter(|g| g.owner == owner).map(|g| g.view(settings)));
        }
        views
    }

    /// Forgets every gate (a `reset()`): what they learned starts over; permits in flight are forgotten.
    pub fn clear(&self) {
        for stripe in &self.stripes {
            stripe.lock().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::Controller;

    /// The `j`th key of the first stripe.
    fn key(j: u64) -> (u64, u64) {
        ((j << 4).rotate_right(17), 0)
    }

    fn settings() -> Settings {
        Settings::new(Controller::Aimd).checked(false).unwrap()
    }

    #[test]
    fn a_full_stripe_drops_its_least_recently_used_idle_gates_never_a_busy_one() {
        let (settings, gates) = (settings(), HeapGates::new(16 * STRIPES, 0));
        for j in 0..8 {
            assert!(gates.admit(key(j), &settings, 1, 0), "busy gate {j}");
        }
        for j in 8..16 {
            assert!(gates.admit(key(j), &settings, 1, j));
            gates.release(key(j).0, &settings, 1, None, j);
        }
        assert!(gates.admit(key(16), &settings, 1, 100));
        // An eighth of the stripe, the two idle gates used longest ago, made room.
        let kept: Vec<u64> = (0..17).filter(|&j| gates.view(key(j).0, &settings).is_some()).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16]);
        assert!(gates.admit(key(17), &settings, 1, 101));
        assert!(gates.view(key(10).0, &settings).is_some(), "room was left by the last drop");
    }

    #[test]
    fn a_stripe_full_of_busy_gates_refuses_a_new_one_and_takes_it_once_one_is_idle() {
        let (settings, gates) = (settings(), HeapGates::new(16 * STRIPES, 0));
        for j in 0..16 {
            assert!(gates.admit(key(j), &settings, 1, j));
        }
        assert!(!gates.admit(key(16), &settings, 1, 20));
        assert!(gates.view(key(16).0, &settings).is_none());
        gates.release(key(3).0, &settings, 1, None, 21);
        assert!(gates.admit(key(16), &settings, 1, 22));
        assert!(gates.view(key(3).0, &settings).is_none());
        assert!((0..17).filter(|&j| j != 3).all(|j| gates.view(key(j).0, &settings).is_some()));
    }
}
