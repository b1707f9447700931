//! An HF directory must read as the GGUF llama.cpp's convert_hf_to_gguf.py made
//! from it: same tensor names and shapes, same values (after transforms; F16 GGUF
//! tensors compared with the HF value rounded to f16, F32 ones exactly), and the
//! same `<arch>.*` metadata keys and values.

use std::collections::BTreeMap;

use gpack_ingest::hf::to_f32;
use gpack_ingest::{GgmlType, Source, SourceKind, Transform, Value};

use crate::common::{arches, f16_bits, tiny};

fn arch_keys(s: &Source, arch: &str) -> BTreeMap<String, Value> {
    s.metadata
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{arch}.")))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn compare(hf: &Source, gguf: &Source, what: &str) {
    let arch = gguf.architecture().unwrap();
    assert_eq!(hf.architecture(), Some(arch), "{what}");
    assert_eq!(
        arch_keys(hf, arch),
        arch_keys(gguf, arch),
        "{what}: architecture metadata"
    );

    let mut hn: Vec<_> = hf.tensors.iter().map(|t| t.name.as_str()).collect();
    let mut gn: Vec<_> = gguf.tensors.iter().map(|t| t.name.as_str()).collect();
    hn.sort();
    gn.sort();
    assert_eq!(hn, gn, "{what}: tensor names");

    for g in &gguf.tensors {
        let h = hf.tensor(&g.name).unwrap();
        assert_eq!(h.dims, g.dims, "{what}: {}", g.name);
        let hb = hf.tensor_bytes(h).unwrap();
        assert_eq!(hb.len() as u64, h.size, "{what}: {}", g.name);
        assert_eq!(
            h.ggml_type.bytes_for(h.n_elements()),
            Some(h.size),
            "{what}: {}",
            g.name
        );
        let gb = gguf.tensor_bytes(g).unwrap();
        let hv = match g.ggml_type {
            GgmlType::MXFP4 => Vec::new(),
            _ => to_f32(&hb, h.ggml_type).unwrap(),
        };
        match g.ggml_type {
            GgmlType::F16 => {
                let gv: Vec<u16> = gb
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect();
                let hv: Vec<u16> = hv.iter().map(|&v| f16_bits(v)).collect();
                assert!(hv == gv, "{what}: {} values differ", g.name);
            }
            GgmlType::F32 => {
                let gv = to_f32(&gb, GgmlType::F32).unwrap();
                let same = hv.iter().zip(&gv).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same && hv.len() == gv.len(),
                    "{what}: {} values differ",
                    g.name
                );
            }
            // Quantized in the checkpoint (gpt-oss's MXFP4 experts):
            // the converter's bytes exactly.
            GgmlType::MXFP4 => assert!(hb == gb, "{what}: {} bytes differ", g.name),
            t => panic!("{what}: {}: unexpected type {t}", g.name),
        }
    }
}

#[test]
fn every_tiny_hf_dir_equals_its_f16_gguf() {
    for arch in arches() {
        let hf = Source::open(&tiny(arch).join("hf")).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let gguf = Source::open(&tiny(arch).join(format!("{arch}-f16.gguf"))).unwrap();
        assert_eq!(hf.kind, SourceKind::Safetensors);
        compare(&hf, &gguf, arch);
    }
}

/// gpt-oss as OpenAI ships it (`34_make_tiny_gpt_oss_mxfp4.py`): the MXFP4
/// `*_blocks` / `*_scales` experts come out as the converter's ggml MXFP4
/// blocks byte for byte, gate and up de-interleaved by row.
#[test]
fn gpt_oss_mxfp4_dir_equals_the_converters_gguf() {
    let d = tiny("gpt-oss");
    let hf = Source::open(&d.join("hf-mxfp4")).unwrap();
    let gguf = Source::open(&d.join("gpt-oss-mxfp4.gguf")).unwrap();
    let mx = gguf
        .tensors
        .iter()
        .filter(|t| t.ggml_type == GgmlType::MXFP4)
        .count();
    assert_eq!(mx, 12, "gate, up and down of 4 layers in MXFP4");
    compare(&hf, &gguf, "gpt-oss hf-mxfp4");
}

