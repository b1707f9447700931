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
