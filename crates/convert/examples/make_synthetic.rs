//! Makes a synthetic llama-shaped model of a given size, for the memory and
//! throughput measurements of `bench/convert.sh` (no real weights needed):
//!
//!   make_synthetic gguf OUT.gguf GB          Q8_0 matrices, F32 norms, one file
//!   make_synthetic safetensors OUT_DIR GB    F16, sharded (~2 GB shards) + index.json
//!
//! Shapes are Llama-2-7B's (n_embd 4096, ffn 11008, vocab 32000); layers are
//! added until the size is reached. Values are a cheap deterministic pattern.

use gpack_ingest::gguf::{TensorHeader, Writer};
use gpack_ingest::{GgmlType, Metadata, Value};
use std::io::{BufWriter, Write};
use std::path::Path;

const EMBD: u64 = 4096;
const FFN: u64 = 11008;
const VOCAB: u64 = 32000;

fn layer_tensors(l: u64) -> Vec<(String, Vec<u64>)> {
    let p = |n: &str| format!("blk.{l}.{n}.weight");
    vec![
        (p("attn_norm"), vec![EMBD]),
        (p("attn_q"), vec![EMBD, EMBD]),
        (p("attn_k"), vec![EMBD, EMBD]),
        (p("attn_v"), vec![EMBD, EMBD]),
        (p("attn_output"), vec![EMBD, EMBD]),
        (p("ffn_norm"), vec![EMBD]),
        (p("ffn_gate"), vec![EMBD, FFN]),
        (p("ffn_up"), vec![EMBD, FFN]),
        (p("ffn_down"), vec![FFN, EMBD]),
    ]
}

fn model(gb: f64, bytes_per_weight: f64) -> Vec<(String, Vec<u64>)> {
    let mut t = vec![("token_embd.weight".to_string(), vec![EMBD, VOCAB])];
    let per_layer = (4 * EMBD * EMBD + 3 * EMBD * FFN) as f64 * bytes_per_weight;
    let fixed = 2.0 * (EMBD * VOCAB) as f64 * bytes_per_weight;
    let layers = (((gb * 1e9 - fixed) / per_layer).ceil() as u64).max(1);
    for l in 0..layers {
        t.extend(layer_tensors(l));
    }
    t.push(("output_norm.weight".into(), vec![EMBD]));
    t.push(("output.weight".into(), vec![EMBD, VOCAB]));
    t
}

