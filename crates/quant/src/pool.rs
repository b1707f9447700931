//! A persistent thread pool for the row-parallel kernels.
//!
//! The runtime calls `matvec` ~900 times per token (SmolLM2-135M) at 150+
//! tokens/s, i.e. a call every ~7 µs, so the fork/join cost must be well under
//! a microsecond. Workers spin on an epoch word for a while after each job
//! (so back-to-back calls find them awake), then park on a condvar. The
//! caller publishes a job, works on it too, and waits for the last task.
//!
//! Protocol: one `AtomicU64` packs `epoch << 32 | n_tasks << 16 | next_task`.
//! A job is published by storing its descriptor pointer, then the new word
//! (Release). A thread claims task `i` by a CAS on the whole word, and only
//! then loads the descriptor pointer: the job cannot finish before the
//! claimed task does, so that pointer is this job's. (A first version read the
//! pointer before claiming, and a stale worker could pair the next job's
//! descriptor with the previous epoch's word in the window between the two
//! stores: a use-after-return, caught by the pool tests.) The caller waits
//! until `done == n_tasks`, after which no thread touches the descriptor.
//!
//! Panics: every task runs inside `catch_unwind`, and `done` is counted
//! whether it returned or panicked, so the caller's wait always ends and its
//! frame (holding the job) is never popped while another thread still runs a
//! task of it. The first panic's payload is kept and re-raised on the calling
//! thread once all tasks have finished (`resume_unwind`): to the caller a
//! panicking task looks like an ordinary panic of `run`, which it can catch
//! (the server isolates a failed step that way), and the pool stays usable.
//! An earlier version aborted the process instead (issue 15). `catch_unwind`
//! costs nothing on the non-panicking path (an unwinding landing pad, no
//! allocation); the caller pays one relaxed load of a flag per job.
//!
//! Perf log (2-core AMD EPYC VM, AVX-512 path, `examples/pool_latency.rs`,
//! rounds of back-to-back calls; the machine had a load average of 8-9 from
//! parallel builds, so medians are noisy and the minimum is the better guide):
//!
//! | matvec          | this pool min / median | rayon min / median | 1 thread min / median |
//! |-----------------|------------------------|--------------------|-----------------------|
//! | Q4_1 576×576    | 5.4 / 7.4 µs           | 13.9 / 18.4 µs     | 7.0 / 7.1 µs          |
//! | Q8_0 576×576    | 4.4 / 5.6 µs           | 11.6 / 17.2 µs     | 4.5 / 5.3 µs          |
//! | Q4_1 1536×576   | 10.6 / 18.0 µs         | 26.1 / 34.9 µs     | 17.2 / 17.5 µs        |
//! | Q8_0 4096×4096  | 126 / 279 µs           | 145 / 453 µs       | 312 / 425 µs          |
//!
//! Rayon's fork/join costs ~10 µs per call here (its workers go to sleep
//! between calls), more than a SmolLM2 matvec itself, so the pool stays.
//! Rejected: workers calling `yield_now` while spinning (on the loaded machine
//! the yielding worker lost its core for whole time slices and big matvecs
//! ran at single-thread speed); 96 KiB tasks / 256 KiB parallel threshold
//! (1536×576 then ran on one thread: 17.5 µs vs 10.6 µs). Kept: 32 KiB
//! minimum per task, ~4 tasks per thread, calls under 96 KiB on the caller
//! alone (`kernels::split_rows`). When the gap between calls exceeds the
//! spin, workers park and the next call pays a futex wake-up.
//!
//! Spin time (criterion `matvec_mt`, i8sym, load average 9-10): 200 µs →
//! pool 18.7 µs / 3.47 ms / 1.86 ms for 576², 49152×576, 4096² (rayon 32 µs /
//! 3.31 ms / 1.57 ms); 20 µs → pool 16.2 µs / 1.76 ms / 1.21 ms (rayon 20 µs /
//! 3.64 ms / 1.67 ms): on an oversubscribed machine a long-spinning worker is
//! preempted mid-task more often. Default 50 µs (covers the gaps between the
//! matvecs of one decoding step); `GPACK_SPIN_US` overrides it.
//!
//! `catch_unwind` around each task (replacing an abort-on-unwind guard):
//! `pool_latency` medians before / after, same binary profile, load average
//! ~5: Q4_1 576² 15.96 / 15.97 µs, Q8_0 576² 15.34 / 15.30 µs, Q4_1 1536×576
//! 41.6 / 42.5 µs, Q8_0 4096² 705 / 666 µs: no difference beyond the noise.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `word` = `epoch << 32 | n_tasks << 16 | next_task`.
const TASK_BITS: u32 = 16;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;
const EPOCH_SHIFT: u32 = 32;
/// How long an idle worker spins before parking, unless `GPACK_SPIN_US`
/// says otherwise (see the perf log above).
const SPIN_DEFAULT_US: u64 = 50;

