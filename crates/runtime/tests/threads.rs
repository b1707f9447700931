//! A model's kernels run on the thread pool it owns (`LoadOptions::threads`,
//! issue 47): a forward of a model loaded with N threads runs its tasks on
//! exactly N threads, and models loaded together (a target and its draft
//! model or MTP block) share one pool, with the bits of a pool of their own.

use super::fixtures::testdata;
use gpack_runtime::{GgufWeights, LoadOptions, Logits, Model, Mtp, Threads};
use std::num::NonZeroUsize;
use std::sync::Arc;

fn llama() -> GgufWeights {
    GgufWeights::open(&testdata().join("tiny/llama/llama-q8_0.gguf")).unwrap()
}

fn threads(n: usize) -> LoadOptions {
    LoadOptions {
        threads: Threads::Count(NonZeroUsize::new(n).unwrap()),
        ..LoadOptions::default()
    }
}

/// A prompt long enough that attention splits into pool jobs of several
/// tasks per thread (the tiny model's matrices are too small to split).
fn prompt(n_vocab: usize) -> Vec<u32> {
    (0..384).map(|i| ((i * 37 + 11) % n_vocab) as u32).collect()
}

fn last_logits(m: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut s = m.new_state(tokens.len());
    m.forward(&mut s, tokens, Logits::Last).unwrap().to_vec()
}

/// `--threads N` (`Threads::Count(N)`): the model's pool has N threads, and
/// the threads that ran its kernels' tasks during one forward, counted by
/// the pool, are exactly N: its workers and the calling thread, no other
/// pool's. A forward is repeated until one had every thread take a task
/// (on a loaded machine a parked worker can miss a short job); the count
/// never exceeds N. Each forward gives the bits of a 1-thread model.
#[test]
fn a_forward_runs_on_exactly_the_threads_asked_for() {
    let w = llama();
    let one = Model::load_with(&w, &threads(1)).unwrap();
    let p = prompt(one.config.n_vocab);
    let want = last_logits(&one, &p);
    for n in 1..=3 {
        let m = Model::load_with(&w, &threads(n)).unwrap();
        assert_eq!(m.pool().threads(), n);
        assert_eq!(m.pool().take_threads_used(), 0, "no forward yet");
        let mut counts = Vec::new();
        for _ in 0..1000 {
            let got = last_logits(&m, &p);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{n} threads"
            );
            let used = m.pool().take_threads_used();
            assert!(used <= n, "{used} threads ran tasks of a {n}-thread pool");
            counts.push(used);
            if used == n {
                break;
            }
        }
        eprintln!("{n} threads: the forwards ran on {counts:?} threads");
        assert_eq!(
            counts.last(),
            Some(&n),
            "{n} threads asked for; forwards ran on {counts:?}"
        );
    }
    // The default: a pool of its own, of `default_threads()`.
    let m = Model::load(&w).unwrap();
    assert_eq!(m.pool().threads(), gpack_runtime::default_threads());
    assert!(!Arc::ptr_eq(m.pool(), one.pool()));
}

/// A second model loaded with `Threads::Shared(first.pool())` runs on the
/// first one's pool (its forwards' tasks are counted there), gives the bits
/// it gives on a pool of its own, and keeps the pool alive after the first
/// model is dropped. An MTP block loaded the same way shares its trunk's.
#[test]
fn models_loaded_together_share_one_pool() {
    let w = llama();
    let target = Model::load_with(&w, &threads(2)).unwrap();
    let shared = LoadOptions {
        threads: Threads::Shared(Arc::clone(target.pool())),
        ..LoadOptions::default()
    };
    let draft = Model::load_with(&w, &shared).unwrap();
    assert!(Arc::ptr_eq(target.pool(), draft.pool()));
    let alone = Model::load_with(&w, &threads(2)).unwrap();
    assert!(!Arc::ptr_eq(target.pool(), alone.pool()));
    let p = prompt(draft.config.n_vocab);
    let want = last_logits(&alone, &p);
    assert_eq!(target.pool().take_threads_used(), 0);
    assert_eq!(last_logits(&draft, &p), want);
    assert!(
        target.pool().take_threads_used() >= 1,
        "the draft ran elsewhere"
    );
    assert_eq!(last_logits(&target, &p), want);
    drop(target);
    assert_eq!(last_logits(&draft, &p), want, "after the target is dropped");

    let g = GgufWeights::open(&testdata().join("tiny/glm4-mtp/glm4-mtp-f16.gguf")).unwrap();
    let m = Model::load_with(&g, &threads(2)).unwrap();
    let mw = m.mtp_weights(&g).expect("the fixture has an MTP block");
    let mtp = Mtp::load(
        &mw,
        &LoadOptions {
            threads: Threads::Shared(Arc::clone(m.pool())),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(Arc::ptr_eq(mtp.model().pool(), m.pool()));
}
