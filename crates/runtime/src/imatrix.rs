//! llama-imatrix's statistics, collected by an [`Observer`] of gpack's own
//! forward pass: for every weight matrix, per column, the sum of the
//! squared input activations and their plain sum, and the number of input
//! rows (`tools/imatrix/imatrix.cpp` `collect_imatrix`: a dense weight has
//! one count; a stacked-expert weight one per expert, each row routed to an
//! expert counted once for it). f32 accumulators, rows added in order, as
//! there.

use crate::observe::{MatmulInput, Observer};
use gpack_ingest::imatrix::{Entry, Imatrix};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Why statistics could not be collected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// A weight was shown with two different shapes.
    #[error("{name}: inputs of {found} columns × {found_mats} matrices after {cols} × {mats}")]
    Shape {
        /// The weight.
        name: String,
        /// Columns first seen.
        cols: usize,
        /// Matrices first seen.
        mats: usize,
        /// Columns now.
        found: usize,
        /// Matrices now.
        found_mats: usize,
    },
    /// A non-finite activation (llama-imatrix stops on these too).
    #[error("{name}: a non-finite input value (the model's activations overflowed)")]
    NonFinite {
        /// The weight.
        name: String,
    },
}

#[derive(Debug)]
struct Stats {
    cols: usize,
    sum2: Vec<f32>,
    sum: Vec<f32>,
    counts: Vec<i64>,
}

/// Collects llama-imatrix's statistics from the forward passes of the
/// states it is set on ([`crate::State::set_observer`]).
#[derive(Debug, Default)]
pub struct Collector {
    stats: Mutex<(BTreeMap<String, Stats>, Option<CollectError>)>,
}

impl Observer for Collector {
    fn input(&self, m: MatmulInput<'_>) {
        let mut guard = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let (stats, error) = &mut *guard;
        if error.is_some() || m.cols == 0 {
            return;
        }
        let (e, mats) = m.expert.unwrap_or((0, 1));
        let rows = m.x.len() / m.cols;
        for name in m.weights {
            let s = stats.entry(name.clone()).or_insert_with(|| Stats {
                cols: m.cols,
                sum2: vec![0.0; m.cols * mats],
                sum: vec![0.0; m.cols * mats],
                counts: vec![0; mats],
            });
            if s.cols != m.cols || s.counts.len() != mats {
                *error = Some(CollectError::Shape {
                    name: name.clone(),
                    cols: s.cols,
                    mats: s.counts.len(),
                    found: m.cols,
                    found_mats: mats,
                });
                return;
            }
            let (sum2, sum) = (
                &mut s.sum2[e * m.cols..(e + 1) * m.cols],
                &mut s.sum[e * m.cols..(e + 1) * m.cols],
            );
            for x in m.x.chunks_exact(m.cols) {
                for ((a2, a), &v) in sum2.iter_mut().zip(sum.iter_mut()).zip(x) {
                    *a2 += v * v;
                    *a += v;
                }
            }
            s.counts[e] += rows as i64;
            if !sum2.iter().all(|v| v.is_finite()) {
                *error = Some(CollectError::NonFinite { name: name.clone() });
                return;
            }
        }
    }
}

impl Collector {
    /// A collector with nothing seen yet.
    pub fn new() -> Collector {
        Collector::default()
    }

    /// Weights seen so far.
    pub fn len(&self) -> usize {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).0.len()
    }

    /// Whether no weight was seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The statistics as an importance matrix (llama-imatrix's GGUF
    /// content): `datasets` the texts, `chunk_count` chunks of
    /// `chunk_size` tokens. Fails if collecting failed.
    pub fn finish(
        self,
        datasets: Vec<String>,
        chunk_count: u32,
        chunk_size: u32,
    ) -> Result<Imatrix, CollectError> {
        let (stats, error) = self.stats.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = error {
            return Err(e);
        }
        let entries = stats
            .into_iter()
            .map(|(name, s)| {
                let e = Entry {
                    sums: s.sum2,
                    activations: Some(s.sum),
                    counts: s.counts,
                };
                (name, e)
            })
            .collect();
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            chunk_size,
            legacy: false,
        })
    }
}
