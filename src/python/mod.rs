//! The Python boundary: the only module that uses pyo3. Docstrings for Python users live in
//! `python/ratekeeper/_core.pyi` (and, for `help()`, on the methods here).

mod aio;
mod args;
mod backend;
mod fetch;
mod fields;
mod httpx;
mod limiter;
mod outgoing;
mod scope;
mod shared;
mod stats;
mod store;
mod values;

pub use aio::PyCompletions;
pub use backend::PyRedis;
pub use fetch::{PyFetchJob, PyFetchQueue, PyFetchResult};
pub use httpx::PyHttpxSend;
pub use limiter::PyLimiter;
pub use limiter::{PyReservation, PyTake};
pub use outgoing::{_read_server_word, PyOutgoing, PyPlan, PyTicket};
pub use shared::{inspect_region, PyShared};
pub use values::{
    PyDecision, PyGroupPolicy, PyLimit, PyManualClock, PyQuotaInfo, PyQuotas, PyRate, PyResolution, PyRule,
};

#[pyo3::pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::{
        PyCompletions, PyDecision, PyFetchJob, PyFetchQueue, PyFetchResult, PyGroupPolicy, PyHttpxSend, PyLimit,
        PyLimiter, PyManualClock, PyOutgoing, PyPlan, PyQuotaInfo, PyQuotas, PyRate, PyRedis, PyReservation,
        PyResolution, PyRule, PyShared, PyTake, PyTicket,
    };

    #[pymodule_export]
    use super::{_read_server_word, inspect_region};

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("NANOS_PER_SEC", crate::rate::NANOS_PER_SEC)?;
        Ok(())
    }
}
