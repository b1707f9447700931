#![no_main]
//! Fuzz the runtime's consumers of a .gpack's MetadataKv, TensorIndex and
//! tensor sections: `GpackWeights::from_gpack` (index, per-tensor views),
//! `Model::load` (hyperparameters from the metadata, every tensor's shape)
//! and, when both accept the file, one decode step of one token. None may
//! panic; whatever they accept must run.
//!
//! Seeds are whole small real .gpack files (fuzz/corpus/runtime_gpack).

use gpack_runtime::{Logits, Model};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = gpack_format::Gpack::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(w) = gpack_runtime::GpackWeights::from_gpack(g) else {
        return;
    };
    let _ = w.metadata().len();
    let Ok(m) = Model::load(&w) else { return };
    let n_vocab = m.config.n_vocab;
    let mut s = m.new_state(4);
    let Ok(logits) = m.forward(&mut s, &[0], Logits::Last) else {
        return;
    };
    assert_eq!(logits.len(), n_vocab);
});
