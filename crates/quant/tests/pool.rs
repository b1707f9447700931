//! The thread pool runs every task exactly once, back to back, nested and
//! from several threads at once.

use gpack_quant::Pool;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn every_task_runs_exactly_once() {
    let pool = Pool::new(3);
    for n in [0usize, 1, 2, 3, 10, 1000] {
        for _ in 0..50 {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}

#[test]
fn after_parking_and_nested_and_concurrent() {
    let pool = Pool::new(2);
    let total = AtomicUsize::new(0);
    pool.run(4, &|_| {
        total.fetch_add(1, Ordering::Relaxed);
    });
    std::thread::sleep(std::time::Duration::from_millis(5)); // workers park
    pool.run(8, &|_| {
        // Nested: runs inline on this thread.
        pool.run(3, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(total.load(Ordering::Relaxed), 4 + 24);
    let c = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..200 {
                    pool.run(5, &|_| {
                        c.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    assert_eq!(c.load(Ordering::Relaxed), 4 * 200 * 5);
}

/// A task that panics, on a worker or on the caller, is re-raised to the
/// caller of `run` after the other tasks finished (the process does not
/// abort), and the pool keeps running jobs on all its threads afterwards.
// See: issue 15 (a pool task's panic aborted `gpack serve`).
#[test]
fn a_panicking_task_reaches_the_caller_and_the_pool_stays_usable() {
    let pool = Pool::new(3);
    assert_eq!(pool.threads(), 3);
    for bad in [0usize, 5, 63] {
        let ran = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(64, &|i| {
                if i == bad {
                    panic!("task {i} failed");
                }
                // Slow enough that the workers take some of the tasks.
                std::thread::sleep(std::time::Duration::from_micros(50));
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }));
        let payload = r.expect_err("the task's panic reaches the caller");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(msg, format!("task {bad} failed"));
        assert_eq!(ran.load(Ordering::Relaxed), 63, "the other tasks all ran");
    }
    // A panic on a worker thread (not the caller's): the first task a worker
    // runs panics. Retried in case a loaded machine left a job to the caller.
    let caller = std::thread::current().id();
    let mut from_worker = false;
    for _ in 0..100 {
        let fired = std::sync::atomic::AtomicBool::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(64, &|_| {
                if std::thread::current().id() != caller && !fired.swap(true, Ordering::Relaxed) {
                    panic!("worker task failed");
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            });
        }));
        if let Err(p) = r {
            assert_eq!(p.downcast_ref::<&str>(), Some(&"worker task failed"));
            from_worker = true;
            break;
        }
    }
    assert!(from_worker, "no worker ever ran a task");
    // Several tasks panicking: one panic reaches the caller.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(16, &|i| assert!(i % 2 == 0, "odd {i}"))
    }));
    assert!(r.is_err());
    // Still usable, with its workers: tasks run on more than one thread.
    let threads = std::sync::Mutex::new(std::collections::HashSet::new());
    let hits: Vec<AtomicUsize> = (0..256).map(|_| AtomicUsize::new(0)).collect();
    for _ in 0..20 {
        pool.run(256, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_micros(20));
        });
    }
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 20));
    assert!(
        threads.lock().unwrap().len() > 1,
        "the pool ran later jobs on the caller alone"
    );
}

/// `take_threads_used` counts the distinct threads that ran tasks (the
/// ids the tasks themselves record), at most the pool's threads, and
/// forgets them once read.
#[test]
fn take_threads_used_counts_the_threads_that_ran_tasks() {
    for n in 1..=4 {
        let pool = Pool::new(n);
        assert_eq!(pool.take_threads_used(), 0, "{n} threads, no job yet");
        let ids = std::sync::Mutex::new(std::collections::HashSet::new());
        // Slow tasks, so that every worker takes some (retried: a loaded
        // machine may leave a job to fewer threads).
        for _ in 0..50 {
            pool.run(4 * n, &|_| {
                ids.lock().unwrap().insert(std::thread::current().id());
                std::thread::sleep(std::time::Duration::from_micros(200));
            });
            if ids.lock().unwrap().len() == n {
                break;
            }
        }
        let seen = ids.lock().unwrap().len();
        assert_eq!(seen, n, "a pool of {n} ran its tasks on {seen} threads");
        assert_eq!(pool.take_threads_used(), seen);
        assert_eq!(pool.take_threads_used(), 0, "forgotten once read");
        // A job of one task runs on the caller alone.
        pool.run(1, &|_| {});
        assert_eq!(pool.take_threads_used(), 1);
    }
}
