//! The conversion policy: which layout every weight matrix is stored in, and
//! whether that is an exact transcode or a (re-)quantization; and whether a
//! q‖k‖v / gate‖up group is stored as one fused tensor. `gpack convert`
//! (.gpack, [`crate::plan`]) and `gpack prequant` (.giw, [`crate::giw`])
//! both ask [`decide`] and [`fuses`]; nothing else decides a layout.
//!
//! # Why one policy
//!
//! The two commands used to carry their own rules and disagreed: `convert
//! --quant int4` re-quantized a Q4_0 source (losing exactness, for a larger
//! file) where `prequant` transcoded it exactly. Here the rules are written
//! once, and the container only contributes what it can store.
//!
//! # The rules
//!
//! `keep`: every matrix in its container's exact layout. `int8`/`int8int8`
//! (the same layouts; int8int8 is the GIW label saying that activations are
//! int8 too, which the kernels always do) target I8Sym G32, `int4` targets
//! I4Asym G32, for matmul weights. A matrix keeps its exact layout instead
//! when it is
//!
//! * an embedding table (`token_embd`, `per_layer_token_embd`: row lookups,
//!   not matmuls; a tied head reads the same exact table),
//! * already at the asked precision in a layout the container's kernels run:
//!   int8 of an I8Sym G32 type (Q8_0, Q5_0); int4 of a type with 4-bit codes
//!   in groups of 32 (Q4_0, Q4_1, Q4_K, and IQ4_NL, IQ4_XS, MXFP4 where the
//!   container has a kernel layout for them: GPACK's Rows16, not GIW's raw
//!   blocks). Re-quantizing those could only lose values and add bytes,
//! * of cols not a multiple of 32 (no whole groups), or of a type gpack
//!   cannot decode (nothing to quantize from).
//!
//! # Containers
//!
//! A [`Container`] decides only what it can hold. The exact layout of a ggml
//! type is [`gpack_quant::canonical_layout_for`] in a `.gpack` (Rows16:
//! ggml's blocks row-interleaved, the kernels' fastest operand; also what the
//! runtime's GGUF/HF providers transcode into at load, so running a .gguf
//! and its `--quant keep` .gpack is the same computation), and
//! [`gpack_quant::native_layout_for`] in a `.giw`, whose documented weights
//! formats (v12–v14, docs/GIW.md) predate Rows16: the row-major split
//! layouts. Quantized layouts are the same in both. A .gpack fuses members
//! of any shared layout (Rows16 members on whole row groups,
//! [`gpack_quant::can_fuse`]); a .giw's group records (v13+) hold int4 G32
//! tensors only.

use crate::mix::Ftype;
use gpack_quant::{canonical_layout_for, native_layout_for, GgmlType, Layout};

/// The weight quantization asked for with `--quant`: one vocabulary for
/// `gpack convert` and `gpack prequant` ([`decide`] says what each means).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Quant {
    /// Every tensor in its container's exact layout.
    #[default]
    Keep,
    /// Matmul weights int8, symmetric, groups of 32.
    Int8,
    /// As [`Quant::Int8`] (the same layouts), labelled as int8 weights with
    /// int8 activations: the default label of `.giw` bundles and sidecars.
    Int8Int8,
    /// Matmul weights int4, asymmetric, groups of 32 (gpack's own layouts:
    /// `int8`, `int8int8` and `int4` are the legacy choices, kept for
    /// `.giw` bundles and sidecars).
    Int4,
    /// llama-quantize's file type (`Q4_K_M`, …): each tensor gets the ggml
    /// type llama-quantize's mix gives it ([`crate::mix::mix_types`]),
    /// quantized with ggml's own quantizers (the same blocks) and stored
    /// in the canonical Rows16 layout. `.gpack` only.
    Mix(Ftype),
}

impl Quant {
    /// Every quant, in the order `--help` lists them.
    pub const ALL: [Quant; 4] = [Quant::Keep, Quant::Int8, Quant::Int8Int8, Quant::Int4];

    /// The name used on the command line, in .gpack manifests and as the
    /// .giw header label (stable: readers compare it).
    pub fn name(self) -> &'static str {
        match self {
            Quant::Keep => "keep",
            Quant::Int8 => "int8",
            Quant::Int8Int8 => "int8int8",
            Quant::Int4 => "int4",
            Quant::Mix(f) => f.name(),
        }
    }

    /// Every name `--quant` accepts, for messages: gpack's own, then
    /// llama-quantize's.
    pub fn valid_names() -> String {
        let mut v: Vec<&str> = Quant::ALL.iter().map(|q| q.name()).collect();
        v.extend(Ftype::ALL.iter().map(|f| f.name()));
        v.join(", ")
    }

    /// The layout a quantized matrix gets (`None` for keep).
    pub fn target(self) -> Option<Layout> {
        match self {
            Quant::Keep | Quant::Mix(_) => None,
            Quant::Int8 | Quant::Int8Int8 => Some(Layout::I8Sym { group: 32 }),
            Quant::Int4 => Some(Layout::I4Asym { group: 32 }),
        }
    }
}

