//! The synchronous store, run off the async threads: a fixed number of threads, each owning one
//! store connection, take jobs from one queue.
//!
//! Why threads that own connections rather than `spawn_blocking`: a rusqlite connection is `Send`
//! but not `Sync`, and opening one per request would repeat the pragmas and throw away its
//! statement cache. A thread per connection keeps each connection on one thread for its life, the
//! number of open connections is `--workers`, and the async threads never wait on SQLite.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::store::ServiceStore;
use crate::error::{Error, Result};

type Job = Box<dyn FnOnce(&dyn ServiceStore) + Send>;

/// The store's threads and the queue that feeds them.
pub(crate) struct StoreThreads {
    queue: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl StoreThreads {
    /// Starts one thread per connection in `connections`.
    pub(crate) fn start(connections: Vec<Box<dyn ServiceStore>>) -> Result<StoreThreads> {
        let (sender, receiver) = std::sync::mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let mut threads = Vec::new();
        for (number, store) in connections.into_iter().enumerate() {
            let receiver = receiver.clone();
            let thread = std::thread::Builder::new()
                .name(format!("lab-store-{number}"))
                .spawn(move || run_jobs(store.as_ref(), &receiver))
                .map_err(|source| Error::Io {
                    action: format!("starting store thread {number}"),
                    source,
                })?;
            threads.push(thread);
        }
        Ok(StoreThreads {
            queue: Mutex::new(Some(sender)),
            threads: Mutex::new(threads),
        })
    }

    /// Runs `job` on one of the store's threads and waits for its result without blocking the
    /// async thread. `None` when the threads have stopped (the server is shutting down) or the
    /// job panicked.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(&dyn ServiceStore) -> T + Send + 'static,
    ) -> Option<T> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |store| {
            // The caller may have gone (its connection closed); the work is done all the same.
            let _ = reply.send(job(store));
        });
        {
            let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.as_ref()?.send(job).ok()?;
        }
        answer.await.ok()
    }

    /// Lets the threads finish the jobs already queued, then joins them; their connections close
    /// as they end.
    pub(crate) fn stop(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            // A panic in a job was printed when it happened; the other threads still stop.
            let _ = thread.join();
        }
    }
}

fn run_jobs(store: &dyn ServiceStore, receiver: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, so the threads take turns at
        // the queue and run their jobs side by side.
        let job = receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        match job {
            Ok(job) => {
                // A panicking job loses its own answer (its caller gets a 500), not the thread.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(store)));
            }
            // Every sender is gone and the queue is empty: the server is stopping.
            Err(_) => return,
        }
    }
}
