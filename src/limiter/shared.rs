//! A limiter whose states live in a shared region: what it reads back (the region's counts). Its
//! states say what limit wrote them, and decisions convert those another process wrote under other
//! limits (see `Shard::reconcile`).

use super::Limiter;
use crate::shared::layout::RegionSummary;

impl Limiter {
    /// What the whole shared region holds and has decided, by every process; `None` in memory.
    #[must_use]
    pub fn shared_summary(&self) -> Option<RegionSummary> {
        let region = self.states.shared_region()?;
        let names = self.current.lock().ids.clone_names();
        Some(region.summary(true, &|id| names.get(id as usize).filter(|n| !n.is_empty()).cloned()))
    }
}