impl std::fmt::Display for Quant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Quant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Quant::ALL
            .into_iter()
            .find(|q| q.name() == s)
            .or_else(|| Ftype::from_name(s).map(Quant::Mix))
            .ok_or_else(|| {
                format!(
                    "unknown quant {s:?} (expected one of: {}; llama-quantize's names are case-insensitive)",
                    Quant::valid_names()
                )
            })
    }
}

/// The file a conversion writes: what it can store decides the exact layouts
/// and which layouts fuse (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Container {
    /// A `.gpack` (`gpack convert`).
    Gpack,
    /// A `.giw` bundle (`gpack prequant`, `--stream-weights` sidecars).
    Giw,
}

impl Container {
    /// The layout `ty` is transcoded to exactly in this container (matrices
    /// of `cols` columns).
    pub fn exact_layout(self, ty: GgmlType, cols: u64) -> Layout {
        match self {
            Container::Gpack => canonical_layout_for(ty, cols),
            Container::Giw => native_layout_for(ty),
        }
    }

    /// Whether members stored in `layout` may be one fused tensor here.
    fn fuses_layout(self, layout: Layout) -> bool {
        match self {
            Container::Gpack => true,
            Container::Giw => matches!(
                layout,
                Layout::I4Sym { group: 32 } | Layout::I4Asym { group: 32 }
            ),
        }
    }
}

/// What [`decide`] chose for one matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The stored layout.
    pub layout: Layout,
    /// `true`: quantized from the source's values (lossy); `false`: an exact
    /// transcode (dequantizes to the source's f32 values bit for bit).
    pub quantized: bool,
}

/// The decision for a tensor of source type `ty` whose llama-quantize mix
/// type is `target` ([`crate::mix::mix_types`]): its exact layout when the
/// type does not change (llama-quantize copies it), else `target`'s
/// canonical layout (Rows16 blocks, or F16 rows for the F16 fallback),
/// quantized. `None` when gpack cannot quantize into `target`.
pub fn decide_mix(ty: GgmlType, target: GgmlType, cols: u64) -> Option<Decision> {
    if target == ty {
        return Some(Decision {
            layout: Container::Gpack.exact_layout(ty, cols),
            quantized: false,
        });
    }
    let layout = gpack_quant::quantize::canonical_target_layout(target).ok()?;
    Some(Decision {
        layout,
        quantized: true,
    })
}

/// Whether `name` is an embedding table (a row lookup, kept exact).
pub fn is_lookup(name: &str) -> bool {
    matches!(name, "token_embd.weight" | "per_layer_token_embd.weight")
}

/// Whether a `ty` source is already at the precision of `target`.
fn already(ty: GgmlType, target: Layout) -> bool {
    let native = native_layout_for(ty);
    match target {
        Layout::I8Sym { .. } => native == target,
        _ => {
            matches!(
                native,
                Layout::I4Sym { group: 32 } | Layout::I4Asym { group: 32 }
            ) || matches!(ty, GgmlType::IQ4_NL | GgmlType::IQ4_XS | GgmlType::MXFP4)
        }
    }
}

/// The layout of the matrix `name` (ggml type `ty`, `cols` columns = ne0)
/// under `quant` in `container`, and whether it is quantized or transcoded
/// exactly: the rules of the module docs. Callers ask it for every tensor
/// they store as a native matrix (rows do not matter: every rule is per row).
pub fn decide(container: Container, quant: Quant, name: &str, ty: GgmlType, cols: u64) -> Decision {
    let exact = container.exact_layout(ty, cols);
    let keep = Decision {
        layout: exact,
        quantized: false,
    };
    let Some(target) = quant.target() else {
        return keep;
    };
    // The container's exact layout is one the kernels run natively (not raw
    // ggml blocks, which only a slow dequantizing path reads).
    let runs_exact = !matches!(exact, Layout::Ggml(_));
    if is_lookup(name)
        || (runs_exact && already(ty, target))
        || !cols.is_multiple_of(32)
        || !gpack_quant::ggml::can_dequantize(ty)
    {
        return keep;
    }
    Decision {
        layout: target,
        quantized: true,
    }
}

