//! `convert --imatrix`: an importance matrix read, checked against the
//! model, and handed to the quantizers row by row, as llama-quantize
//! `--imatrix` uses one (`src/llama-quant.cpp`): each quantized tensor
//! gets its own entry's weights (a stacked-expert tensor, expert `e`'s
//! slice of them); a tensor without an entry is quantized without.
//!
//! Stricter than llama-quantize where it would only log: an entry naming
//! no tensor of the model is an error (the matrix is another model's), as
//! is a length that is not the tensor's columns × experts (llama-quantize
//! refuses that too, but for `token_embd.weight`, whose entry it ignores:
//! so does this) and a non-finite value. All before the output exists.

use crate::{Error, ImatrixProblem};
use gpack_ingest::imatrix::Imatrix;
use gpack_ingest::Source;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The per-column weights of every tensor the matrix covers.
pub(super) struct Importance {
    /// The file (for messages).
    pub file: PathBuf,
    /// Tensor name → `ne0 × n_matrices` weights (llama-quantize's).
    weights: HashMap<String, Vec<f32>>,
}

/// One run of a stored tensor's rows and the weights they get.
pub(super) type Run<'a> = (u64, Option<&'a [f32]>);

impl Importance {
    /// Reads `file` and checks it against `source`.
    pub fn load(file: &Path, source: &Source) -> Result<Importance, Error> {
        let im = Imatrix::read(file)?;
        im.check_finite(file)?;
        let mismatch = |problem| Error::ImatrixMismatch {
            file: file.to_path_buf(),
            problem,
        };
        let total = im.entries.len();
        let mut unknown = Vec::new();
        let mut weights = HashMap::new();
        for (name, w) in im.weights() {
            let Some(t) = source.tensor(name) else {
                unknown.push(name.to_string());
                continue;
            };
            let cols = t.dims.first().copied().unwrap_or(0);
            let matrices = t.dims.get(2).copied().unwrap_or(1);
            let expected = cols.saturating_mul(matrices);
            if w.len() as u64 != expected {
                if name == "token_embd.weight" {
                    continue;
                }
                return Err(mismatch(ImatrixProblem::Length {
                    name: name.to_string(),
                    found: w.len(),
                    expected,
                    cols,
                    matrices,
                }));
            }
            weights.insert(name.to_string(), w);
        }
        if let Some(first) = unknown.first() {
            return Err(mismatch(ImatrixProblem::UnknownNames {
                count: unknown.len(),
                total,
                first: first.clone(),
            }));
        }
        Ok(Importance {
            file: file.to_path_buf(),
            weights,
        })
    }

    /// The weights of a stored tensor made of `members` (`(name, rows)` in
    /// row order: one tensor, or a fused group's), `cols` columns each;
    /// `expert`: which expert of a stacked tensor it is.
    pub fn runs<'a>(
        &'a self,
        members: &[(&str, u64)],
        cols: u64,
        expert: Option<u64>,
    ) -> Vec<Run<'a>> {
        members
            .iter()
            .map(|&(name, rows)| {
                let w = self.weights.get(name).and_then(|w| {
                    let (c, e) = (cols as usize, expert.unwrap_or(0) as usize);
                    w.get(e * c..(e + 1) * c)
                });
                (rows, w)
            })
            .collect()
    }
}

/// The runs of `members` under `im` (none without an importance matrix).
pub(super) fn runs<'a>(
    im: Option<&'a Importance>,
    members: &[(&str, u64)],
    cols: u64,
    expert: Option<u64>,
) -> Vec<Run<'a>> {
    im.map(|im| im.runs(members, cols, expert))
        .unwrap_or_default()
}
