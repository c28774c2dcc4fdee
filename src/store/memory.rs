//! The in-memory store: the limiter's own lock-striped state map decides (every default of
//! `StateStore`).

use super::StateStore;

/// States in this process's memory; nothing to wait for, nothing to fail.
#[derive(Debug, Default, Clone, Copy)]
pub struct Memory;

impl StateStore for Memory {}