/// One member of a candidate fused group (q‖k‖v or gate‖up of one layer), as
/// its caller placed it.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    /// Source ggml type.
    pub ty: GgmlType,
    /// Source dims, ne0 first.
    pub dims: &'a [u64],
    /// Its decided layout, or `None` when it is not stored as a native matrix.
    pub layout: Option<Layout>,
}

/// Whether the members (in row order) are stored as one tensor, rows back to
/// back, so one matrix-vector call covers them all: when there are at least
/// two, each a 2-D matrix stored natively, of one source type, one column
/// count and one decided layout that the container fuses (and, for Rows16,
/// every member on whole row groups).
pub fn fuses(container: Container, members: &[Member<'_>]) -> bool {
    let Some(first) = members.first() else {
        return false;
    };
    let Some(layout) = first.layout else {
        return false;
    };
    let same = members.iter().all(|m| {
        m.layout == Some(layout)
            && m.ty == first.ty
            && m.dims.len() == 2
            && m.dims[1] > 1
            && m.dims[0] == first.dims[0]
    });
    if members.len() < 2 || !same || !container.fuses_layout(layout) {
        return false;
    }
    let rows: Vec<u64> = members.iter().map(|m| m.dims[1]).collect();
    gpack_quant::can_fuse(layout, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType as T;

    const I8: Layout = Layout::I8Sym { group: 32 };
    const I4: Layout = Layout::I4Asym { group: 32 };

    /// Every decodable type, plus one gpack cannot decode.
    const TYPES: [T; 17] = [
        T::F32,
        T::F16,
        T::BF16,
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q8_0,
        T::Q2_K,
        T::Q3_K,
        T::Q4_K,
        T::Q5_K,
        T::Q6_K,
        T::IQ4_NL,
        T::IQ4_XS,
        T::MXFP4,
        T::IQ2_XXS,
    ];

    /// The decisions, spelled out per (type, quant) for a matmul weight of
    /// 256 columns in each container: `E` exact in the container's exact
    /// layout, or the quantized layout. See: issue 13, item 4 (`--quant
    /// int4` of a Q4_0 source is exact in both commands).
    #[test]
    fn decision_table() {
        #[derive(Clone, Copy, PartialEq, Debug)]
        enum D {
            E,
            Q(Layout),
        }
        use D::{E, Q};
        // (type, int8 in gpack, int8 in giw, int4 in gpack, int4 in giw)
        let table: [(T, D, D, D, D); 17] = [
            (T::F32, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::F16, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::BF16, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::Q4_0, Q(I8), Q(I8), E, E),
            (T::Q4_1, Q(I8), Q(I8), E, E),
            (T::Q5_0, E, E, Q(I4), Q(I4)),
            (T::Q5_1, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::Q8_0, E, E, Q(I4), Q(I4)),
            (T::Q2_K, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::Q3_K, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::Q4_K, Q(I8), Q(I8), E, E),
            (T::Q5_K, Q(I8), Q(I8), Q(I4), Q(I4)),
            (T::Q6_K, Q(I8), Q(I8), Q(I4), Q(I4)),
            // 4-bit lookup types: exact where the container has a kernel
            // layout for them (GPACK's Rows16), re-quantized in a .giw
            // (whose exact layout is raw ggml blocks).
            (T::IQ4_NL, Q(I8), Q(I8), E, Q(I4)),
            (T::IQ4_XS, Q(I8), Q(I8), E, Q(I4)),
            (T::MXFP4, Q(I8), Q(I8), E, Q(I4)),
            (T::IQ2_XXS, E, E, E, E),
        ];
        let as_d = |d: Decision| if d.quantized { Q(d.layout) } else { E };
        for (ty, g8, w8, g4, w4) in table {
            for (quant, c, want) in [
                (Quant::Int8, Container::Gpack, g8),
                (Quant::Int8Int8, Container::Gpack, g8),
                (Quant::Int8, Container::Giw, w8),
                (Quant::Int8Int8, Container::Giw, w8),
                (Quant::Int4, Container::Gpack, g4),
                (Quant::Int4, Container::Giw, w4),
            ] {
                let d = decide(c, quant, "blk.0.attn_q.weight", ty, 256);
                assert_eq!(as_d(d), want, "{ty} {quant} {c:?}");
                if !d.quantized {
                    assert_eq!(d.layout, c.exact_layout(ty, 256), "{ty} {quant} {c:?}");
                }
            }
        }
    }

    /// (b) of issue 13 item 4: one function, so both containers make the
    /// same choice wherever the container allows it. Over every type ×
    /// quant × name × cols: they agree on quantized-or-exact and on the
    /// quantized layout, except for the documented capability difference
    /// (4-bit lookup types under int4); an exact layout is the container's
    /// (GPACK: `canonical_layout_for`, the runtime GGUF/HF providers' layout;
    /// GIW: `native_layout_for`, its documented versions).
    #[test]
    fn both_containers_decide_alike() {
        for ty in TYPES {
            for quant in Quant::ALL {
                for name in ["blk.3.ffn_up.weight", "output.weight", "token_embd.weight"] {
                    // Only shapes the type can have (whole blocks per row).
                    for cols in [256, 96, 40].into_iter().filter(|c| c % ty.block().0 == 0) {
                        let g = decide(Container::Gpack, quant, name, ty, cols);
                        let w = decide(Container::Giw, quant, name, ty, cols);
                        let at = format!("{ty} {quant} {name} {cols}");
                        if quant == Quant::Int4 && matches!(ty, T::IQ4_NL | T::IQ4_XS | T::MXFP4) {
                            assert!(!g.quantized, "{at}");
                            assert_eq!(w.quantized, !is_lookup(name), "{at}");
                        } else {
                            assert_eq!(g.quantized, w.quantized, "{at}");
                        }
                        for (d, c) in [(g, Container::Gpack), (w, Container::Giw)] {
                            if d.quantized {
                                assert_eq!(Some(d.layout), quant.target());
                            } else {
                                assert_eq!(d.layout, c.exact_layout(ty, cols));
                            }
                        }
                        if quant == Quant::Keep || is_lookup(name) || cols == 40 {
                            assert!(!g.quantized && !w.quantized, "{at}");
                        }
                        // The GPACK keep layout is what the runtime's GGUF/HF
                        // providers transcode into at load.
                        if quant == Quant::Keep {
                            assert_eq!(g.layout, canonical_layout_for(ty, cols));
                            assert_eq!(w.layout, native_layout_for(ty));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quant_names_round_trip() {
        for q in Quant::ALL {
            assert_eq!(q.name().parse::<Quant>().unwrap(), q);
        }
        for f in Ftype::ALL {
            assert_eq!(
                f.name().to_lowercase().parse::<Quant>().unwrap(),
                Quant::Mix(f)
            );
        }
        let e = "int2".parse::<Quant>().unwrap_err();
        assert!(
            e.contains("int8int8") && e.contains("Q4_K_M") && e.contains("MXFP4_MOE"),
            "{e}"
        );
        assert_eq!(Quant::Int8Int8.target(), Quant::Int8.target());
    }

    #[test]
    fn fusion_rules() {
        let d = [256u64, 256];
        let kv = [256u64, 64];
        let odd = [256u64, 40];
        let m = |ty, dims, layout| Member {
            ty,
            dims,
            layout: Some(layout),
        };
        let r16 = Layout::Rows16(T::Q4_0);
        // GPACK: any shared layout; Rows16 only on whole row groups.
        assert!(fuses(
            Container::Gpack,
            &[m(T::Q4_0, &d, r16), m(T::Q4_0, &kv, r16)]
        ));
        assert!(!fuses(
            Container::Gpack,
            &[m(T::Q4_0, &d, r16), m(T::Q4_0, &odd, r16)]
        ));
        assert!(fuses(
            Container::Gpack,
            &[m(T::F16, &d, Layout::F16), m(T::F16, &odd, Layout::F16)]
        ));
        assert!(fuses(
            Container::Gpack,
            &[m(T::F16, &d, I8), m(T::F16, &kv, I8)]
        ));
        // GIW: int4 G32 only.
        assert!(fuses(
            Container::Giw,
            &[m(T::F16, &d, I4), m(T::F16, &kv, I4)]
        ));
        assert!(!fuses(
            Container::Giw,
            &[m(T::F16, &d, I8), m(T::F16, &kv, I8)]
        ));
        // Both: one type, one cols, one layout, all native 2-D matrices, >= 2.
        for c in [Container::Gpack, Container::Giw] {
            assert!(!fuses(c, &[m(T::F16, &d, I4)]));
            assert!(!fuses(c, &[m(T::F16, &d, I4), m(T::BF16, &d, I4)]));
            assert!(!fuses(c, &[m(T::F16, &d, I4), m(T::F16, &[512, 64], I4)]));
            assert!(!fuses(
                c,
                &[
                    m(T::F16, &d, I4),
                    m(T::F16, &d, Layout::I4Sym { group: 32 })
                ]
            ));
            assert!(!fuses(c, &[m(T::F16, &d, I4), m(T::F16, &[256, 4, 2], I4)]));
            let none = Member {
                ty: T::F16,
                dims: &d,
                layout: None,
            };
            assert!(!fuses(c, &[m(T::F16, &d, I4), none]));
        }
    }
}
