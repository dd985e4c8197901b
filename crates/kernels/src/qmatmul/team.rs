//! The threads that run the kernels' products. A decode step is about a hundred products of a
//! tenth of a millisecond each; on rayon the second thread went to sleep between them, and
//! waking it (a futex and an inter-processor interrupt, costly in a VM) took longer than its
//! share of the work: two threads were hardly faster than one. Here the helpers stay hot:
//! after each product they spin on a counter (then spin yielding the core, so that other
//! threads can run) for a few milliseconds, so the next product of the same step finds them
//! running, and only then block on a condition variable.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a helper spins for the next product before it blocks.
const HOT: Duration = Duration::from_millis(4);

/// How long of that it spins without giving up its core: the gaps between a decode step's
/// products are a few microseconds. After it, each spin yields, so that other threads (burn's
/// between the products of a prefill) get the core while the helper waits.
const SPIN: Duration = Duration::from_micros(50);

/// Pieces `0..n` of one product; each piece is run once, by whichever thread takes it.
type Task = dyn Fn(usize) + Sync;

struct Job {
    /// Borrowed from the caller of [`Team::run`], which outlives every call (see there).
    task: &'static Task,
    pieces: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

impl Job {
    /// Takes and runs pieces until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.pieces {
                return;
            }
            if catch_unwind(AssertUnwindSafe(|| (self.task)(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

#[derive(Default)]
struct Shared {
    /// The number of jobs published so far and the latest one.
    current: Mutex<(u64, Option<Arc<Job>>)>,
    /// The same count, read by spinning helpers without the lock.
    published: AtomicU64,
    wake: Condvar,
    /// Helpers blocked on `wake`.
    sleepers: AtomicUsize,
}

/// The calling thread plus `helpers` spinning threads.
pub struct Team {
    shared: Arc<Shared>,
    helpers: usize,
}

/// The process's team: as many threads as rayon's pool (`RAYON_NUM_THREADS`), the caller
/// being one of them.
pub fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| Team::new(rayon::current_num_threads().saturating_sub(1)))
}

impl Team {
    fn new(helpers: usize) -> Self {
        let shared = Arc::new(Shared::default());
        let mut started = 0;
        for i in 0..helpers {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("gemma-kernels-{i}"))
                .spawn(move || helper(&s));
            // Without a helper the products still run, on fewer threads.
            started += usize::from(spawned.is_ok());
        }
        Self {
            shared,
            helpers: started,
        }
    }

    /// Threads that run a product, the caller included.
    pub fn threads(&self) -> usize {
        self.helpers + 1
    }

    /// Runs `task(i)` for every `i` in `0..pieces` on the team and the calling thread, and
    /// returns when all have run.
    ///
    /// # Panics
    /// When a piece panicked (after every piece has run or panicked).
    pub fn run<'a>(&self, pieces: usize, task: &'a (dyn Fn(usize) + Sync + 'a)) {
        if self.helpers == 0 || pieces <= 1 {
            (0..pieces).for_each(task);
            return;
        }
        // SAFETY: the borrow is widened to 'static only for the helpers' view of this job.
        // They call `task` only for a piece they claimed below `pieces`, and this function
        // returns only once every claimed piece has finished (`done == pieces`; a panic in a
        // piece is caught in `work` and counted as finished), so no call outlives the borrow.
        // A helper that still holds the job afterwards finds no piece left and never calls it.
        #[allow(unsafe_code)]
        let task =
            unsafe { std::mem::transmute::<&'a (dyn Fn(usize) + Sync + 'a), &'static Task>(task) };
        let job = Arc::new(Job {
            task,
            pieces,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        });
        {
            let mut cur = self.lock();
            cur.0 += 1;
            cur.1 = Some(job.clone());
            self.shared.published.store(cur.0, Ordering::Release);
        }
        if self.shared.sleepers.load(Ordering::Acquire) > 0 {
            self.shared.wake.notify_all();
        }
        job.work();
        while job.done.load(Ordering::Acquire) < pieces {
            std::hint::spin_loop();
        }
        // Another caller (two models, or tests in parallel) may have published since: only this
        // job leaves the slot. Each caller runs whatever pieces of its own job no helper took.
        let mut cur = self.lock();
        if cur.1.as_ref().is_some_and(|j| Arc::ptr_eq(j, &job)) {
            cur.1 = None;
        }
        drop(cur);
        assert!(
            !job.panicked.load(Ordering::Relaxed),
            "a kernel panicked on a helper thread"
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<Arc<Job>>)> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A helper's loop: spin while hot, block when cold, run each published job's pieces.
fn helper(s: &Shared) {
    let mut seen = 0u64;
    loop {
        let since = Instant::now();
        let mut spins = 0u32;
        let mut yielding = false;
        while s.published.load(Ordering::Acquire) == seen {
            spins = spins.wrapping_add(1);
            if yielding {
                if since.elapsed() > HOT {
                    break;
                }
                std::thread::yield_now();
            } else {
                if spins.is_multiple_of(256) && since.elapsed() > SPIN {
                    yielding = true;
                }
                std::hint::spin_loop();
            }
        }
        let job = {
            let mut cur = s.current.lock().unwrap_or_else(PoisonError::into_inner);
            while cur.0 == seen {
                s.sleepers.fetch_add(1, Ordering::AcqRel);
                cur = s.wake.wait(cur).unwrap_or_else(PoisonError::into_inner);
                s.sleepers.fetch_sub(1, Ordering::AcqRel);
            }
            seen = cur.0;
            cur.1.clone()
        };
        if let Some(job) = job {
            job.work();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_runs_once_on_a_team_hot_or_cold() {
        let team = Team::new(2);
        for round in 0..50 {
            if round == 25 {
                std::thread::sleep(HOT * 2);
            }
            let hits: Vec<AtomicUsize> = (0..97).map(|_| AtomicUsize::new(0)).collect();
            team.run(97, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "round {round}"
            );
        }
    }

    #[test]
    fn callers_on_several_threads_each_get_all_their_pieces() {
        let team = Team::new(1);
        std::thread::scope(|s| {
            for caller in 0..3 {
                let team = &team;
                s.spawn(move || {
                    for round in 0..200 {
                        let hits: Vec<AtomicUsize> = (0..13).map(|_| AtomicUsize::new(0)).collect();
                        team.run(13, &|i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(
                            hits.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                            "caller {caller} round {round}"
                        );
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_piece_is_reported_to_the_caller() {
        let team = Team::new(1);
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(8, &|i| assert!(i != 5, "piece five"));
        }));
        assert!(r.is_err());
        // The team still works afterwards.
        let n = AtomicUsize::new(0);
        team.run(8, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }
}
