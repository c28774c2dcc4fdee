//! `ratekeeper.httpx.Transport.handle_request` for the calls that take the short way, as one call into
//! the core (`ratekeeper._core._HttpxSend`): the admission, the inner transport's call and the reply's
//! reading, with no frame of Python's, no ticket object and one crossing of the boundary instead of two.

use pyo3::intern;
use pyo3::prelude::*;

use super::outgoing::{url_parts, PyOutgoing};

/// Sends an httpx request through `Outgoing`'s short way; whatever it cannot take (a host not heard
/// from, a call not admitted at once, a URL for Python to read, a reply that leaves work for Python)
/// goes to `ratekeeper.httpx`'s Python functions, bound to the engine and the inner transport.
#[pyclass(frozen, name = "_HttpxSend", module = "ratekeeper._core")]
pub struct PyHttpxSend {
    outgoing: Py<PyOutgoing>,
    /// The inner transport's `handle_request`.
    send: Py<PyAny>,
    /// `_handle`: the whole call in Python (a URL the core does not read).
    whole: Py<PyAny>,
    /// `_long_way`: the call sent the long way (`Outgoing._send`).
    long_way: Py<PyAny>,
    /// `_finished`: `(ticket, settled, response, request)`, a reply that left work for Python.
    finish: Py<PyAny>,
    /// `_failed`: `(ticket, error)`, a send that raised (which gives back a call that never reached the
    /// server).
    failed: Py<PyAny>,
}

#[pymethods]
impl PyHttpxSend {
    #[new]
    fn py_new(
        outgoing: Py<PyOutgoing>,
        send: Py<PyAny>,
        whole: Py<PyAny>,
        long_way: Py<PyAny>,
        finish: Py<PyAny>,
        failed: Py<PyAny>,
    ) -> Self {
        Self { outgoing, send, whole, long_way, finish, failed }
    }

    /// `Transport.handle_request`: set on the transport as this bound method, which Python calls
    /// without a tuple of arguments (a `__call__` would be given one).
    fn handle_request<'py>(&self, py: Python<'py>, request: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let parts = request.getattr(intern!(py, "url"))?.getattr(intern!(py, "_uri_reference"))?;
        let Some((host, path)) = url_parts(py, &parts)? else {
            return self.whole.bind(py).call1((request,));
        };
        let outgoing = self.outgoing.get();
        let Some(ticket) = outgoing.admit_heard(py, &host, Some(path.to_str()?))? else {
            return self.long_way.bind(py).call1((request,));
        };
        let response = match self.send.bind(py).call1((request,)) {
            Ok(response) => response,
            Err(error) => {
                self.failed.bind(py).call1((Bound::new(py, ticket)?, error.value(py)))?;
                return Err(error);
            }
        };
        let headers = response.getattr(intern!(py, "headers"))?.getattr(intern!(py, "_list"))?;
        let status: i64 = response.getattr(intern!(py, "status_code"))?.extract()?;
        match outgoing.settle_ticket(py, &ticket, &headers, status)? {
            None => Ok(response),
            Some(settled) => self.finish.bind(py).call1((Bound::new(py, ticket)?, settled, response, request)),
        }
    }
}
