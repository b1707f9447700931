//! `make_moe OUT.gguf [LAYERS] [EXPERTS]`: a synthetic qwen3moe GGUF, the tiny
//! MoE fixture's architecture scaled up for the expert-mode measurement of
//! `bench/moe.sh` (no real weights needed).
//!
//! Shapes follow Qwen3-30B-A3B's expert block at half width: n_embd 1024,
//! 16 query heads and 4 KV heads of 64, expert FFN 768, 8 of EXPERTS (64 by
//! default) routed experts per token, LAYERS (8) layers; Q8_0 matrices, F32
//! norms and routers. Values are a deterministic pseudo-random pattern (the
//! router spreads tokens over all experts, about uniformly).

use gpack_ingest::gguf::{TensorHeader, Writer};
use gpack_ingest::{GgmlType, GgufString, Metadata, Value};
use std::io::{BufWriter, Write};

const EMBD: u64 = 1024;
const HEADS: u64 = 16;
const KV_HEADS: u64 = 4;
const HEAD_DIM: u64 = 64;
const FF_EXP: u64 = 768;
const USED: u32 = 8;
const VOCAB: u64 = 2048;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn fill(ty: GgmlType, buf: &mut [u8], rng: &mut Rng) {
    match ty {
        GgmlType::Q8_0 => {
            for blk in buf.chunks_mut(34) {
                blk[0..2]
                    .copy_from_slice(&half::f16::from_f32(1.0 / 512.0).to_bits().to_le_bytes());
                for c in blk[2..].chunks_mut(8) {
                    let b = rng.next().to_le_bytes();
                    c.copy_from_slice(&b[..c.len()]);
                }
            }
        }
        GgmlType::F32 => {
            for f in buf.chunks_mut(4) {
                let v = (rng.next() % 2001) as f32 / 1000.0 - 1.0;
                f.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => unreachable!(),
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = args
        .first()
        .expect("usage: make_moe OUT.gguf [LAYERS] [EXPERTS]");
    let layers: u64 = args.get(1).map_or(8, |v| v.parse().expect("LAYERS"));
    let experts: u64 = args.get(2).map_or(64, |v| v.parse().expect("EXPERTS"));

    let mut m = Metadata::new();
    let s = |v: &str| Value::String(GgufString::from_bytes(v.as_bytes().to_vec()));
    let a = "qwen3moe";
    m.insert("general.architecture", s(a));
    m.insert("general.name", s("synthetic-qwen3moe"));
    let u = |v: u64| Value::U32(v as u32);
    for (k, v) in [
        ("block_count", layers),
        ("context_length", 4096),
        ("embedding_length", EMBD),
        ("feed_forward_length", 3 * EMBD),
        ("attention.head_count", HEADS),
        ("attention.head_count_kv", KV_HEADS),
        ("attention.key_length", HEAD_DIM),
        ("attention.value_length", HEAD_DIM),
        ("expert_count", experts),
        ("expert_used_count", u64::from(USED)),
        ("expert_feed_forward_length", FF_EXP),
    ] {
        m.insert(format!("{a}.{k}"), u(v));
    }
    m.insert(format!("{a}.rope.freq_base"), Value::F32(1e6));
    m.insert(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );

    let q = GgmlType::Q8_0;
    let f = GgmlType::F32;
    let mut t: Vec<(String, GgmlType, Vec<u64>)> = vec![
        ("token_embd.weight".into(), q, vec![EMBD, VOCAB]),
        ("output_norm.weight".into(), f, vec![EMBD]),
        ("output.weight".into(), q, vec![EMBD, VOCAB]),
    ];
    for l in 0..layers {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        t.extend([
            (n("attn_norm"), f, vec![EMBD]),
            (n("attn_q"), q, vec![EMBD, HEADS * HEAD_DIM]),
            (n("attn_k"), q, vec![EMBD, KV_HEADS * HEAD_DIM]),
            (n("attn_v"), q, vec![EMBD, KV_HEADS * HEAD_DIM]),
            (n("attn_q_norm"), f, vec![HEAD_DIM]),
            (n("attn_k_norm"), f, vec![HEAD_DIM]),
            (n("attn_output"), q, vec![HEADS * HEAD_DIM, EMBD]),
            (n("ffn_norm"), f, vec![EMBD]),
            (n("ffn_gate_inp"), f, vec![EMBD, experts]),
            (n("ffn_gate_exps"), q, vec![EMBD, FF_EXP, experts]),
            (n("ffn_up_exps"), q, vec![EMBD, FF_EXP, experts]),
            (n("ffn_down_exps"), q, vec![FF_EXP, EMBD, experts]),
        ]);
    }
    let headers: Vec<TensorHeader> = t
        .iter()
        .map(|(name, ty, dims)| TensorHeader {
            name: name.clone(),
            ggml_type: *ty,
            dims: dims.clone(),
        })
        .collect();
    let file = BufWriter::with_capacity(8 << 20, std::fs::File::create(out)?);
    let mut w = Writer::new(file, &m, &headers).map_err(std::io::Error::other)?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut buf = Vec::new();
    let mut total = 0u64;
    for h in &headers {
        let n = h.dims.iter().product::<u64>();
        buf.resize(h.ggml_type.bytes_for(n).expect("size") as usize, 0);
        if h.name.contains("norm") {
            buf.chunks_mut(4)
                .for_each(|c| c.copy_from_slice(&1.0f32.to_le_bytes()));
        } else {
            fill(h.ggml_type, &mut buf, &mut rng);
        }
        total += buf.len() as u64;
        w.write_tensor_data(&buf).map_err(std::io::Error::other)?;
    }
    w.finish().map_err(std::io::Error::other)?.flush()?;
    println!(
        "{out}: {layers} layers × {experts} experts ({USED} used), {:.2} GB of tensors",
        total as f64 / 1e9
    );
    Ok(())
}