#[test]
fn sharded_index_and_single_file_equal_the_gguf() {
    let gguf = Source::open(&tiny("llama").join("llama-f16.gguf")).unwrap();
    let dir = tiny("llama").join("hf-sharded");
    for p in [
        dir.clone(),
        dir.join("model.safetensors.index.json"),
        tiny("llama").join("hf/model.safetensors"),
    ] {
        let hf = Source::open(&p).unwrap();
        compare(&hf, &gguf, &p.display().to_string());
    }
    let s = Source::open(&dir).unwrap();
    assert_eq!(s.files.len(), 2);
    assert!(s.tensors.iter().any(|t| t.file == 1));
}

#[test]
fn transforms_used_where_expected() {
    let s = Source::open(&tiny("llama").join("hf")).unwrap();
    assert_eq!(
        s.tensor("blk.0.attn_q.weight").unwrap().transform,
        Some(Transform::RopePermute { n_head: 4 })
    );
    assert_eq!(
        s.tensor("blk.1.attn_k.weight").unwrap().transform,
        Some(Transform::RopePermute { n_head: 2 })
    );
    assert_eq!(s.tensor("blk.1.attn_v.weight").unwrap().transform, None);
    let v = s.tensor("blk.0.attn_v.weight").unwrap();
    assert!(matches!(
        s.tensor_bytes(v).unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));

    let s = Source::open(&tiny("gemma3").join("hf")).unwrap();
    let n = s.tensor("blk.0.attn_q_norm.weight").unwrap();
    assert_eq!(
        (n.ggml_type, n.size, &n.transform),
        (
            GgmlType::F32,
            64,
            &Some(Transform::PlusOne {
                from: GgmlType::BF16
            })
        )
    );
    assert_eq!(n.source_ranges()[0].size, 32);
    assert_eq!(
        s.tensor("token_embd.weight").unwrap().ggml_type,
        GgmlType::BF16
    );
    assert!(s.tensor("output.weight").is_none(), "tied embeddings");

    let s = Source::open(&tiny("qwen3moe").join("hf")).unwrap();
    let e = s.tensor("blk.1.ffn_down_exps.weight").unwrap();
    assert_eq!(e.dims, [128, 64, 4]);
    let Some(Transform::Stack { parts }) = &e.transform else {
        panic!("{e:?}")
    };
    assert_eq!(parts.len(), 4);
    assert_eq!(e.source_ranges(), *parts);
}

#[test]
fn assets_are_the_raw_files() {
    let s = Source::open(&tiny("gemma3").join("hf")).unwrap();
    let names: Vec<_> = s.assets.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
            "chat_template.jinja",
            "tokenizer.model"
        ]
    );
    for a in &s.assets {
        assert_eq!(
            a.bytes,
            std::fs::read(tiny("gemma3").join("hf").join(&a.name)).unwrap()
        );
    }
    let s = Source::open(&tiny("llama").join("hf-sharded/model.safetensors.index.json")).unwrap();
    assert_eq!(s.assets.len(), 5);
}

#[test]
fn multimodal_gemma3_prefixes_and_unmapped_tensors() {
    // Gemma3ForConditionalGeneration: text weights under model.language_model.*, plus
    // a vision tower whose norms must not get Gemma's +1.
    let src = Source::open(&tiny("gemma3").join("hf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let st = gpack_ingest::safetensors::parse(src.files[0].bytes()).unwrap();
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    let mut add = |name: String, dtype: &str, shape: Vec<u64>, bytes: &[u8]| {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(name, serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}));
    };
    for t in &st.tensors {
        let bytes = &src.files[0].bytes()[t.offset as usize..(t.offset + t.size) as usize];
        add(
            t.name.replacen("model.", "model.language_model.", 1),
            &t.dtype,
            t.shape.clone(),
            bytes,
        );
    }
    add(
        "model.vision_tower.post_layernorm.weight".into(),
        "F32",
        vec![2],
        &[0; 8],
    );
    let h = serde_json::to_vec(&header).unwrap();
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&h);
    file.extend_from_slice(&data);
    std::fs::write(d.join("model.safetensors"), file).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny("gemma3").join("hf/config.json")).unwrap())
            .unwrap();
    config = serde_json::json!({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": config});
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let s = Source::open(d).unwrap();
    let v = s
        .tensor("model.vision_tower.post_layernorm.weight")
        .unwrap();
    assert_eq!((v.ggml_type, &v.transform), (GgmlType::F32, &None));
    let mut without_vision = Source::open(d).unwrap();
    without_vision
        .tensors
        .retain(|t| !t.name.starts_with("model.vision_tower"));
    let gguf = Source::open(&tiny("gemma3").join("gemma3-f16.gguf")).unwrap();
    compare(&without_vision, &gguf, "gemma3 multimodal layout");
}

#[test]
fn unknown_architecture_keeps_hf_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        tiny("llama").join("hf/model.safetensors"),
        d.join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(
        d.join("config.json"),
        br#"{"model_type":"phi","architectures":["PhiForCausalLM"],"hidden_size":64}"#,
    )
    .unwrap();
    let s = Source::open(d).unwrap();
    assert_eq!(s.architecture(), Some("phi"));
    assert_eq!(s.metadata.get_u32("phi.embedding_length"), Some(64));
    assert_eq!(s.tensors.len(), 21);
    assert!(s.tensor("model.layers.0.self_attn.q_proj.weight").is_some());
    assert!(s.tensors.iter().all(|t| t.transform.is_none()));
    // Without config.json at all: no metadata, names kept.
    std::fs::remove_file(d.join("config.json")).unwrap();
    let s = Source::open(&d.join("model.safetensors")).unwrap();
    assert!(s.metadata.is_empty());
    assert!(s.tensor("lm_head.weight").is_some());
}

