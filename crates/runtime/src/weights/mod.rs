//! The weight-store abstraction every model provider implements.
//!
//! A provider (the GGUF slow path in [`crate::gguf`], the zero-copy `.gpack`
//! and `.giw` readers) answers two questions: "what is metadata key K" and
//! "where is tensor N". Tensors come back as borrowed [`TensorRef`]s, so the
//! model graph (`Model<'w>`) borrows from the store and never owns weights.
//!
//! Why [`TensorRef::Native`] carries a row range: a fused q‖k‖v or gate‖up
//! tensor is stored once (its members' rows back to back, DESIGN.md "Native
//! weight layouts") and each member is served as a row range of it. The graph
//! recognises members that tile one view and then runs ONE matrix-vector call
//! over all of them (see `model.rs`, `Proj`).

pub mod expert_slice;
pub use expert_slice::ExpertSlice;

use crate::error::{Error, Result};
pub use gpack_quant::AlignedBuf;
use gpack_quant::{GgmlType, NativeView};

/// GGUF-style metadata key/value lookups (`<arch>.embedding_length`, …).
///
/// Integer getters accept any integer type that fits; float getters accept
/// f32 (and f64, rounded) where the provider can.
pub trait MetadataSource {
    /// A non-negative integer value.
    fn meta_u64(&self, key: &str) -> Option<u64>;
    /// A float value.
    fn meta_f32(&self, key: &str) -> Option<f32>;
    /// A UTF-8 string value.
    fn meta_str(&self, key: &str) -> Option<&str>;
    /// A boolean value.
    fn meta_bool(&self, key: &str) -> Option<bool>;
    /// An array of numbers or booleans (true = 1) as f64, if the provider
    /// has it (per-layer values such as gemma3n's `feed_forward_length`).
    fn meta_num_array(&self, _key: &str) -> Option<Vec<f64>> {
        None
    }
}

impl MetadataSource for gpack_ingest::Metadata {
    fn meta_u64(&self, key: &str) -> Option<u64> {
        self.get_u64(key)
    }
    fn meta_f32(&self, key: &str) -> Option<f32> {
        self.get_f32(key)
    }
    fn meta_str(&self, key: &str) -> Option<&str> {
        self.get_str(key)
    }
    fn meta_bool(&self, key: &str) -> Option<bool> {
        self.get_bool(key)
    }
    fn meta_num_array(&self, key: &str) -> Option<Vec<f64>> {
        use gpack_ingest::Array;
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> f64) -> Option<Vec<f64>> {
            Some(v.iter().map(|&x| f(x)).collect())
        }
        match self.get_array(key)? {
            Array::U8(v) => conv(v, f64::from),
            Array::I8(v) => conv(v, f64::from),
            Array::U16(v) => conv(v, f64::from),
            Array::I16(v) => conv(v, f64::from),
            Array::U32(v) => conv(v, f64::from),
            Array::I32(v) => conv(v, f64::from),
            Array::U64(v) => conv(v, |x| x as f64),
            Array::I64(v) => conv(v, |x| x as f64),
            Array::F32(v) => conv(v, f64::from),
            Array::F64(v) => conv(v, |x| x),
            Array::Bool(v) => conv(v, |x| f64::from(u8::from(x))),
            _ => None,
        }
    }
}

/// A provider whose metadata is an ingest [`gpack_ingest::Metadata`] gets
/// [`MetadataSource`] by forwarding to it.
pub trait HasMetadata {
    /// The metadata table.
    fn metadata_table(&self) -> &gpack_ingest::Metadata;
}

impl<T: HasMetadata> MetadataSource for T {
    fn meta_u64(&self, key: &str) -> Option<u64> {
        self.metadata_table().meta_u64(key)
    }
    fn meta_f32(&self, key: &str) -> Option<f32> {
        self.metadata_table().meta_f32(key)
    }
    fn meta_str(&self, key: &str) -> Option<&str> {
        self.metadata_table().meta_str(key)
    }
    fn meta_bool(&self, key: &str) -> Option<bool> {
        self.metadata_table().meta_bool(key)
    }
    fn meta_num_array(&self, key: &str) -> Option<Vec<f64>> {
        self.metadata_table().meta_num_array(key)
    }
}

/// A borrowed tensor as a provider hands it out.
#[derive(Clone, Debug)]
pub enum TensorRef<'a> {
    /// Rows `row_start .. row_start + rows` of a native tensor (all of it when
    /// `row_start == 0 && rows == view.rows()`). Matrix weights (ne1 > 1)
    /// should come this way: the kernels run on native layouts.
    Native {
        /// The whole native tensor (possibly a fused group).
        view: NativeView<'a>,
        /// First row of this member.
        row_start: usize,
        /// Rows of this member.
        rows: usize,
    },
    /// Raw ggml data: norms, biases, rope factors (and, on a slow path,
    /// embeddings or a head kept in a ggml block type).
    Dense {
        /// Element type of `bytes`.
        ggml_type: GgmlType,
        /// Dimensions, ne0 (contiguous) first.
        dims: Vec<u64>,
        /// The data, exactly `ggml_type` bytes for `dims`.
        bytes: &'a [u8],
    },
}

