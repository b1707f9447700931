//! `gpack_runtime::batch` against `Model::forward` on the real SmolLM2: the
//! batched multi-sequence step gives each sequence the logits it gets alone.

use gpack_runtime::Scratch;
use gpack_runtime::{GgufWeights, Logits, Model};
use std::process::Command;

#[test]
fn forward_batch_equals_model_forward_per_sequence() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/fetch-models.sh"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let gguf = String::from_utf8(out.stdout).unwrap();
    let w = GgufWeights::open(std::path::Path::new(gguf.trim())).unwrap();
    let model = Model::load(&w).unwrap();
    let bm = &model;
    let n_vocab = bm.config.n_vocab;
    let prompts: [&[u32]; 3] = [
        &[1, 504, 3458, 282],
        &[1, 2145],
        &[1, 9, 30, 42, 77, 100, 7],
    ];
    // Alone: prompt, then two decode steps with fixed tokens.
    let steps: [u32; 2] = [28, 314];
    let mut alone = Vec::new();
    for p in prompts {
        let mut st = model.new_state(64);
        let mut v = vec![model.forward(&mut st, p, Logits::Last).unwrap().to_vec()];
        for &t in &steps {
            v.push(model.forward(&mut st, &[t], Logits::Last).unwrap().to_vec());
        }
        alone.push(v);
    }
    // Together: one batched prefill of all three, then batched decode steps.
    let mut seqs: Vec<_> = (0..3).map(|_| bm.new_sequence(64)).collect();
    let mut sc = Scratch::default();
    let mut refs: Vec<_> = seqs.iter_mut().collect();
    let l = bm
        .forward_batch(&mut sc, &mut refs, &prompts, &[true; 3])
        .unwrap();
    let mut together = vec![vec![]; 3];
    for (i, t) in together.iter_mut().enumerate() {
        t.push(l[i * n_vocab..(i + 1) * n_vocab].to_vec());
    }
    for &s in &steps {
        let toks = [&[s][..], &[s][..], &[s][..]];
        let l = bm
            .forward_batch(&mut sc, &mut refs, &toks, &[true; 3])
            .unwrap();
        for (i, t) in together.iter_mut().enumerate() {
            t.push(l[i * n_vocab..(i + 1) * n_vocab].to_vec());
        }
    }
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        for (k, (x, y)) in a.iter().zip(t).enumerate() {
            let max = x
                .iter()
                .zip(y)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(max < 1e-3, "sequence {i} step {k}: max |diff| {max}");
            assert_eq!(
                gpack_runtime::argmax(x),
                gpack_runtime::argmax(y),
                "sequence {i} step {k}"
            );
        }
    }
    // A sequence that would overflow its context is refused, no cache changed.
    let long = vec![1u32; 64];
    let e = bm.forward_batch(&mut sc, &mut refs[..1], &[&long[..]], &[true]);
    assert!(e.is_err());
    assert_eq!(refs[0].pos(), prompts[0].len() + steps.len());
}
