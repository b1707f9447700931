//! `cargo run --release -p gpack-runtime --example generate -- MODEL [-n N] [--temp T] [--chat] PROMPT`
//!
//! Greedy (default) or sampled generation with streaming output, from a GGUF
//! file or a Hugging Face directory through the GGUF provider.

use gpack_runtime::{generate, GenerateConfig, GgufWeights, Model, SamplerConfig};
use std::io::Write;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut rest = Vec::new();
    let mut n = 32usize;
    let mut temp = 0.0f32;
    let mut chat = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-n" => {
                n = args[i + 1].parse().expect("-n N");
                i += 1;
            }
            "--temp" => {
                temp = args[i + 1].parse().expect("--temp T");
                i += 1;
            }
            "--chat" => chat = true,
            a => rest.push(a.to_string()),
        }
        i += 1;
    }
    let [path, prompt] =
        <[String; 2]>::try_from(rest).expect("usage: generate MODEL [-n N] [--temp T] PROMPT");
    let t = Instant::now();
    let w = GgufWeights::open(path.as_ref()).expect("open");
    let m = Model::load_with(
        &w,
        &gpack_runtime::LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}")),
    )
    .expect("load");
    let tok_bytes = gpack_tokenizer::load_any(path.as_ref()).expect("tokenizer");
    let tok = tok_bytes.tokenizer().expect("tokenizer");
    eprintln!("load {:.3} s", t.elapsed().as_secs_f64());
    let text = if chat {
        let msgs = [gpack_tokenizer::ChatMessage::new("user", prompt.clone())];
        tok.apply_chat_template(&msgs, true).expect("chat template")
    } else {
        prompt.clone()
    };
    let ids = tok.encode(&text, true);
    eprintln!("prompt ids {ids:?}");
    let mut s = m.new_state(ids.len() + n + 1);
    let sampler = if temp > 0.0 {
        SamplerConfig {
            temperature: temp,
            ..SamplerConfig::default()
        }
    } else {
        SamplerConfig::greedy()
    };
    let cfg = GenerateConfig {
        max_tokens: n,
        sampler,
        stop_tokens: tok.stop_ids(),
        ..GenerateConfig::default()
    };
    print!("{text}");
    let g = generate(&m, &mut s, &ids, &cfg, Some(tok), |_, text| {
        print!("{text}");
        let _ = std::io::stdout().flush();
        true
    })
    .expect("generate");
    println!();
    eprintln!(
        "ids {:?}\nstop {:?}; prompt {} tok at {:.1} tok/s; {} tok at {:.1} tok/s",
        g.tokens,
        g.stop,
        g.prompt_tokens,
        g.prefill_tps(),
        g.tokens.len(),
        g.decode_tps()
    );
}
