//! Tool calling: `tools` and `tool_choice` checked, the conversation given
//! to the model's own chat template as transformers does (`tools=...`,
//! assistant `tool_calls`, `tool` results), the model's tool-call text
//! parsed back into OpenAI `tool_calls`, and for `tool_choice` `required` or
//! a named function, the grammar (llguidance Lark with `%json`) that makes
//! the model write a well-formed call.
//!
//! Formats, chosen from what the template writes:
//! - Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number;
//! - Llama 3.x: the answer is one JSON object `{"name": ..., "parameters": {...}}`,
//!   optionally after `<|python_tag|>`;
//! - Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.

use crate::api::ApiError;
use gpack_tokenizer::Tokenizer;
use serde_json::{json, Value};

/// Most tools per request.
pub const MAX_TOOLS: usize = 64;
/// Largest `tools` array, in bytes of JSON.
pub const MAX_TOOLS_BYTES: usize = 64 * 1024;

pub use gpack_runtime::decode::tools::Format;

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The model decides.
    Auto,
    /// No calls: tools are shown, the answer is text.
    None,
    /// At least one call (grammar-constrained).
    Required,
    /// A call of this function (grammar-constrained).
    Named(String),
}

/// A request's tools, checked.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `tools` array as the template gets it.
    pub list: Value,
    /// Each tool's name and parameter schema.
    pub functions: Vec<(String, Value)>,
    /// `tool_choice`.
    pub choice: Choice,
}

fn bad(msg: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::invalid(msg, Some(param))
}

/// Checks `tools` and `tool_choice` (None: no tools).
pub fn parse(tools: Option<&Value>, choice: Option<&Value>) -> Result<Option<Tools>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => {
            if choice.is_some_and(|c| !c.is_null() && c != "none" && c != "auto") {
                return Err(bad("tool_choice needs tools", "tool_choice"));
            }
            return Ok(None);
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools must be an array", "tools")),
    };
    if list.len() > MAX_TOOLS {
        return Err(bad(
            format!("at most {MAX_TOOLS} tools are allowed"),
            "tools",
        ));
    }
    if serde_json::to_vec(list).map_or(usize::MAX, |v| v.len()) > MAX_TOOLS_BYTES {
        return Err(bad(
            format!("tools are larger than {MAX_TOOLS_BYTES} bytes"),
            "tools",
        ));
    }
    let mut functions = Vec::with_capacity(list.len());
    for t in list {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(
                "each tool must be {\"type\": \"function\", ...}",
                "tools",
            ));
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("a tool needs a function object", "tools"))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| {
                !n.is_empty()
                    && n.len() <= 64
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .ok_or_else(|| {
                bad(
                    "a function name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                    "tools",
                )
            })?;
        if functions.iter().any(|(n, _)| n == name) {
            return Err(bad(format!("function {name:?} is defined twice"), "tools"));
        }
        let params = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(bad(
                    "function parameters must be a JSON schema object",
                    "tools",
                ))
            }
        };
        functions.push((name.to_string(), params));
    }
    let choice = match choice {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Choice::Auto,
            "none" => Choice::None,
            "required" => Choice::Required,
            other => {
                return Err(bad(
                    format!("tool_choice {other:?} is not one of auto, none, required"),
                    "tool_choice",
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad(
                        "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tool_choice",
                    )
                })?;
            if !functions.iter().any(|(n, _)| n == name) {
                return Err(bad(
                    format!("tool_choice names {name:?}, which is not among the tools"),
                    "tool_choice",
                ));
            }
            Choice::Named(name.to_string())
        }
        Some(_) => {
            return Err(bad(
                "tool_choice must be a string or an object",
                "tool_choice",
            ))
        }
    };
    if list.is_empty() && matches!(choice, Choice::Required) {
        return Err(bad(
            "tool_choice required needs at least one tool",
            "tool_choice",
        ));
    }
    Ok(Some(Tools {
        list: Value::Array(list.clone()),
        functions,
        choice,
    }))
}

