//! ratekeeper's core: a lock-striped rate limiter in plain Rust. Only `python` uses pyo3.

pub mod adaptive;
pub mod algorithm;
pub mod backend;
pub mod clock;
pub mod config;
pub mod error;
pub mod heavy_hitters;
pub mod limiter;
pub mod metrics;
pub mod outgoing;
pub(crate) mod probe;
pub mod python;
pub mod quota;
pub mod rate;
pub(crate) mod room;
pub mod rules;
pub mod server_words;
pub mod state_map;
pub mod store;