fn spin_duration() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("GPACK_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(SPIN_DEFAULT_US);
        Duration::from_micros(us)
    })
}

struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
}

struct Shared {
    /// `epoch << 32 | n_tasks << 16 | next_task` (see the module docs).
    word: AtomicU64,
    /// The current job's descriptor (`*const Job` with its lifetime erased).
    job: AtomicPtr<Job<'static>>,
    /// Tasks finished (returned or panicked) in the current job.
    done: AtomicUsize,
    /// Whether a task of the current job panicked; `panic` then holds the
    /// first payload. Set before that task's `done` increment, read by the
    /// caller after it saw `done == n_tasks`.
    panicked: AtomicBool,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    /// Which of the pool's threads ran a task since [`Pool::take_threads_used`]
    /// last looked: `[0]` the calling side, `[i]` worker `i`. Each is set
    /// at most once per job by the thread it stands for (a load first, so a
    /// set flag costs a shared read per job, no write).
    ran: Box<[AtomicBool]>,
    wake: Condvar,
    shutdown: AtomicBool,
}

impl Shared {
    /// Notes that the thread of `slot` (0: the caller, else a worker) ran a task.
    fn mark_ran(&self, slot: usize) {
        if !self.ran[slot].load(Ordering::Relaxed) {
            self.ran[slot].store(true, Ordering::Relaxed);
        }
    }

    /// Claims and runs tasks of the job of `epoch` until none is left, on
    /// the thread of `slot` (0: the caller, else a worker).
    fn work(&self, epoch: u64, slot: usize) {
        let mut ran = false;
        loop {
            let cur = self.word.load(Ordering::Acquire);
            if cur >> EPOCH_SHIFT != epoch {
                return;
            }
            let n = (cur >> TASK_BITS) & TASK_MASK;
            let i = cur & TASK_MASK;
            if i >= n {
                return;
            }
            if self
                .word
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // The job of `epoch` cannot finish before task i (ours now)
                // does, and the next job's descriptor is stored only after this
                // one finished; so this load sees exactly this job's descriptor
                // (stored before the epoch was published, which our CAS
                // synchronizes with).
                let job = self.job.load(Ordering::Acquire);
                // SAFETY: `job` points to the live descriptor of this epoch's
                // job (above), alive until `done` reaches n, which needs our
                // increment below; `f` borrows from it no longer than that.
                let f = unsafe { (*job).f };
                // A panic must not skip the increment (the caller would wait
                // forever, or its frame holding the job could be popped while
                // other threads still run it): it is caught, kept for the
                // caller, and counted as finished.
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(i as usize))) {
                    self.keep_panic(payload);
                }
                // Before the increment: the caller, once it saw the last
                // one, sees this thread counted.
                if !ran {
                    ran = true;
                    self.mark_ran(slot);
                }
                self.done.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Keeps the first panic payload of the current job (later ones are dropped).
    #[cold]
    fn keep_panic(&self, payload: Box<dyn Any + Send>) {
        let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(payload);
        }
        self.panicked.store(true, Ordering::Relaxed);
    }

    /// The kept payload of the job that just finished, if a task panicked.
    #[cold]
    fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        self.panicked.store(false, Ordering::Relaxed);
        self.panic.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Test hook: `GPACK_TEST_PANIC_IN_POOL_JOB=N` makes task 0 of the pool's
/// N-th job (counted from 1, over the process) panic, so that the way a
/// task's panic reaches the caller is exercised from outside the process
/// (`crates/cli/tests/run.rs`). Read once.
fn injected_panic_job() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var("GPACK_TEST_PANIC_IN_POOL_JOB")
            .ok()?
            .parse()
            .ok()
    })
}

/// A persistent pool of `threads - 1` workers plus the calling thread.
pub struct Pool {
    shared: Arc<Shared>,
    run_lock: Mutex<()>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads)
            .finish()
    }
}

fn worker(shared: Arc<Shared>, slot: usize) {
    let spin = spin_duration();
    let mut seen = shared.word.load(Ordering::Acquire) >> EPOCH_SHIFT;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = shared.word.load(Ordering::Acquire) >> EPOCH_SHIFT;
            if e != seen {
                break e;
            }
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            let mut g = shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.sleepers.fetch_add(1, Ordering::SeqCst);
            while shared.word.load(Ordering::SeqCst) >> EPOCH_SHIFT == seen
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                g = shared.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
        };
        seen = epoch;
        shared.work(epoch, slot);
    }
}

