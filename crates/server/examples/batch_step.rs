//! Time of one batched decode step (`Model::forward_batch`) at n = 1, 2, 4, 8, 16
//! sequences (context 128 each), versus `Model::forward` for one token: what the
//! server's continuous batching can gain over serial decoding.
//!
//! Usage: cargo run --release -p gpack-server --example batch_step -- MODEL.gguf|.gpack
//! (an f16 KV cache, as `gpack serve`; GPACK_KV_F32=1 for f32)

use gpack_runtime::Scratch;
use gpack_runtime::{Logits, Model};
use gpack_server::Loaded;
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("usage: batch_step MODEL");
    let loaded = Loaded::open(path.as_ref(), None).expect("loading");
    let w = loaded.weights();
    let model = Model::load_with(
        w,
        &gpack_runtime::LoadOptions {
            kv: if std::env::var("GPACK_KV_F32").is_err() {
                gpack_runtime::KvTypes::F16
            } else {
                gpack_runtime::KvTypes::F32
            },
            ..gpack_runtime::LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}"))
        },
    )
    .unwrap();
    let bm = &model;
    let prompt: Vec<u32> = (0..128).map(|i| 100 + i as u32).collect();
    let steps = 32;
    let mut st = model.new_state(512);
    model.forward(&mut st, &prompt, Logits::Last).unwrap();
    let t = Instant::now();
    for i in 0..steps {
        model.forward(&mut st, &[200 + i], Logits::Last).unwrap();
    }
    let single = t.elapsed().as_secs_f64() / steps as f64;
    println!("Model::forward 1 token: {:.2} ms", single * 1e3);
    for n in [1usize, 2, 4, 8, 16] {
        let mut seqs: Vec<_> = (0..n).map(|_| bm.new_sequence(512)).collect();
        let mut sc = Scratch::default();
        let mut refs: Vec<_> = seqs.iter_mut().collect();
        for r in refs.iter_mut() {
            bm.forward_batch(&mut sc, std::slice::from_mut(r), &[&prompt[..]], &[true])
                .unwrap();
        }
        let want = vec![true; n];
        let t = Instant::now();
        for i in 0..steps {
            let tok = [200 + i];
            let toks: Vec<&[u32]> = (0..n).map(|_| &tok[..]).collect();
            bm.forward_batch(&mut sc, &mut refs, &toks, &want).unwrap();
        }
        let step = t.elapsed().as_secs_f64() / steps as f64;
        println!(
            "forward_batch n={n:2}: {:.2} ms/step · {:.1} tok/s aggregate · {:.2}x serial",
            step * 1e3,
            n as f64 / step,
            n as f64 * single / step
        );
    }
}