/// Fills `buf` with bytes of `ty`: finite f16 scales for Q8_0, small values for floats.
fn fill(ty: GgmlType, buf: &mut [u8], seed: &mut u64) {
    for c in buf.chunks_mut(8) {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = seed.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
    match ty {
        GgmlType::Q8_0 => {
            for blk in buf.chunks_mut(34) {
                blk[0..2].copy_from_slice(&0x2000u16.to_le_bytes()); // 2^-7
            }
        }
        GgmlType::F16 => {
            for h in buf.chunks_mut(2) {
                h[1] &= 0x2F; // exponent well inside the finite range
            }
        }
        GgmlType::F32 => {
            for f in buf.chunks_mut(4) {
                f.copy_from_slice(&1.0f32.to_le_bytes());
            }
        }
        _ => {}
    }
}

fn metadata(layers: u64) -> Metadata {
    let mut m = Metadata::new();
    let s = |v: &str| Value::String(gpack_ingest::GgufString::from_bytes(v.as_bytes().to_vec()));
    m.insert("general.architecture", s("llama"));
    m.insert("general.name", s("synthetic"));
    m.insert("llama.block_count", Value::U32(layers as u32));
    m.insert("llama.embedding_length", Value::U32(EMBD as u32));
    m.insert("llama.feed_forward_length", Value::U32(FFN as u32));
    m.insert("llama.attention.head_count", Value::U32(32));
    m.insert("llama.attention.head_count_kv", Value::U32(32));
    m.insert("llama.context_length", Value::U32(4096));
    m.insert("llama.rope.freq_base", Value::F32(10000.0));
    m.insert("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    m
}

fn gguf(out: &Path, gb: f64) -> std::io::Result<()> {
    let tensors = model(gb, 34.0 / 32.0);
    let ty = |dims: &[u64]| {
        if dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::Q8_0
        }
    };
    let headers: Vec<TensorHeader> = tensors
        .iter()
        .map(|(n, d)| TensorHeader {
            name: n.clone(),
            ggml_type: ty(d),
            dims: d.clone(),
        })
        .collect();
    let layers = (tensors.len() as u64 - 3) / 9;
    let f = BufWriter::with_capacity(8 << 20, std::fs::File::create(out)?);
    let mut w = Writer::new(f, &metadata(layers), &headers).map_err(std::io::Error::other)?;
    let mut seed = 1u64;
    let mut buf = Vec::new();
    for h in &headers {
        let n = h.dims.iter().product::<u64>();
        buf.resize(h.ggml_type.bytes_for(n).unwrap() as usize, 0);
        fill(h.ggml_type, &mut buf, &mut seed);
        w.write_tensor_data(&buf).map_err(std::io::Error::other)?;
    }
    w.finish().map_err(std::io::Error::other)?.flush()
}

fn hf_name(gguf: &str) -> String {
    let map = [
        ("attn_norm", "input_layernorm"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_output", "self_attn.o_proj"),
        ("ffn_norm", "post_attention_layernorm"),
        ("ffn_gate", "mlp.gate_proj"),
        ("ffn_up", "mlp.up_proj"),
        ("ffn_down", "mlp.down_proj"),
    ];
    match gguf {
        "token_embd.weight" => "model.embed_tokens.weight".into(),
        "output_norm.weight" => "model.norm.weight".into(),
        "output.weight" => "lm_head.weight".into(),
        _ => {
            let mut it = gguf.split('.');
            let (_, l, n) = (it.next(), it.next().unwrap(), it.next().unwrap());
            let hf = map.iter().find(|(g, _)| *g == n).unwrap().1;
            format!("model.layers.{l}.{hf}.weight")
        }
    }
}

fn safetensors(dir: &Path, gb: f64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tensors = model(gb, 2.0);
    let layers = (tensors.len() as u64 - 3) / 9;
    let mut shards: Vec<Vec<&(String, Vec<u64>)>> = vec![Vec::new()];
    let mut size = 0u64;
    for t in &tensors {
        let b = t.1.iter().product::<u64>() * 2;
        if size + b > 2_000_000_000 && !shards.last().unwrap().is_empty() {
            shards.push(Vec::new());
            size = 0;
        }
        size += b;
        shards.last_mut().unwrap().push(t);
    }
    let n = shards.len();
    let mut weight_map = serde_json::Map::new();
    let mut seed = 7u64;
    for (i, shard) in shards.iter().enumerate() {
        let fname = format!("model-{:05}-of-{:05}.safetensors", i + 1, n);
        let mut header = serde_json::Map::new();
        let mut off = 0u64;
        for (name, dims) in shard {
            let b = dims.iter().product::<u64>() * 2;
            let shape: Vec<u64> = dims.iter().rev().copied().collect();
            header.insert(
                hf_name(name),
                serde_json::json!({"dtype": "F16", "shape": shape, "data_offsets": [off, off + b]}),
            );
            weight_map.insert(hf_name(name), fname.clone().into());
            off += b;
        }
        let mut h = serde_json::to_vec(&header)?;
        while h.len() % 8 != 0 {
            h.push(b' ');
        }
        let mut f = BufWriter::with_capacity(8 << 20, std::fs::File::create(dir.join(&fname))?);
        f.write_all(&(h.len() as u64).to_le_bytes())?;
        f.write_all(&h)?;
        let mut buf = Vec::new();
        for (_, dims) in shard {
            buf.resize((dims.iter().product::<u64>() * 2) as usize, 0);
            fill(GgmlType::F16, &mut buf, &mut seed);
            f.write_all(&buf)?;
        }
        f.flush()?;
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&serde_json::json!({"metadata": {}, "weight_map": weight_map}))?,
    )?;
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": EMBD, "intermediate_size": FFN, "num_hidden_layers": layers,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": VOCAB,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": false, "torch_dtype": "float16"
        }))?,
    )
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        eprintln!("usage: make_synthetic gguf|safetensors OUT GB");
        std::process::exit(2);
    }
    let gb: f64 = a[3].parse().expect("GB");
    let out = Path::new(&a[2]);
    let r = match a[1].as_str() {
        "gguf" => gguf(out, gb),
        "safetensors" => safetensors(out, gb),
        _ => {
            eprintln!("kind must be gguf or safetensors");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("make_synthetic: {e}");
        std::process::exit(1);
    }
}