impl Pool {
    /// A pool running jobs on `n_threads` threads in total (the caller
    /// included; `n_threads <= 1` runs everything on the caller).
    pub fn new(n_threads: usize) -> Pool {
        let threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            word: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            panic: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            ran: (0..threads).map(|_| AtomicBool::new(false)).collect(),
        });
        let workers = (1..threads)
            .filter_map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("gpack-quant-{i}"))
                    .spawn(move || worker(s, i))
                    .ok()
            })
            .collect::<Vec<_>>();
        let threads = workers.len() + 1;
        Pool {
            shared,
            run_lock: Mutex::new(()),
            workers,
            threads,
        }
    }

    /// A process-wide pool with one thread per logical CPU the process may
    /// use (`GPACK_THREADS` overrides): the pool of this crate's own tests,
    /// benchmarks and examples, and of [`crate::matvec_with`] and
    /// [`crate::matmul_with`]. The runtime does not use it: a model owns
    /// its pool (`gpack_runtime::LoadOptions::threads`) and passes it to
    /// the kernels' `*_on` and pool-taking entry points.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let n = std::env::var("GPACK_THREADS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            log::debug!("gpack-quant: thread pool with {n} threads");
            Pool::new(n)
        })
    }

    /// Threads a job runs on (workers + the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How many of the pool's threads ran a task of [`Pool::run`] since the
    /// last call (or since the pool was made), and forgets them: each worker
    /// that did, plus one for the calling side if a calling thread did (the
    /// caller's share of a job, or a job run on the caller alone). At most
    /// [`Pool::threads`]. A diagnostic: tests count with it that a model's
    /// kernels run on its own pool, on exactly its threads.
    pub fn take_threads_used(&self) -> usize {
        self.shared
            .ran
            .iter()
            .filter(|r| r.swap(false, Ordering::Relaxed))
            .count()
    }

    /// Runs `f(i)` for every `i in 0..n_tasks`, each exactly once, across the
    /// pool and the calling thread; returns when all have finished. A nested
    /// or concurrent call runs its tasks on the calling thread alone.
    ///
    /// # Panics
    /// If `n_tasks >= 2^16`, and if `f` panics: a task's panic, on any
    /// thread, is re-raised here (`resume_unwind` with the first payload)
    /// after every other task of the job has finished. On the caller-alone
    /// path (one thread, one task, nested or concurrent calls) the panic
    /// propagates at once, as from a plain loop. Either way the pool stays
    /// usable.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!((n_tasks as u64) < TASK_MASK, "too many tasks");
        if n_tasks == 0 {
            return;
        }
        if let Some(at) = injected_panic_job() {
            static JOBS: AtomicU64 = AtomicU64::new(0);
            if JOBS.fetch_add(1, Ordering::Relaxed) + 1 == at {
                let g = |i: usize| {
                    if i == 0 {
                        panic!("injected fault in a pool task (GPACK_TEST_PANIC_IN_POOL_JOB)");
                    }
                    f(i)
                };
                return self.run(n_tasks, &g);
            }
        }
        let guard = if self.threads > 1 && n_tasks > 1 {
            match self.run_lock.try_lock() {
                Ok(g) => Some(g),
                // The lock guards no data; a poisoned one is as good.
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        } else {
            None
        };
        let Some(guard) = guard else {
            self.shared.mark_ran(0);
            (0..n_tasks).for_each(f);
            return;
        };
        let sh = &*self.shared;
        let job = Job { f };
        sh.done.store(0, Ordering::Relaxed);
        sh.job
            .store(&job as *const Job as *mut Job<'static>, Ordering::Release);
        let epoch = ((sh.word.load(Ordering::Relaxed) >> EPOCH_SHIFT) + 1) & 0xFFFF_FFFF;
        sh.word.store(
            epoch << EPOCH_SHIFT | (n_tasks as u64) << TASK_BITS,
            Ordering::SeqCst,
        );
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = sh.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.wake.notify_all();
        }
        sh.work(epoch, 0);
        // Spin briefly for the last task; then yield, so that an oversubscribed
        // machine can schedule the worker we are waiting for.
        let mut spins = 0u32;
        while sh.done.load(Ordering::Acquire) < n_tasks {
            spins = spins.saturating_add(1);
            if spins < 2000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // `job` may now be dropped: every task is done, and no thread can claim
        // another task of this epoch. The Acquire load that saw the last
        // increment also sees a panic recorded before it.
        if sh.panicked.load(Ordering::Relaxed) {
            if let Some(payload) = sh.take_panic() {
                drop(guard); // unlocked before unwinding, so never poisoned
                resume_unwind(payload);
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
