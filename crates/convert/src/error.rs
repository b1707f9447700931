//! Errors of a conversion.

use std::path::PathBuf;

/// What can go wrong converting a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read.
    #[error(transparent)]
    Ingest(#[from] gpack_ingest::Error),
    /// Writing the container failed.
    #[error(transparent)]
    Format(#[from] gpack_format::Error),
    /// Transcoding a tensor failed.
    #[error("tensor {tensor}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (IQ1_S, IQ2_*,
    /// IQ3_*, TQ1_0, TQ2_0, …): refused when planning, before anything is
    /// written.
    #[error(
        "tensor {tensor} has ggml type {ty}, which gpack cannot decode (it decodes {})",
        gpack_quant::ggml::decodable_type_names()
    )]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// The ggml type name.
        ty: &'static str,
    },
    /// The tokenizer could not be built.
    #[error("building the tokenizer")]
    Tokenizer(#[from] gpack_tokenizer::Error),
    /// A tensor cannot be placed as asked.
    #[error("tensor {tensor}: {problem}")]
    Tensor {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        problem: TensorProblem,
    },
    /// The layer count in the metadata is more than gpack accepts.
    #[error("metadata {key} is {n_layers} layers, more than the {max} gpack accepts")]
    LayerCount {
        /// The key (`<arch>.block_count`).
        key: String,
        /// Its value.
        n_layers: u32,
        /// [`gpack_ingest::MAX_LAYERS`].
        max: u32,
    },
    /// An option does not apply to this source (or to the other options).
    #[error(transparent)]
    Option(#[from] OptionProblem),
    /// `--quant` with llama-quantize's types failed for a tensor.
    #[error("tensor {tensor}: {problem}")]
    Quantize {
        /// Tensor name (empty when the problem is the command's).
        tensor: String,
        /// What is wrong.
        problem: QuantizeProblem,
    },
    /// The output exists and `--force` was not given. The message does not
    /// repeat the path: the caller, who gave it, says it once
    /// (`converting A to B: …`).
    #[error("the output already exists (pass --force to replace it)")]
    OutputExists(PathBuf),
    /// `--imatrix`: the file could not be read, or holds a non-finite value
    /// (the message names the file).
    #[error(transparent)]
    Imatrix(#[from] gpack_ingest::imatrix::ImatrixError),
    /// `--imatrix`: the file does not fit the model (names or lengths
    /// disagree), or does not apply to `--quant`.
    #[error("importance matrix {}: {problem}", file.display())]
    ImatrixMismatch {
        /// The importance matrix.
        file: PathBuf,
        /// What disagrees.
        problem: ImatrixProblem,
    },
}

/// How an importance matrix (`--imatrix`) disagrees with the model or the
/// options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImatrixProblem {
    /// Entries name tensors the model does not have: a matrix of another
    /// model.
    #[error(
        "{count} of its {total} entries name no tensor of this model (first: {first}): \
         it was made for another model"
    )]
    UnknownNames {
        /// How many entries match no tensor.
        count: usize,
        /// Entries in the file.
        total: usize,
        /// The first such name.
        first: String,
    },
    /// An entry's length is not the tensor's columns (× experts).
    #[error(
        "{name} has {found} values, but the tensor has {expected} (columns {cols} × {matrices} \
         matrices): it was made for another model"
    )]
    Length {
        /// The tensor.
        name: String,
        /// Values in the file.
        found: usize,
        /// Values the tensor needs.
        expected: u64,
        /// The tensor's columns.
        cols: u64,
        /// Its matrices (experts).
        matrices: u64,
    },
    /// `--imatrix` without one of llama-quantize's types.
    #[error(
        "--imatrix needs one of llama-quantize's types as --quant (Q4_K_M, IQ4_XS, …), not {quant}"
    )]
    NeedsMix {
        /// The `--quant` given.
        quant: String,
    },
}

/// What is wrong with one tensor of the source: matchable, each variant
/// carrying the values its message names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorProblem {
    /// `--external-experts`: one expert's rows do not end on a block
    /// boundary, so the slice cannot be referenced in place.
    #[error("an expert slice of {elements} elements is not whole {ty} blocks")]
    ExpertSliceNotWholeBlocks {
        /// Elements of one expert (rows × cols).
        elements: u64,
        /// The ggml type.
        ty: &'static str,
    },
    /// The expert count (the third dimension) does not fit in a u32.
    #[error("{count} experts, more than a u32 holds")]
    TooManyExperts {
        /// The tensor's third dimension.
        count: u64,
    },
    /// An expert tensor's layer number (from its name) is past the cap.
    #[error("layer {layer} is beyond the {max} layers gpack accepts")]
    LayerBeyondMax {
        /// The layer in the name.
        layer: u32,
        /// [`gpack_ingest::MAX_LAYERS`].
        max: u32,
    },
    /// Expert tensors disagree on the number of experts.
    #[error("has {found} experts, others have {others}")]
    ExpertCountMismatch {
        /// This tensor's count.
        found: u64,
        /// The first expert tensor's count.
        others: u32,
    },
    /// Two tensors are the same part of the same layer's experts.
    #[error("duplicate expert tensor: layer {layer} {part} is already {other}")]
    DuplicateExpertTensor {
        /// Layer.
        layer: u32,
        /// "gate", "up" or "down".
        part: &'static str,
        /// The tensor seen first.
        other: String,
    },
    /// A tensor the plan stores natively has no layout decision (a bug of
    /// the plan).
    #[error("has no native layout")]
    NoNativeLayout,
    /// A draft model or module (`--draft`, `--mtp-dir`) has routed experts.
    #[error(
        "routed experts in a draft model or module (--draft, --mtp-dir) are not supported: \
         the Mtp section holds dense tensors"
    )]
    DraftExperts,
}

