//! The clients' calls that take the short way (`Outgoing.__init__`), each as one call into the core:
//! `ratekeeper.httpx.Transport.handle_request` (`_HttpxSend`) and `ratekeeper.requests.Adapter.send`
//! (`_RequestsSend`). The admission, the client's own sending and the reply's reading, with no frame of
//! Python's, no ticket object and one crossing of the boundary instead of two.

use pyo3::exceptions::PyReferenceError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyWeakrefReference};
use smallvec::SmallVec;

use super::outgoing::{url_parts, PyOutgoing};

/// Sends an httpx request through `Outgoing`'s short way; whatever it cannot take (a host not heard
/// from, a call not admitted at once, a URL for Python to read, a reply that leaves work for Python)
/// goes to the transport's Python methods.
#[pyclass(frozen, name = "_HttpxSend", module = "ratekeeper._core")]
pub struct PyHttpxSend {
    outgoing: Py<PyOutgoing>,
    /// The inner transport's `handle_request`.
    send: Py<PyAny>,
    /// `Transport._handle`: the whole call in Python (a URL the core does not read).
    whole: Py<PyAny>,
    /// `Transport._long_way`: the call sent the long way (`Outgoing._send`).
    long_way: Py<PyAny>,
    /// `Transport._finished`: `(ticket, settled, response, request)`, a reply that left work for Python.
    finish: Py<PyAny>,
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
    ) -> Self {
        Self { outgoing, send, whole, long_way, finish }
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
        let response = self.send.bind(py).call1((request,))?;
        let headers = response.getattr(intern!(py, "headers"))?.getattr(intern!(py, "_list"))?;
        let status: i64 = response.getattr(intern!(py, "status_code"))?.extract()?;
        match outgoing.settle_ticket(py, &ticket, &headers, status)? {
            None => Ok(response),
            Some(settled) => self.finish.bind(py).call1((Bound::new(py, ticket)?, settled, response, request)),
        }
    }
}

/// Sends a `requests` request through `Outgoing`'s short way; a call not admitted at once (or the first
/// to its host), and a reply that leaves work for Python, go to the adapter's Python methods.
#[pyclass(frozen, name = "_RequestsSend", module = "ratekeeper._core")]
pub struct PyRequestsSend {
    outgoing: Py<PyOutgoing>,
    /// The adapter, weakly: it holds this (as its `send`).
    adapter: Py<PyWeakrefReference>,
    /// The `send` of the class after `Adapter` in the adapter's MRO (`super().send`).
    send: Py<PyAny>,
    /// `ratekeeper.requests._PLACES`, URL -> (host, path), and `_place`, which fills it.
    places: Py<PyDict>,
    place: Py<PyAny>,
    /// `Adapter._long_way`: `(adapter, request, *options)`, the call sent the long way.
    long_way: Py<PyAny>,
    /// `Adapter._finished`: `(adapter, ticket, settled, response, request, *options)`.
    finish: Py<PyAny>,
}

#[pymethods]
impl PyRequestsSend {
    #[new]
    fn py_new(
        outgoing: Py<PyOutgoing>,
        adapter: Py<PyWeakrefReference>,
        send: Py<PyAny>,
        places: Py<PyDict>,
        place: Py<PyAny>,
        long_way: Py<PyAny>,
        finish: Py<PyAny>,
    ) -> Self {
        Self { outgoing, adapter, send, places, place, long_way, finish }
    }

    /// `Adapter.send`: set on the adapter as this bound method; `options` are `HTTPAdapter.send`'s
    /// (`stream`, `timeout`, `verify`, `cert`, `proxies`), passed on as they came.
    #[pyo3(signature = (request, *options, **named))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        request: &Bound<'py, PyAny>,
        options: &Bound<'py, PyTuple>,
        named: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(adapter) = self.adapter.bind(py).upgrade() else {
            return Err(PyReferenceError::new_err("the ratekeeper.requests.Adapter this send was of is gone"));
        };
        let url = request.getattr(intern!(py, "url"))?;
        let place = match self.places.bind(py).get_item(&url)? {
            Some(place) => place,
            None if url.is_instance_of::<PyString>() => self.place.bind(py).call1((url,))?,
            None => self.place.bind(py).call1(("",))?,
        };
        let place = place.cast_into::<PyTuple>()?;
        let (host, path) = (place.get_item(0)?.cast_into::<PyString>()?, place.get_item(1)?);
        let sent = PyTuple::new(py, with_options([adapter.clone(), request.clone()], options))?;
        let outgoing = self.outgoing.get();
        let Some(ticket) = outgoing.admit_heard(py, &host, Some(path.cast::<PyString>()?.to_str()?))? else {
            return self.long_way.bind(py).call(sent, named);
        };
        let response = self.send.bind(py).call(sent, named)?;
        let headers = response.getattr(intern!(py, "headers"))?;
        // `CaseInsensitiveDict._store`, lower-case name -> (name, value); another mapping's items.
        let fields = match headers.getattr(intern!(py, "_store")) {
            Ok(store) => store,
            Err(_) => headers.call_method0(intern!(py, "items"))?,
        };
        let status: i64 = response.getattr(intern!(py, "status_code"))?.extract()?;
        match outgoing.settle_ticket(py, &ticket, &fields, status)? {
            None => Ok(response),
            Some(settled) => {
                let ticket = Bound::new(py, ticket)?.into_any();
                let head = [adapter, ticket, settled.into_any(), response, request.clone()];
                let finished = PyTuple::new(py, with_options(head, options))?;
                self.finish.bind(py).call(finished, named)
            }
        }
    }
}

/// `head` and then `options`, as the arguments of a call.
fn with_options<'py, const N: usize>(
    head: [Bound<'py, PyAny>; N],
    options: &Bound<'py, PyTuple>,
) -> SmallVec<[Bound<'py, PyAny>; 12]> {
    head.into_iter().chain(options.iter()).collect()
}
