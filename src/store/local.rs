//! This process decides, on the limiter's own states: in its heap, or in a region of shared memory
//! every worker process of the machine maps (where the states live is the limiter's `StatesIn`; the
//! decisions are the same). Nothing waits on I/O; every default of `StateStore`.

use std::sync::Arc;

use super::StateStore;
use crate::limiter::Limiter;

#[derive(Debug)]
pub struct Local {
    limiter: Arc<Limiter>,
}

impl Local {
    #[must_use]
    pub const fn new(limiter: Arc<Limiter>) -> Self {
        Self { limiter }
    }
}

impl StateStore for Local {
    #[inline]
    fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }
}