/// Why a `--quant` of llama-quantize's types cannot be done for a tensor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantizeProblem {
    /// The source tensor is already quantized and requantizing was not
    /// allowed (llama-quantize's `--allow-requantize`).
    #[error(
        "is already quantized ({from}); requantizing it to {to} loses precision twice: \
         pass --allow-requantize to do it anyway"
    )]
    Requantize {
        /// The source type.
        from: &'static str,
        /// The type the mix asks for.
        to: &'static str,
    },
    /// The mix asks for a type gpack does not quantize into.
    #[error("the mix asks for {to}, which gpack cannot quantize into")]
    Target {
        /// The type.
        to: &'static str,
    },
    /// The mix's rules cannot place the tensor (llama-quantize refuses it too).
    #[error("{0}")]
    Rules(String),
}

/// Why the options given cannot be honoured for this source: matchable,
/// each variant carrying the paths and values its message names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptionProblem {
    /// A llama-quantize type for a `.giw` bundle (`prequant`, sidecars),
    /// which holds gpack's own layouts.
    #[error("--quant {quant} is for `gpack convert` (.gpack); .giw bundles take keep, int8, int8int8 or int4")]
    QuantNotForGiw {
        /// The quant asked for.
        quant: &'static str,
    },
    /// `--external-experts` with a safetensors source.
    #[error(
        "--external-experts needs a GGUF source: experts are referenced in place, and \
         safetensors experts are not in GGUF's stacked layout"
    )]
    ExternalNeedsGguf,
    /// `--external-experts` for a model without routed experts.
    #[error("--external-experts: this model has no routed experts")]
    ExternalWithoutExperts,
    /// `--external-experts` with the output elsewhere than the shards.
    #[error(
        "--external-experts: the .gpack must be written next to its source shards (in {}), \
         because expert files are resolved only next to it; got -o {}",
        shard_dir.display(),
        output.display()
    )]
    ExternalNotBesideShards {
        /// The shards' directory (canonical when it could be resolved).
        shard_dir: PathBuf,
        /// The output asked for.
        output: PathBuf,
    },
    /// `--external-experts`: a shard's file name cannot be recorded.
    #[error("shard file name {} is not a plain UTF-8 name", shard.display())]
    ShardFileName {
        /// The shard.
        shard: PathBuf,
    },
    /// `--draft` and `--mtp-dir` together.
    #[error("--draft and --mtp-dir both fill the Mtp section: give one")]
    DraftAndMtpDir,
    /// `--draft` or `--mtp-dir` for a model whose own MTP block fills the
    /// Mtp section.
    #[error(
        "{option}: {} carries its own multi-token-prediction block ({blocks} after {trunk} layers), \
         which the Mtp section holds: give no {option}",
        model.display()
    )]
    MtpBlockAndDraft {
        /// "--draft" or "--mtp-dir".
        option: &'static str,
        /// The model.
        model: PathBuf,
        /// Its MTP blocks.
        blocks: u32,
        /// Its trunk's layers.
        trunk: u32,
    },
    /// The `--mtp-dir` directory cannot be listed.
    #[error("--mtp-dir {}: cannot list the directory", dir.display())]
    MtpDirUnreadable {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The draft model or module has no tensors.
    #[error("{option} {}: no tensors found", path.display())]
    DraftEmpty {
        /// "--draft" or "--mtp-dir".
        option: &'static str,
        /// What it names.
        path: PathBuf,
    },
    /// `--draft` names something without `general.architecture`.
    #[error("--draft {}: not a model (no general.architecture)", draft.display())]
    DraftNotAModel {
        /// The draft.
        draft: PathBuf,
    },
    /// The model or the draft has no tokenizer to compare.
    #[error(
        "--draft {}: the model and the draft must both carry a tokenizer (to check that they \
         share it)",
        draft.display()
    )]
    DraftWithoutTokenizer {
        /// The draft.
        draft: PathBuf,
    },
    /// The draft's vocabulary is not the model's.
    #[error(
        "--draft {}: its vocabulary differs from the model's at token {id} ({draft_token:?} vs \
         {model_token:?}): a draft must share its target's tokenizer",
        draft.display()
    )]
    DraftVocabulary {
        /// The draft.
        draft: PathBuf,
        /// The first id whose token differs.
        id: u32,
        /// The draft's token text there.
        draft_token: String,
        /// The model's token text there.
        model_token: String,
    },
    /// `prequant --target cpu` with another weights format than 12.
    #[error("--target cpu writes weights format 12 (asked for {asked})")]
    CpuWeightsVersion {
        /// The format asked for.
        asked: u16,
    },
}

