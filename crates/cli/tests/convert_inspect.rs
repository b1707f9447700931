//! `gpack convert` then `gpack inspect --json` on every tiny fixture: every
//! source tensor is listed with the same name, type and shape, and the
//! runtime's view of the family agrees with the model's HF config.json.

use crate::gpack;
use std::path::Path;

#[test]
fn inspect_lists_every_source_tensor_after_convert() {
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny");
    let dir = tempfile::tempdir().unwrap();
    for arch in gpack_testkit::TINY_FAMILIES {
        for src in [
            testdata.join(arch).join(format!("{arch}-q8_0.gguf")),
            testdata.join(arch).join("hf"),
        ] {
            let out = dir.path().join(format!("{arch}.gpack"));
            let o = gpack()
                .arg("convert")
                .arg(&src)
                .args(["--name", arch, "--force", "--json", "-o"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(report["schema"], "gpack.convert.v1");
            let o = gpack()
                .arg("inspect")
                .arg(&out)
                .arg("--json")
                .output()
                .unwrap();
            assert!(o.status.success());
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["manifest"]["name"], arch);
            check_family(
                &v["family"],
                arch,
                &testdata.join(arch).join("hf/config.json"),
            );
            let listed = v["tensors"].as_array().unwrap();
            let source = gpack_ingest::Source::open(&src).unwrap();
            assert_eq!(listed.len(), source.tensors.len(), "{}", src.display());
            for t in &source.tensors {
                let e = listed
                    .iter()
                    .find(|e| e["name"] == t.name.as_str())
                    .unwrap_or_else(|| panic!("{} not listed", t.name));
                assert_eq!(e["type"], t.ggml_type.name(), "{}", t.name);
                assert_eq!(e["dims"], serde_json::json!(t.dims), "{}", t.name);
                // Every layout has a name (a row-interleaved Q8_0 matrix is
                // `Q8_0x16`), never a bare `#code`.
                let layout = e["layout"].as_str().unwrap();
                assert!(!layout.starts_with('#'), "{}: {layout}", t.name);
            }
            let is_gguf = src.extension().is_some_and(|x| x == "gguf");
            assert!(
                !is_gguf || listed.iter().any(|e| e["layout"] == "Q8_0x16"),
                "{}: no row-interleaved Q8_0 matrix listed",
                src.display()
            );
        }
    }
}

/// `family` of `gpack inspect --json` against the transformers config the
/// fixture was made from (Mixtral runs as llama with experts).
fn check_family(fam: &serde_json::Value, arch: &str, config: &Path) {
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    let c = if c["text_config"].is_object() {
        &c["text_config"]
    } else {
        &c
    };
    let n = |k: &str| {
        c[k].as_u64()
            .unwrap_or_else(|| panic!("{k} in {}", config.display()))
    };
    let runtime_arch = if arch == "mixtral" { "llama" } else { arch };
    assert_eq!(fam["architecture"], runtime_arch, "{fam}");
    let features: Vec<&str> = fam["features"]
        .as_array()
        .unwrap_or_else(|| panic!("{arch}: {fam}"))
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let head_dim = c["head_dim"]
        .as_u64()
        .unwrap_or(n("hidden_size") / n("num_attention_heads"));
    let mut want = vec![
        format!(
            "{} blocks, width {}, vocabulary {}",
            n("num_hidden_layers"),
            n("hidden_size"),
            n("vocab_size")
        ),
        match c["kv_lora_rank"].as_u64() {
            // DeepSeek's multi-head latent attention.
            Some(lat) => format!(
                "multi-head latent attention: {} heads of {} (q·k) / {} (v), {}cached per position: a latent of {lat} and {} rotated key dims",
                n("num_attention_heads"),
                n("qk_nope_head_dim") + n("qk_rope_head_dim"),
                n("v_head_dim"),
                c["q_lora_rank"]
                    .as_u64()
                    .map_or(String::new(), |r| format!("queries through a rank-{r} projection, ")),
                n("qk_rope_head_dim")
            ),
            None => format!(
                "grouped-query attention: {} query / {} KV heads of {head_dim}",
                n("num_attention_heads"),
                n("num_key_value_heads")
            ),
        },
    ];
    let layers = c["layer_types"].as_array();
    let sliding = layers.map_or(0, |l| {
        l.iter().filter(|t| *t == "sliding_attention").count()
    });
    if sliding > 0 {
        // One RoPE base for both kinds of layer (Gemma 2), or one each.
        let rope = &c["rope_parameters"];
        let mut w = format!(
            "sliding window of {} on {sliding} of {} layers",
            n("sliding_window"),
            n("num_hidden_layers"),
        );
        if let Some(base) = rope["sliding_attention"]["rope_theta"].as_f64() {
            w.push_str(&format!(" (RoPE base {base} there)"));
        }
        want.push(w);
    } else {
        assert!(
            !features.iter().any(|f| f.starts_with("sliding window")),
            "{arch}: {features:?}"
        );
    }
    if let Some(e) = c["num_experts"]
        .as_u64()
        .or(c["num_local_experts"].as_u64())
        .or(c["n_routed_experts"].as_u64())
    {
        let width = c["moe_intermediate_size"]
            .as_u64()
            .unwrap_or(n("intermediate_size"));
        // gpt-oss: the clamped SwiGLU at its config's alpha and limit, and
        // a softmax over the chosen experts' logits; the others a softmax
        // over all, renormalized as transformers' routers do (Mixtral
        // always; Qwen3-MoE and DeepSeek by `norm_topk_prob`).
        let (act, mut gating) = match (c["swiglu_alpha"].as_f64(), c["swiglu_limit"].as_f64()) {
            (Some(a), Some(l)) => (
                format!("clamped SwiGLU (alpha {a}, limit {l})"),
                "softmax over the chosen".to_string(),
            ),
            _ => (
                "SwiGLU".to_string(),
                match c["norm_topk_prob"].as_bool().unwrap_or(true) {
                    true => "softmax gating, weights renormalized".to_string(),
                    false => "softmax gating, weights not renormalized".to_string(),
                },
            ),
        };
        // DeepSeek: routed scaling, expert groups, shared experts, leading
        // dense layers.
        if let Some(scale) = c["routed_scaling_factor"].as_f64().filter(|&s| s != 1.0) {
            gating.push_str(&format!(", scaled by {scale}"));
        }
        if let (Some(g), Some(k)) = (c["n_group"].as_u64(), c["topk_group"].as_u64()) {
            if g > 1 {
                gating.push_str(&format!(", from the best {k} of {g} expert groups"));
            }
        }
        if let Some(s) = c["n_shared_experts"].as_u64().filter(|&s| s > 0) {
            gating.push_str(&format!(", plus {s} shared"));
        }
        if let Some(k) = c["first_k_dense_replace"].as_u64().filter(|&k| k > 0) {
            gating.push_str(&format!(
                "; the first {k} layers dense, width {}",
                n("intermediate_size")
            ));
        }
        want.push(format!(
            "{act} experts: {e} routed, {} per token, width {width}, {gating}",
            n("num_experts_per_tok")
        ));
    }
    // YaRN (gpt-oss): factor and original context on the RoPE line.
    let rope = &c["rope_parameters"];
    if rope["rope_type"] == "yarn" {
        let yarn = format!(
            ", YaRN x{} over an original {} positions",
            rope["factor"].as_f64().unwrap(),
            rope["original_max_position_embeddings"].as_u64().unwrap()
        );
        assert!(
            features
                .iter()
                .any(|f| f.starts_with("RoPE") && f.contains(&yarn)),
            "{arch}: {yarn:?} not in {features:?}"
        );
    }
    // SmolLM3: the layers transformers' `no_rope_layer_interval` leaves
    // without RoPE.
    if let Some(every) = c["no_rope_layer_interval"].as_u64() {
        let nope = (1..=n("num_hidden_layers"))
            .filter(|l| l % every == 0)
            .count();
        assert!(
            features.iter().any(|f| f.starts_with("RoPE")
                && f.ends_with(&format!(
                    ", skipped on {nope} of {} layers",
                    n("num_hidden_layers")
                ))),
            "{arch}: {features:?}"
        );
    }
    // Gemma 2's soft-caps.
    for (key, what) in [
        ("attn_logit_softcapping", "attention soft-cap"),
        ("final_logit_softcapping", "final-logit soft-cap"),
    ] {
        if let Some(cap) = c[key].as_f64() {
            want.push(format!("{what} {cap}"));
        }
    }
    // Granite's multipliers.
    let f = |k: &str| c[k].as_f64().map(|v| v as f32);
    if let Some(e) = f("embedding_multiplier") {
        want.push(format!("embeddings scaled by {e}"));
    }
    if let Some(a) = f("attention_multiplier") {
        want.push(format!("attention scale {a}"));
    }
    if let Some(r) = f("residual_multiplier") {
        want.push(format!("block outputs scaled by {r} into the residual"));
    }
    if let Some(l) = f("logits_scaling") {
        want.push(format!("logits divided by {l}"));
    }
    for w in &want {
        assert!(
            features.contains(&w.as_str()),
            "{arch}: {w:?} not in {features:?}"
        );
    }
}
