//! The shared-memory store: the limiter's state map lives in a region every worker process of the
//! machine maps (see `shared`), so the core's own decisions (every default of `StateStore`) are
//! region-wide; nothing waits on I/O, and the region's robust locks replace nothing of the pipeline.

use super::StateStore;

/// States in a shared region, decided by this process's core under the region's locks.
#[derive(Debug, Default, Clone, Copy)]
pub struct Shared;

impl StateStore for Shared {}
