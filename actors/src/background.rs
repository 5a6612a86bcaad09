//! Threads at the lowest CPU priority for derived work that may lag: the
//! offline summarizer's in-session window summaries and folds. They run
//! when the cores are not needed by the turns and wait when they are (a
//! saturated server acknowledges turns first; the summaries catch up
//! after), where the blocking pool's threads would take an equal share of
//! the cores from the async workers.

use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

/// The pool's queue; its threads (one per core) start with the first job.
static POOL: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

fn pool() -> &'static mpsc::Sender<Job> {
    POOL.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        for i in 0..n {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("recall-background-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        // One thread waits on the queue at a time; the
                        // lock is let go before the job runs.
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
            if let Err(err) = spawned {
                tracing::warn!(error = %err, "a background thread could not start");
            }
        }
        tx
    })
}

/// Runs `f` on a background thread; its result, or `None` if it panicked
/// (or no background thread could start).
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let out = std::panic::catch_unwind(AssertUnwindSafe(f)).ok();
        let _ = tx.send(out);
    });
    pool().send(job).ok()?;
    // Waited for on the blocking pool, as `spawn_blocking` work is: tokio's
    // paused clock (simulations, the evaluation, tests) does not jump ahead
    // while it runs, so an attempt timeout does not fire meanwhile.
    tokio::task::spawn_blocking(move || rx.recv().ok().flatten())
        .await
        .ok()
        .flatten()
}

/// The calling thread's nice value to 19, the lowest priority.
#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: `gettid` and `setpriority` take and return plain integers;
    // with `PRIO_PROCESS` and this thread's own id, Linux changes the nice
    // value of this thread alone. A failure leaves the priority as it was.
    let res = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
    if res != 0 {
        tracing::debug!("background thread priority unchanged");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_and_a_panic_is_none() {
        assert_eq!(run(|| 6 * 7).await, Some(42));
        let many: Vec<_> = (0..32).map(|i| run(move || i * 2)).collect();
        let out = futures::future::join_all(many).await;
        assert_eq!(out, (0..32).map(|i| Some(i * 2)).collect::<Vec<_>>());
        assert_eq!(run(|| -> u8 { panic!("boom") }).await, None);
        assert_eq!(run(|| 1).await, Some(1), "the pool survives a panic");
    }

    /// This thread's nice value.
    #[cfg(target_os = "linux")]
    fn nice() -> i32 {
        // SAFETY: as in `lower_priority`; `getpriority` reads a number.
        unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_threads_run_at_the_lowest_priority() {
        assert_eq!(run(nice).await, Some(19));
        // A thread starts at its creator's nice value: one started here
        // runs above 19 unless this process already runs at 19, and
        // `lower_priority` moves it there.
        let (before, after) = std::thread::spawn(|| {
            let before = nice();
            lower_priority();
            (before, nice())
        })
        .join()
        .unwrap();
        assert_eq!(after, 19, "from {before}");
        if before == 19 {
            eprintln!("this process runs at nice 19 already: the move is not shown");
        }
    }
}
