//! The shared-memory store (issue 21): states that every worker process of one machine shares, in a
//! file mapped into each. This module holds the region; the store over it comes next.

pub mod lock;
pub mod region;