#[test]
fn llama3_rope_generates_rope_freqs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        tiny("llama").join("hf/model.safetensors"),
        d.join("model.safetensors"),
    )
    .unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny("llama").join("hf/config.json")).unwrap())
            .unwrap();
    config["rope_parameters"] = serde_json::json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16});
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let s = Source::open(d).unwrap();
    let t = &s.tensors[0];
    assert_eq!(
        (t.name.as_str(), t.ggml_type, t.dims.as_slice()),
        ("rope_freqs.weight", GgmlType::F32, &[8u64][..])
    );
    assert!(t.source_ranges().is_empty());
    let v = to_f32(&s.tensor_bytes(t).unwrap(), GgmlType::F32).unwrap();
    assert_eq!(v, gpack_ingest::hf::llama3_rope_factors(&config).unwrap());
    assert!(v[0] > 1.0 && v[0] < 32.0, "blended");
    assert_eq!(v[7], 32.0);
    assert_eq!(s.tensors.len(), 22);
    assert_eq!(
        s.metadata.get("llama.rope.scaling.type"),
        None,
        "llama3 scaling is the tensor, not keys"
    );
}

/// Writes `tensors` (name, dtype, shape, bytes) as `dir/model.safetensors`, in order.
fn write_safetensors(dir: &std::path::Path, tensors: &[(String, String, Vec<u64>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let h = serde_json::to_vec(&header).unwrap();
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&h);
    file.extend_from_slice(&data);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
}

/// The tiny Gemma 3n checkpoint's tensors (name, dtype, shape, bytes), in file order.
fn gemma3n_tensors() -> Vec<(String, String, Vec<u64>, Vec<u8>)> {
    let src = Source::open(&tiny("gemma3n").join("hf")).unwrap();
    let bytes = src.files[0].bytes();
    let st = gpack_ingest::safetensors::parse(bytes).unwrap();
    st.tensors
        .iter()
        .map(|t| {
            let b = bytes[t.offset as usize..(t.offset + t.size) as usize].to_vec();
            (t.name.clone(), t.dtype.clone(), t.shape.clone(), b)
        })
        .collect()
}

#[test]
fn gemma3n_altup_stacks_norms_and_shared_kv() {
    let s = Source::open(&tiny("gemma3n").join("hf")).unwrap();
    assert_eq!(s.architecture(), Some("gemma3n"));
    let st = gpack_ingest::safetensors::parse(s.files[0].bytes()).unwrap();
    let hf = |n: &str| st.tensors.iter().find(|t| t.name == n).unwrap();
    for (gguf, first) in [
        ("altup_proj.weight", "model.altup_projections.0.weight"),
        (
            "altup_unembd_proj.weight",
            "model.altup_unembed_projections.0.weight",
        ),
    ] {
        // Back to back in the file: one plain range over the three matrices.
        let t = s.tensor(gguf).unwrap();
        assert_eq!(
            (
                t.ggml_type,
                t.dims.as_slice(),
                t.offset,
                t.size,
                &t.transform
            ),
            (
                GgmlType::BF16,
                &[64u64, 64, 3][..],
                hf(first).offset,
                3 * 64 * 64 * 2,
                &None
            )
        );
    }
    assert!(s
        .tensors
        .iter()
        .all(|t| !t.name.contains("altup_projections")
            && !t.name.contains("altup_unembed_projections")));
    // Norms are used unshifted: no PlusOne, still BF16, bytes straight from the file.
    for n in [
        "blk.0.attn_norm.weight",
        "blk.0.attn_q_norm.weight",
        "blk.3.altup_router_norm.weight",
        "blk.5.laurel_post_norm.weight",
        "per_layer_proj_norm.weight",
        "output_norm.weight",
        "blk.2.altup_correct_scale.weight",
    ] {
        let t = s.tensor(n).unwrap();
        assert_eq!((t.ggml_type, &t.transform), (GgmlType::BF16, &None), "{n}");
    }
    // The last num_kv_shared_layers layers reuse earlier KV: no k/v projections.
    for l in 0..6 {
        for kv in ["attn_k", "attn_v", "attn_k_norm"] {
            let name = format!("blk.{l}.{kv}.weight");
            assert_eq!(s.tensor(&name).is_some(), l < 4, "{name}");
        }
    }
    assert_eq!(
        s.tensor("per_layer_token_embd.weight").unwrap().dims,
        [192, 2048]
    );
    assert_eq!(s.tensors.len(), 145);
}

#[test]
fn gemma3n_multimodal_layout_reordered_altup_and_vocab_padding() {
    // Gemma3nForConditionalGeneration: text weights under model.language_model.*, an
    // audio tower that stays unmapped, and the AltUp projections stored out of order
    // (so the stacked tensor must be gathered from three ranges).
    let mut tensors: Vec<_> = gemma3n_tensors()
        .into_iter()
        .map(|(n, d, s, b)| (n.replacen("model.", "model.language_model.", 1), d, s, b))
        .collect();
    let pos = |ts: &[(String, String, Vec<u64>, Vec<u8>)], n: &str| {
        ts.iter().position(|t| t.0 == n).unwrap()
    };
    let p2 = pos(&tensors, "model.language_model.altup_projections.2.weight");
    let p0 = pos(&tensors, "model.language_model.altup_projections.0.weight");
    tensors.swap(p0, p2);
    tensors.push((
        "model.audio_tower.subsample_conv_projection.input_proj_linear.weight".into(),
        "F32".into(),
        vec![2],
        vec![0; 8],
    ));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_safetensors(d, &tensors);
    let text: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny("gemma3n").join("hf/config.json")).unwrap())
            .unwrap();
    let mut config = serde_json::json!({"architectures": ["Gemma3nForConditionalGeneration"],
        "model_type": "gemma3n", "text_config": text});
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();

    let s = Source::open(d).unwrap();
    let a = s.tensor("altup_proj.weight").unwrap();
    let Some(Transform::Stack { parts }) = &a.transform else {
        panic!("{a:?}")
    };
    assert_eq!(parts.len(), 3);
    assert_eq!(a.source_ranges(), *parts);
    assert!(s
        .tensor("model.audio_tower.subsample_conv_projection.input_proj_linear.weight")
        .is_some());
    let mut text_only = Source::open(d).unwrap();
    text_only
        .tensors
        .retain(|t| !t.name.starts_with("model.audio_tower"));
    let gguf = Source::open(&tiny("gemma3n").join("gemma3n-f16.gguf")).unwrap();
    compare(&text_only, &gguf, "gemma3n multimodal layout");

    // A vocab_size larger than the embeddings: zero rows appended, as the converter
    // does for the vision/audio token ids.
    config["text_config"]["vocab_size"] = serde_json::json!(2050);
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let s = Source::open(d).unwrap();
    for (name, width) in [
        ("token_embd.weight", 64u64),
        ("per_layer_token_embd.weight", 192),
    ] {
        let t = s.tensor(name).unwrap();
        let plain = text_only.tensor(name).unwrap();
        assert_eq!(t.dims, [width, 2050], "{name}");
        assert_eq!(t.size, width * 2050 * 2);
        assert_eq!(
            t.transform,
            Some(Transform::PadZeros {
                src_size: width * 2048 * 2
            })
        );
        assert_eq!(t.source_ranges()[0].size, plain.size);
        let b = s.tensor_bytes(t).unwrap();
        assert_eq!(b.len() as u64, t.size);
        assert_eq!(
            &b[..plain.size as usize],
            &*text_only.tensor_bytes(plain).unwrap()
        );
        assert!(b[plain.size as usize..].iter().all(|&x| x == 0));
    }
}
