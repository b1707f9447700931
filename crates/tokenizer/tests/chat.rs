//! Chat templates render exactly what transformers' apply_chat_template renders
//! (testdata/tokenizer/chat_refs.json, made by scripts/make_chat_refs.py).

use crate::common::*;
use gpack_tokenizer::{ChatMessage, Tokenizer};

#[test]
fn chat_templates_match_transformers() {
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("chat_refs.json")).unwrap()).unwrap();
    let convs = refs["conversations"].as_array().unwrap();
    let mut n = 0;
    for name in ["smollm2", "bpe2048", "spm2048"] {
        let t = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        let renders = refs["renders"][name].as_array().unwrap();
        assert_eq!(renders.len(), convs.len() * 2);
        for (k, r) in renders.iter().enumerate() {
            let conv: Vec<ChatMessage> = serde_json::from_value(convs[k / 2].clone()).unwrap();
            let agp = r["add_generation_prompt"].as_bool().unwrap();
            let got = t.apply_chat_template(&conv, agp).unwrap();
            assert_eq!(
                got,
                r["text"].as_str().unwrap(),
                "{name} conversation {} agp={agp}",
                k / 2
            );
            n += 1;
        }
    }
    assert_eq!(n, 36);
}

#[test]
fn chat_template_tricky_fixture() {
    // tricky.json's rendered conversation and its ids.
    let t = tricky();
    for (name, key) in [
        ("smollm2", "smollm2-135m-instruct"),
        ("bpe2048", "bpe2048"),
        ("spm2048", "spm2048"),
    ] {
        let c = &t["chat"][key];
        let tok = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        let conv: Vec<ChatMessage> = serde_json::from_value(c["messages"].clone()).unwrap();
        let text = tok.apply_chat_template(&conv, true).unwrap();
        assert_eq!(text, c["text"].as_str().unwrap(), "{name}");
        let ids: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(&text, false), ids, "{name}");
    }
}

/// Tool-calling templates (Qwen2.5, Llama 3.1, Mistral Nemo) rendered with
/// `tools`, assistant `tool_calls` and `tool` results exactly as
/// transformers renders them (testdata/tokenizer/tool_refs.json, made by
/// scripts/make_tool_refs.py with the tiny fixtures' special tokens).
#[test]
fn tool_templates_match_transformers() {
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("tool_refs.json")).unwrap()).unwrap();
    let dir = testdata().join("../tiny/qwen2/hf");
    let loaded = gpack_tokenizer::load_any(&dir).unwrap();
    let t = loaded.tokenizer().unwrap();
    assert_eq!(
        t.token_text(t.bos().unwrap()).unwrap(),
        refs["special"]["bos_token"].as_str().unwrap()
    );
    let convs = refs["conversations"].as_array().unwrap();
    let mut n = 0;
    for name in ["qwen2.5", "llama3.1", "mistral-nemo"] {
        let src = std::fs::read_to_string(testdata().join(format!("tool_templates/{name}.jinja")))
            .unwrap();
        for (k, want) in refs["renders"][name].as_array().unwrap().iter().enumerate() {
            let got = t
                .apply_chat_template_json(Some(&src), &convs[k], Some(&refs["tools"]), true)
                .unwrap();
            assert_eq!(got, want.as_str().unwrap(), "{name} conversation {k}");
            n += 1;
        }
    }
    assert_eq!(n, 9);
}

/// The chat templates of the families added with the runtime's family table
/// (SmolLM3, Gemma 2, Granite 3.3, Phi-3.5, gpt-oss, DeepSeek-V2), rendered as
/// transformers renders them
/// (testdata/tokenizer/family_chat_refs.json, made by
/// scripts/make_family_chat_refs.py): every conversation with and without the
/// generation prompt, once with `tools`; a turn the template refuses (Gemma
/// 2's system turn) is an error on both sides. Dates a template reads are
/// "<DATE>" in the reference and today's date (UTC) here.
#[test]
fn family_templates_match_transformers() {
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("family_chat_refs.json")).unwrap())
            .unwrap();
    let dir = testdata().join("../tiny/qwen2/hf");
    let loaded = gpack_tokenizer::load_any(&dir).unwrap();
    let t = loaded.tokenizer().unwrap();
    let convs = refs["conversations"].as_array().unwrap();
    let mut n = 0;
    for (name, fmt) in refs["date_formats"].as_object().unwrap() {
        let src =
            std::fs::read_to_string(testdata().join(format!("family_templates/{name}.jinja")))
                .unwrap();
        let renders = refs["renders"][name].as_array().unwrap();
        for (k, want) in renders.iter().enumerate() {
            let (conv, tools) = match want["tools"].as_bool().unwrap() {
                true => (&convs[0], Some(&refs["tools"])),
                false => (&convs[k / 2], None),
            };
            let agp = want["add_generation_prompt"].as_bool().unwrap();
            let got = t.apply_chat_template_json(Some(&src), conv, tools, agp);
            match (&want["text"], got) {
                (serde_json::Value::String(w), Ok(g)) => {
                    let g = match fmt.as_str() {
                        Some(f) => {
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap()
                                .as_secs() as i64;
                            g.replace(&gpack_tokenizer::chat::strftime(now, f), "<DATE>")
                        }
                        None => g,
                    };
                    assert_eq!(&g, w, "{name} render {k}");
                }
                (serde_json::Value::Null, Err(e)) => {
                    let msg = want["error"].as_str().unwrap();
                    // The template's own message, somewhere in the error's chain.
                    let chain: Vec<String> =
                        std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                            .map(|e| e.to_string())
                            .collect();
                    assert!(
                        chain.iter().any(|m| m.contains(msg)),
                        "{name} render {k}: {chain:?}"
                    );
                }
                (w, g) => panic!("{name} render {k}: want {w:?}, got {g:?}"),
            }
            n += 1;
        }
    }
    assert_eq!(n, 54);
}

/// gpt-oss's `reasoning_effort` reaches the template as a variable (the
/// server's request field): the render is transformers' default
/// ("medium") one with the effort changed, and nothing else.
#[test]
fn gpt_oss_reasoning_effort_is_a_template_variable() {
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("family_chat_refs.json")).unwrap())
            .unwrap();
    let src = std::fs::read_to_string(testdata().join("family_templates/gpt-oss.jinja")).unwrap();
    let dir = testdata().join("../tiny/qwen2/hf");
    let loaded = gpack_tokenizer::load_any(&dir).unwrap();
    let t = loaded.tokenizer().unwrap();
    let conv = &refs["conversations"][0];
    let want = refs["renders"]["gpt-oss"][1]["text"].as_str().unwrap();
    assert!(want.contains("Reasoning: medium\n"));
    let mut kw = serde_json::Map::new();
    kw.insert("reasoning_effort".into(), "high".into());
    // Also: a kwarg cannot replace the messages.
    kw.insert("messages".into(), serde_json::json!([]));
    let got = t
        .apply_chat_template_kwargs(Some(&src), conv, None, true, &kw)
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let got = got.replace(&gpack_tokenizer::chat::strftime(now, "%Y-%m-%d"), "<DATE>");
    assert_eq!(got, want.replace("Reasoning: medium", "Reasoning: high"));
}
