//! `cargo run --release -p gpack-runtime --example spec_probe -- MODEL.gpack [PREFIX]`
//!
//! What speculative decoding's verification costs on a model: the time of
//! one forward of k tokens (k = 1 is plain decoding; k = 1 + drafts is one
//! check) after a PREFIX-token prefix (default 32; an edit prompt puts its
//! checks ~800 tokens deep), median of 15, and whether the logits of a
//! batched 8-token forward equal eight one-token forwards bit for bit (the
//! property that makes speculative output identical to plain decoding).
use gpack_runtime::{GpackWeights, Logits, Model};
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: spec_probe MODEL.gpack");
    let w = GpackWeights::open(std::path::Path::new(&path)).expect("opening the model");
    let model = Model::load_with(
        &w,
        &gpack_runtime::LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}")),
    )
    .expect("loading the model");
    let nv = model.config.n_vocab as u32;
    // The prefix (the depth the checks run at): 32 tokens unless given.
    let prefix: usize = std::env::args()
        .nth(2)
        .map_or(32, |a| a.parse().expect("PREFIX is a number of tokens"));
    let toks: Vec<u32> = (0..prefix as u32 + 32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % nv)
        .collect();
    let mut st = model.new_state(prefix + 64);
    model
        .forward(&mut st, &toks[..prefix], Logits::Last)
        .unwrap();
    let base = st.pos();
    let batched = model
        .forward(&mut st, &toks[prefix..prefix + 8], Logits::All)
        .unwrap()
        .to_vec();
    st.truncate(base);
    let mut seq = Vec::new();
    for &t in &toks[prefix..prefix + 8] {
        seq.extend_from_slice(model.forward(&mut st, &[t], Logits::Last).unwrap());
    }
    println!("batched == one by one: {}", batched == seq);
    let mut t1 = 0.0;
    for k in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16] {
        let mut ts = Vec::new();
        for _ in 0..15 {
            st.truncate(base);
            let t = Instant::now();
            model
                .forward(&mut st, &toks[prefix..prefix + k], Logits::All)
                .unwrap();
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ts.sort_by(f64::total_cmp);
        let med = ts[ts.len() / 2];
        if k == 1 {
            t1 = med;
        }
        println!(
            "k={k:2} forward median {med:.2} ms ({:.2}x one token; min {:.2}, max {:.2})",
            med / t1,
            ts[0],
            ts[ts.len() - 1]
        );
    }
}