/// One OpenAI message as chat templates expect it: text content, and an
/// assistant's `tool_calls` with `arguments` as an object (OpenAI sends a
/// JSON string; templates `tojson` an object).
pub fn template_message(
    role: &str,
    content: Option<String>,
    tool_calls: Option<&Value>,
    tool_call_id: Option<&str>,
    name: Option<&str>,
) -> Result<Value, ApiError> {
    let mut m = json!({"role": role, "content": content});
    if let Some(calls) = tool_calls {
        let calls = calls
            .as_array()
            .ok_or_else(|| bad("tool_calls must be an array", "messages"))?;
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            let f = c
                .get("function")
                .ok_or_else(|| bad("a tool call needs a function", "messages"))?;
            let args = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                    bad(format!("tool call arguments are not JSON: {e}"), "messages")
                })?,
                Some(v) => v.clone(),
                None => json!({}),
            };
            out.push(json!({
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args},
            }));
        }
        m["tool_calls"] = Value::Array(out);
    }
    if let Some(id) = tool_call_id {
        m["tool_call_id"] = json!(id);
    }
    if let Some(n) = name {
        m["name"] = json!(n);
    }
    Ok(m)
}

/// A literal in a Lark grammar: a special token by id when the vocabulary
/// has `text` as one, else the quoted text.
fn lark_literal(tok: &Tokenizer<'_>, text: &str) -> String {
    match tok.token_to_id(text) {
        Some(id) if tok.is_special(id) => format!("<[{id}]>"),
        _ => serde_json::to_string(text).unwrap_or_default(),
    }
}

/// The grammar for `tool_choice` `required` / named, or None for `auto` /
/// `none`.
pub fn grammar(t: &Tools, format: Format, tok: &Tokenizer<'_>) -> Option<String> {
    let names: Vec<&(String, Value)> = match &t.choice {
        Choice::Auto | Choice::None => return None,
        Choice::Required => t.functions.iter().collect(),
        Choice::Named(n) => t.functions.iter().filter(|(m, _)| m == n).collect(),
    };
    let args_key = if format == Format::Llama3 {
        "parameters"
    } else {
        "arguments"
    };
    let one = |(n, p): &&(String, Value)| {
        json!({"type": "object", "properties": {"name": {"const": n}, args_key: p},
               "required": ["name", args_key], "additionalProperties": false})
    };
    let call = json!({"anyOf": names.iter().map(one).collect::<Vec<_>>(),
                      "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}});
    Some(match format {
        Format::Hermes => format!(
            "start: {} \"\\n\" call \"\\n\" {}\ncall: %json {}\n",
            lark_literal(tok, "<tool_call>"),
            lark_literal(tok, "</tool_call>"),
            call
        ),
        Format::Llama3 => format!("start: call\ncall: %json {call}\n"),
        Format::Mistral => format!(
            "start: {} \"[\" call \"]\"\ncall: %json {}\n",
            lark_literal(tok, "[TOOL_CALLS]"),
            call
        ),
    })
}

pub use gpack_runtime::decode::tools::{parse_output, Call};

/// A tool call id: 9 letters and digits (Mistral's templates require
/// exactly that; others take any string).
pub fn call_id(seed: u64, index: usize) -> String {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..9)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            A[(x >> 33) as usize % A.len()] as char
        })
        .collect()
}

/// The OpenAI `tool_calls` array of a whole answer's `calls` (a stream sends
/// the same ids, names and arguments as deltas).
pub fn tool_calls_json(calls: &[Call], seed: u64) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": call_id(seed, i), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_and_choice_are_checked() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let t = parse(
            Some(&tools),
            Some(&json!({"type": "function", "function": {"name": "f"}})),
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.choice, Choice::Named("f".into()));
        let err =
            |tools: Value, choice: Value| parse(Some(&tools), Some(&choice)).unwrap_err().param;
        assert_eq!(
            err(
                tools.clone(),
                json!({"type": "function", "function": {"name": "g"}})
            ),
            Some("tool_choice")
        );
        assert_eq!(err(tools.clone(), json!("sometimes")), Some("tool_choice"));
        assert_eq!(
            err(json!([{"type": "function"}]), json!("auto")),
            Some("tools")
        );
        assert_eq!(
            err(
                json!([{"type": "function", "function": {"name": "a b"}}]),
                json!("auto")
            ),
            Some("tools")
        );
        assert_eq!(err(json!([]), json!("required")), Some("tool_choice"));
        let many: Vec<Value> = (0..65)
            .map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}}))
            .collect();
        assert_eq!(err(Value::Array(many), json!("auto")), Some("tools"));
        assert_eq!(
            parse(None, Some(&json!("required"))).unwrap_err().param,
            Some("tool_choice")
        );
        let id = call_id(7, 0);
        assert_eq!(id.len(), 9);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, call_id(7, 1));
    }
}