impl TensorRef<'_> {
    /// Dimensions, ne0 first (`[cols, rows]` for a matrix).
    pub fn dims(&self) -> Vec<u64> {
        match self {
            TensorRef::Native { view, rows, .. } => vec![view.cols() as u64, *rows as u64],
            TensorRef::Dense { dims, .. } => dims.clone(),
        }
    }
}

/// A model's weights: metadata plus named tensors (GGUF names,
/// `blk.N.attn_q.weight`).
pub trait WeightSource: MetadataSource + Send + Sync {
    /// The tensor named `name`, or `None` when absent.
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>>;

    /// `part` (0 gate, 1 up, 2 down) of routed expert `expert` in `layer`,
    /// for a model of `n_expert` experts per layer; `None` when the model
    /// has no such expert. The default serves one expert's rows of the
    /// stacked tensors `blk.L.ffn_{gate,up,down}_exps.weight` (GGUF and HF
    /// sources); a `.gpack` answers from its ExpertLayout.
    fn expert_slice(
        &self,
        layer: usize,
        expert: usize,
        part: usize,
        n_expert: usize,
    ) -> Option<Result<ExpertSlice<'_>>> {
        expert_slice::stacked_slice(self, layer, expert, part, n_expert)
    }

    /// The per-layer embedding table when this store keeps it apart from the
    /// tensors (a `.gpack`'s Ple section), opened in `io` mode; `None` when
    /// the table, if any, is an ordinary tensor (`per_layer_token_embd.weight`).
    fn ple_table(&self, _io: crate::ple::PleIo) -> Option<Result<crate::ple::PleTable>> {
        None
    }

    /// The weight sections a device may upload whole, from the mapping, with
    /// the SHA-256 the file records for each (a `.gpack`'s NativeDense
    /// arena, Head and Embed). A matrix inside one is placed and streamed
    /// with its section, the digest checked on the way; the default (none)
    /// has the device upload each matrix on its own.
    fn device_sections(&self) -> Vec<gpack_gpu::upload::Section<'_>> {
        Vec::new()
    }

    /// Advice: `bytes` (a slice of this store's mapped files) will not be
    /// read again soon; a mapped store drops those pages from the process's
    /// resident set. The default does nothing.
    fn release(&self, _bytes: &[u8]) {}
}

/// Reads a 1-D (or any) dense tensor as f32 values (F32, F16, BF16 and the
/// ggml block types [`gpack_quant::dequantize_ggml`] knows). Used at load for
/// norms and biases, which are small.
pub(crate) fn to_f32_vec(name: &str, t: &TensorRef<'_>, what: &'static str) -> Result<Vec<f32>> {
    match t {
        TensorRef::Dense {
            ggml_type,
            dims,
            bytes,
        } => {
            crate::decodable::check_decodable(name, *ggml_type)?;
            // The dims come from the file: the element count is
            // overflow-checked and must be what the bytes present hold
            // before it sizes the output.
            let n = gpack_ingest::checked_product(dims)
                .filter(|&n| ggml_type.bytes_for(n) == Some(bytes.len() as u64))
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::Shape {
                    name: name.to_string(),
                    expected: vec![
                        bytes.len() as u64 / ggml_type.type_size().max(1) * ggml_type.block_size(),
                    ],
                    found: dims.clone(),
                })?;
            let mut out = vec![0f32; n];
            gpack_quant::dequantize_ggml(*ggml_type, bytes, &mut out).map_err(|e| {
                Error::Quant {
                    name: name.to_string(),
                    source: e,
                }
            })?;
            Ok(out)
        }
        TensorRef::Native {
            view,
            row_start,
            rows,
        } => {
            crate::decodable::check_view_decodable(name, view)?;
            let cols = view.cols();
            let mut out = vec![0f32; cols * rows];
            view.dequantize_rows(*row_start, &mut out);
            let _ = what;
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dims that claim more elements than the bytes hold are a shape error
    /// before anything is allocated. Before, `[2^40]` over 256 bytes made
    /// `to_f32_vec` allocate 4 TiB (the process aborted; found by the
    /// runtime_gpack fuzz target on a mutated norm vector's TensorIndex
    /// entry), and a product past 2^64 wrapped.
    #[test]
    fn dims_beyond_the_bytes_are_refused_before_allocating() {
        let bytes = vec![0u8; 256]; // 64 f32
        for dims in [
            vec![1u64 << 40],
            vec![1 << 32, 1 << 32, 2],
            vec![65],
            vec![8, 7],
        ] {
            let t = TensorRef::Dense {
                ggml_type: GgmlType::F32,
                dims: dims.clone(),
                bytes: &bytes,
            };
            match to_f32_vec("blk.0.attn_norm.weight", &t, "norm") {
                Err(Error::Shape {
                    found, expected, ..
                }) => {
                    assert_eq!((found, expected), (dims, vec![64]))
                }
                other => panic!("{dims:?}: {other:?}"),
            }
        }
        let t = TensorRef::Dense {
            ggml_type: GgmlType::F32,
            dims: vec![8, 8],
            bytes: &bytes,
        };
        assert_eq!(to_f32_vec("x", &t, "norm").unwrap().len(), 64);
    }
}