impl gpack_format::NamesFile for Error {
    fn names_file(&self, path: &std::path::Path) -> bool {
        matches!(self, Error::Ingest(i) if i.names_file(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::giw::{self, prequant, PrequantOptions};
    use crate::{convert, ConvertOptions};
    use gpack_format::giw::Target;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use gpack_ingest::{GgmlType, Metadata, Value};
    use std::path::Path;

    /// `testdata/tiny/<path>`.
    fn tiny(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/tiny")
            .join(path)
    }

    fn convert_err(source: PathBuf, out: &Path, f: impl FnOnce(&mut ConvertOptions)) -> Error {
        let mut opts = ConvertOptions {
            source,
            output: out.to_path_buf(),
            ..Default::default()
        };
        f(&mut opts);
        let e = convert(&opts, &()).unwrap_err();
        assert!(!out.exists());
        e
    }

    /// A MoE GGUF whose two expert tensors of layer 0 disagree on the number
    /// of experts (4 gates, 2 ups).
    fn moe_with_mismatched_experts(path: &Path) {
        let headers: Vec<TensorHeader> = [
            ("blk.0.ffn_gate_exps.weight", 4),
            ("blk.0.ffn_up_exps.weight", 2),
        ]
        .into_iter()
        .map(|(name, n_expert)| TensorHeader {
            name: name.into(),
            ggml_type: GgmlType::F32,
            dims: vec![32, 8, n_expert],
        })
        .collect();
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("qwen3moe".into()));
        md.insert("qwen3moe.block_count", Value::U32(1));
        let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let mut w = Writer::new(f, &md, &headers).unwrap();
        for h in &headers {
            let n = h.dims.iter().product::<u64>() as usize;
            w.write_tensor_data(&vec![0u8; 4 * n]).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn tensor_problems_name_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.gpack");
        let src = dir.path().join("moe.gguf");
        moe_with_mismatched_experts(&src);
        match convert_err(src, &out, |_| {}) {
            Error::Tensor {
                tensor,
                problem:
                    TensorProblem::ExpertCountMismatch {
                        found: 2,
                        others: 4,
                    },
            } if tensor == "blk.0.ffn_up_exps.weight" => {}
            e => panic!("{e:?}"),
        }
        // A MoE model as its own draft.
        let moe = tiny("qwen3moe/qwen3moe-q8_0.gguf");
        match convert_err(moe.clone(), &out, |o| o.draft = Some(moe)) {
            Error::Tensor {
                tensor,
                problem: TensorProblem::DraftExperts,
            } => assert!(tensor.contains("_exps."), "{tensor}"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn option_problems_name_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.gpack");
        let llama = tiny("llama/llama-q8_0.gguf");
        let e = convert_err(llama.clone(), &out, |o| o.external_experts = true);
        assert!(
            matches!(e, Error::Option(OptionProblem::ExternalWithoutExperts)),
            "{e:?}"
        );
        let e = convert_err(tiny("llama/hf"), &out, |o| o.external_experts = true);
        assert!(
            matches!(e, Error::Option(OptionProblem::ExternalNeedsGguf)),
            "{e:?}"
        );
        let e = convert_err(llama.clone(), &out, |o| {
            o.draft = Some(tiny("qwen2/qwen2-q8_0.gguf"));
            o.mtp_dir = Some(tiny("qwen2/hf"));
        });
        assert!(
            matches!(e, Error::Option(OptionProblem::DraftAndMtpDir)),
            "{e:?}"
        );
        // Gemma 3's SentencePiece vocabulary is not llama's byte-level one.
        let gemma = tiny("gemma3/gemma3-q8_0.gguf");
        match convert_err(llama.clone(), &out, |o| o.draft = Some(gemma.clone())) {
            Error::Option(OptionProblem::DraftVocabulary {
                draft,
                draft_token,
                model_token,
                ..
            }) => assert!(draft == gemma && draft_token != model_token),
            e => panic!("{e:?}"),
        }
        let e = prequant(
            &llama,
            &dir.path().join("out.giw"),
            &PrequantOptions {
                target: Target::Cpu,
                weights_version: Some(13),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                giw::Error::Option(OptionProblem::CpuWeightsVersion { asked: 13 })
            ),
            "{e:?}"
        );
    }
}
