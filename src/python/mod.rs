//! The Python boundary: the only module that uses pyo3. Docstrings for Python users live in
//! `python/ratekeeper/_core.pyi` (and, for `help()`, on the methods here).

mod aio;
mod args;
mod backend;
mod fetch;
mod limiter;
mod shared;
mod values;

pub use aio::PyCompletions;
pub use backend::PyRedis;
pub use fetch::{PyFetchJob, PyFetchQueue, PyFetchResult};
pub use limiter::PyLimiter;
pub use limiter::{PyReservation, PyTake};
pub use shared::{inspect_region, PyShared};
pub use values::{
    PyDecision, PyGroupPolicy, PyLimit, PyManualClock, PyQuotaInfo, PyQuotas, PyRate, PyResolution, PyRule,
};

#[pyo3::pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::{
        PyCompletions, PyDecision, PyFetchJob, PyFetchQueue, PyFetchResult, PyGroupPolicy, PyLimit, PyLimiter,
        PyManualClock, PyQuotaInfo, PyQuotas, PyRate, PyRedis, PyReservation, PyResolution, PyRule, PyShared, PyTake,
    };

    #[pymodule_export]
    use super::inspect_region;

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("NANOS_PER_SEC", crate::rate::NANOS_PER_SEC)?;
        if m.py().version_info() < (3, 10) {
            super::restore_signatures(m)?;
        }
        Ok(())
    }
}

/// Python 3.9's `PyType_FromSpec` (the only way the abi3 core can make a class) drops the
/// `Name(signature)\n--\n\n` line that pyo3 puts first in a class's doc, and with it the class's
/// `__text_signature__`, which `inspect.signature` reads (and with it `help()` and the config file's
/// `[backend]` keys). 3.10 keeps it. On 3.9 each class with a constructor gets it back as `__signature__`.
fn restore_signatures(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    use pyo3::impl_::pyclass::PyClassImpl;
    use pyo3::prelude::*;

    fn restore<T: PyClassImpl + pyo3::PyTypeInfo>(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        let doc = T::DOC.to_string_lossy();
        let Some(signature) = doc.split_once("\n--\n\n").and_then(|(head, _)| head.find('(').map(|i| &head[i..]))
        else {
            return Ok(());
        };
        let inspect = py.import("inspect")?;
        let class = py.get_type::<T>();
        let signature =
            inspect.getattr("_signature_fromstr")?.call1((inspect.getattr("Signature")?, &class, signature))?;
        class.setattr("__signature__", signature)
    }
    macro_rules! restore_all {
        ($($class:ty),*) => { $(restore::<$class>(m)?;)* };
    }
    restore_all!(
        PyCompletions,
        PyDecision,
        PyFetchJob,
        PyFetchQueue,
        PyFetchResult,
        PyGroupPolicy,
        PyLimit,
        PyLimiter,
        PyManualClock,
        PyQuotaInfo,
        PyQuotas,
        PyRate,
        PyRedis,
        PyReservation,
        PyResolution,
        PyRule,
        PyShared,
        PyTake
    );
    Ok(())
}
