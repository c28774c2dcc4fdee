//! The one way a Python `backend=` object becomes a store: `None` (this process, its heap),
//! `rk.Shared(...)` (this process, states in a region every worker maps) or `rk.Redis(...)` (Redis
//! decides, exactly or synced). The limiter is built here too, since where its states live follows
//! from the same object.

use std::sync::Arc;

use pyo3::prelude::*;

use super::args::type_name;
use super::backend::PyRedis;
use super::shared::PyShared;
use crate::clock::{Clock, RegionClock};
use crate::config::Config;
use crate::error::Error;
use crate::limiter::Limiter;
use crate::state_map::StatesIn;
use crate::store::Store;

/// The limiter of `config` on `clock` (`manual`: a test's `ManualClock`), and the store `backend`
/// names, deciding for it.
///
/// # Errors
/// `backend` is none of the three; the store cannot be opened (a bad URL, a region that cannot be made
/// or attached to), or the rules do not fit it; the limiter's own errors.
pub fn open_store(
    py: Python<'_>,
    backend: Option<&Bound<'_, PyAny>>,
    mut config: Config,
    clock: Clock,
    manual: bool,
) -> PyResult<Store> {
    let Some(backend) = backend.filter(|b| !b.is_none()) else {
        return Ok(Store::open(Arc::new(Limiter::new(config, clock, StatesIn::Heap)?), None)?);
    };
    if let Ok(redis) = backend.cast::<PyRedis>() {
        let spec = &redis.get().spec;
        // Sync mode pushes what each key admitted: the core must track it.
        config.track_usage = config.track_usage || Store::tracks_usage(Some(spec));
        let limiter = Arc::new(Limiter::new(config, clock, StatesIn::Heap)?);
        return Ok(Store::open(limiter, Some(spec))?);
    }
    if let Ok(shared) = backend.cast::<PyShared>() {
        let shared = shared.get();
        let needs_log = config.rules.longest_log();
        let region = py.detach(|| shared.open(config.max_keys, needs_log))?;
        // Every process reads one clock (the region's: see `RegionClock`), unless a test drives it.
        let clock = if manual { clock } else { Clock::Region(Arc::new(RegionClock::new(&region))) };
        let limiter = Limiter::new(config, clock, StatesIn::Region(region, shared.on_stall()))?;
        return Ok(Store::open(Arc::new(limiter), None)?);
    }
    let message = format!("must be a ratekeeper.Redis, a ratekeeper.Shared or None, got {}", type_name(backend));
    Err(Error::type_error("backend", message).into())
}
