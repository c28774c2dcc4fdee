//! `Limiter.stats()`: the limiter's and its store's numbers as the dict Python reads.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::limiter::AdaptiveStats;
use crate::metrics::{LATENCY_BOUNDS_NS, WAIT_BOUNDS_NS};
use crate::store::{StateStore, Store};

/// What `stats()` answers for the limiter `store` decides for: counters by group, keys and memory,
/// quota fetches, the store's health, latency histograms, and a shared region's summary.
///
/// # Errors
/// Python could not build the dict (out of memory).
pub fn stats_dict<'py>(py: Python<'py>, store: &Store) -> PyResult<Bound<'py, PyDict>> {
    let limiter = store.limiter();
    let stats = limiter.stats();
    let groups = PyDict::new(py);
    for group in &stats.groups {
        let entry = PyDict::new(py);
        let limits = group
            .limits
            .iter()
            .map(|limit| {
                let item = PyDict::new(py);
                item.set_item("rate", limit.rate.map(|r| r.to_string()))?;
                item.set_item("burst", limit.burst)?;
                item.set_item("algorithm", limit.kind().name())?;
                Ok(item)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let c = &group.counters;
        entry.set_item("limits", limits)?;
        entry.set_item("policy", group.policy.name())?;
        entry.set_item("requests", c.requests)?;
        entry.set_item("allowed", c.allowed)?;
        entry.set_item("refused", c.refused)?;
        entry.set_item("delayed", c.delayed)?;
        entry.set_item("exempt", c.exempt)?;
        entry.set_item("keys", group.keys)?;
        entry.set_item("evictions", group.evictions)?;
        entry.set_item("reductions", c.reductions)?;
        entry.set_item("quota_fetches", c.quota_fetches)?;
        entry.set_item("quota_failures", c.quota_failures)?;
        entry.set_item("quota_unknown", c.quota_unknown)?;
        entry.set_item("dropped", group.dropped)?;
        entry.set_item("abandoned", c.abandoned)?;
        entry.set_item("waits", histogram(py, &WAIT_BOUNDS_NS, &c.waits.counts, c.waits.sum_ns)?)?;
        entry.set_item("adaptive", pyo3::types::PyList::empty(py))?;
        groups.set_item(&group.name, entry)?;
    }
    for gate in limiter.adaptive_stats() {
        let Some(entry) = groups.get_item(&gate.group)? else { continue };
        entry.get_item("adaptive")?.call_method1("append", (adaptive_dict(py, &gate)?,))?;
    }
    let out = PyDict::new(py);
    out.set_item("enabled", limiter.enabled())?;
    out.set_item("keys", stats.keys)?;
    out.set_item("max_keys", limiter.max_keys())?;
    out.set_item("evictions", stats.evictions)?;
    out.set_item("exempt", stats.exempt)?;
    out.set_item("memory_bytes", limiter.allocated_bytes())?;
    out.set_item("quota_records", stats.quota_records)?;
    let (queued, running) = limiter.fetches().load();
    out.set_item("quota_queue", queued)?;
    out.set_item("quota_running", running)?;
    let health = store.health();
    out.set_item("backend_errors", health.errors)?;
    out.set_item("backend_down", health.down)?;
    out.set_item("backend_outages", health.outages)?;
    out.set_item("standing_share", health.standing_share)?;
    let latency = limiter.latency();
    out.set_item("decision_seconds", histogram(py, &LATENCY_BOUNDS_NS, &latency.counts, latency.sum_ns)?)?;
    let backend = health.latency;
    out.set_item("backend_seconds", histogram(py, &LATENCY_BOUNDS_NS, &backend.counts, backend.sum_ns)?)?;
    out.set_item("groups", groups)?;
    let shared = match py.detach(|| limiter.shared_summary()) {
        None => None,
        Some(summary) => Some(super::shared::summary_dict(py, &summary)?),
    };
    out.set_item("shared", shared)?;
    Ok(out)
}

/// One adaptive limit's numbers: its permits now, requests in flight, the latency estimates (seconds;
/// None before known) and what it has learned from.
fn adaptive_dict<'py>(py: Python<'py>, gate: &AdaptiveStats) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let v = &gate.view;
    let seconds = |ns: f64| (ns > 0.0).then_some(ns / 1e9);
    out.set_item("controller", gate.controller)?;
    out.set_item("per", gate.per.name())?;
    out.set_item("limit", v.limit)?;
    out.set_item("in_flight", v.in_flight)?;
    out.set_item("baseline_latency", seconds(v.baseline_ns))?;
    out.set_item("recent_latency", seconds(v.recent_ns))?;
    out.set_item("probing", v.probing)?;
    out.set_item("gates", gate.gates)?;
    out.set_item("samples", v.samples)?;
    out.set_item("drops", v.drops)?;
    out.set_item("timeouts", v.timeouts)?;
    out.set_item("probes", v.probes)?;
    Ok(out)
}

/// A histogram as `stats()` gives it: `bounds` in seconds, `counts` per bucket (the last: above every
/// bound), `sum` in seconds and `count`.
fn histogram<'py>(py: Python<'py>, bounds_ns: &[u64], counts: &[u64], sum_ns: u64) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    #[allow(clippy::cast_precision_loss)] // bounds are round numbers far below 2^53 ns
    let bounds: Vec<f64> = bounds_ns.iter().map(|&ns| ns as f64 / 1e9).collect();
    out.set_item("bounds", bounds)?;
    out.set_item("counts", counts)?;
    #[allow(clippy::cast_precision_loss)]
    out.set_item("sum", sum_ns as f64 / 1e9)?;
    out.set_item("count", counts.iter().sum::<u64>())?;
    Ok(out)
}
