use gpack_convert::{convert, ConvertOptions, Quant};
use gpack_format::payload::{self, TensorEntry};
use gpack_format::{single_tensor, Gpack, SectionKind};
use gpack_ingest::{GgmlType, Source};
use gpack_quant::NativeView;
use std::path::{Path, PathBuf};

pub use gpack_testkit::smollm2;

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

pub fn convert_to(src: &Path, out: &Path, quant: Quant, external: bool) -> gpack_convert::Report {
    convert(
        &ConvertOptions {
            source: src.to_path_buf(),
            output: out.to_path_buf(),
            quant,
            external_experts: external,
            ..Default::default()
        },
        &(),
    )
    .unwrap_or_else(|e| panic!("convert {}: {e}", src.display()))
}

pub fn tensor_index(g: &Gpack) -> Vec<TensorEntry> {
    payload::parse_tensor_index(g.section(SectionKind::TensorIndex).unwrap().bytes).unwrap()
}

fn native_f32(bytes: &[u8]) -> Vec<f32> {
    let v = NativeView::parse(bytes).unwrap();
    let mut out = vec![0f32; v.rows() * v.cols()];
    for r in 0..v.rows() {
        v.dequantize_row(r, &mut out[r * v.cols()..(r + 1) * v.cols()]);
    }
    out
}

/// Dequantized values of a tensor as the .gpack stores it (experts: all
/// experts concatenated, embedded mode only).
pub fn gpack_f32(g: &Gpack, e: &TensorEntry) -> Vec<f32> {
    let kind = SectionKind::from_u32(e.section).unwrap();
    match kind {
        SectionKind::DensePack => {
            let s = g.section(kind).unwrap().bytes;
            let b = &s[e.offset as usize..(e.offset + e.size) as usize];
            let t = GgmlType::from_id(e.src_type).unwrap();
            let mut out = vec![0f32; e.dims.iter().product::<u64>() as usize];
            gpack_quant::dequantize_ggml(t, b, &mut out).unwrap();
            out
        }
        SectionKind::NativeDense => {
            // Possibly a member of a fused tensor: its rows only.
            let s = g.section(kind).unwrap().bytes;
            let all = native_f32(&s[e.offset as usize..(e.offset + e.size) as usize]);
            let cols = e.dims[0] as usize;
            let rows = e.dims[1..].iter().product::<u64>() as usize;
            let start = e.row_start as usize * cols;
            all[start..start + rows * cols].to_vec()
        }
        SectionKind::Embed | SectionKind::Head | SectionKind::Ple => {
            let (h, p) = single_tensor(g.section(kind).unwrap()).unwrap();
            if h.reserved0.get() == 0 {
                // Raw ggml blocks (the PLE table).
                let t = GgmlType::from_id(h.ggml_type.get()).unwrap();
                let mut out = vec![0f32; (h.ne0.get() * h.ne1.get()) as usize];
                gpack_quant::dequantize_ggml(t, p, &mut out).unwrap();
                out
            } else {
                native_f32(p)
            }
        }
        SectionKind::ExpertBlobs => {
            let layout = g.expert_layout().unwrap().unwrap();
            let blobs = g.section(SectionKind::ExpertBlobs).unwrap().bytes;
            let (layer, part) = expert_of(&e.name);
            let mut out = Vec::new();
            for x in 0..layout.n_expert as usize {
                let s = layout.slice(layer, x, part).unwrap();
                out.extend(native_f32(
                    &blobs[s.offset as usize..(s.offset + s.size) as usize],
                ));
            }
            out
        }
        other => panic!("tensor {} in unexpected section {other}", e.name),
    }
}

pub fn expert_of(name: &str) -> (usize, usize) {
    let layer = name.split('.').nth(1).unwrap().parse().unwrap();
    let part = if name.contains("gate_exps") {
        0
    } else if name.contains("up_exps") {
        1
    } else {
        2
    };
    (layer, part)
}

pub fn source_f32(src: &Source, name: &str) -> Vec<f32> {
    let t = src.tensor(name).unwrap();
    let b = src.tensor_bytes(t).unwrap();
    let mut out = vec![0f32; t.n_elements() as usize];
    gpack_quant::dequantize_ggml(t.ggml_type, &b, &mut out).unwrap();
    out
}

/// Every source tensor is in the index with the same name, type and shape,
/// and dequantizes to the same f32 bits.
pub fn assert_same_tensors(src_path: &Path, g: &Gpack) {
    let src = Source::open(src_path).unwrap();
    let index = tensor_index(g);
    assert_eq!(index.len(), src.tensors.len(), "{}", src_path.display());
    for t in &src.tensors {
        let e = index
            .iter()
            .find(|e| e.name == t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(e.src_type, t.ggml_type.id(), "{}", t.name);
        assert_eq!(e.dims, t.dims, "{}", t.name);
        if e.section == SectionKind::ExpertLayout as u32 {
            continue; // external: checked by the MoE test
        }
        let a = gpack_f32(g, e);
        let b = source_f32(&src, &t.name);
        assert_eq!(a.len(), b.len(), "{}", t.name);
        let diff = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x.to_bits() != y.to_bits());
        assert_eq!(diff, None, "{}: first differing element", t.name);
    }
}

/// Dequantized values of tensor `name` as the .giw stores it (a group
/// member: its rows of the group's tensor; a dense record: its ggml bytes).
pub fn giw_f32(giw: &gpack_format::giw::Giw, name: &str) -> Vec<f32> {
    use gpack_format::giw::RecordKind;
    let (r, member) = giw
        .find(name)
        .unwrap_or_else(|| panic!("{name} not in the .giw"));
    let rec = &giw.records()[r];
    if rec.kind == RecordKind::Dense {
        let t = GgmlType::from_id(rec.ggml_type).unwrap();
        let mut out = vec![0f32; rec.dims.iter().product::<u64>() as usize];
        gpack_quant::dequantize_ggml(t, giw.payload(r), &mut out).unwrap();
        return out;
    }
    let all = native_f32(giw.payload(r));
    match member {
        Some(m) => {
            let m = &rec.members[m];
            let cols = all.len() / rec.native_rows as usize;
            all[m.row_start as usize * cols..(m.row_start + m.rows) as usize * cols].to_vec()
        }
        None => all,
    }
}

/// The index of the first element where `a` and `b` differ in bits (or
/// their shorter length when the lengths differ), `None` when equal.
pub fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}
