//! Completing asyncio futures from the Redis client's thread without taking the GIL there.
//!
//! A reply lands on the client's runtime thread. Taking the GIL there would wait for the event loop's
//! thread to let go of it (up to the 5 ms switch interval when the loop is busy). Instead the reply
//! is queued here and one byte is written to a pipe the loop watches (`loop.add_reader`); the loop
//! drains every queued reply in one callback, on its own thread, with the GIL it already holds.

use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::error::Error;
use crate::store::Answer;

/// A reply for the loop to hand to its future: the limiter that asked (to build the Python values), the
/// future, and what the decision came to.
pub struct Completion {
    pub limiter: Py<super::PyLimiter>,
    pub future: Py<PyAny>,
    pub answer: Result<Answer, Error>,
    pub request: super::limiter::Reserved,
}

/// The queue and the pipe's write end, shared with the client's runtime.
pub struct Sender {
    queue: Mutex<Vec<Completion>>,
    signaled: AtomicBool,
    writer: Mutex<PipeWriter>,
}

impl Sender {
    /// Queues `completion` and wakes the loop unless a wake-up is already on its way.
    pub fn send(&self, completion: Completion) {
        self.queue.lock().push(completion);
        if !self.signaled.swap(true, Ordering::AcqRel) {
            // One byte in an empty pipe never blocks; a loop that has gone away is not our failure.
            let _ = self.writer.lock().write_all(&[1]);
        }
    }
}

/// One event loop's channel: `loop.add_reader(channel.fileno(), channel.drain)`.
#[pyclass(frozen, name = "_Completions", module = "ratekeeper._core")]
pub struct PyCompletions {
    pub sender: Arc<Sender>,
    reader: Mutex<PipeReader>,
}

#[pymethods]
impl PyCompletions {
    #[new]
    fn py_new() -> PyResult<Self> {
        let (reader, writer) = std::io::pipe()?;
        let sender =
            Sender { queue: Mutex::new(Vec::new()), signaled: AtomicBool::new(false), writer: Mutex::new(writer) };
        Ok(Self { sender: Arc::new(sender), reader: Mutex::new(reader) })
    }

    fn fileno(&self) -> i32 {
        self.reader.lock().as_raw_fd()
    }

    /// Completes every queued future (called by the loop when the pipe is readable).
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        // Called only when readable: one byte is there. Order matters: the flag is cleared before the
        // queue is taken, so a reply queued after the take wakes the loop again.
        let mut byte = [0u8; 1];
        self.reader.lock().read_exact(&mut byte)?;
        self.sender.signaled.store(false, Ordering::Release);
        let completions = std::mem::take(&mut *self.sender.queue.lock());
        for completion in completions {
            let limiter = completion.limiter.get();
            let completed =
                limiter.complete_future(py, completion.future.bind(py), completion.answer, completion.request);
            if let Err(e) = completed {
                e.write_unraisable(py, None);
            }
        }
        Ok(())
    }
}
