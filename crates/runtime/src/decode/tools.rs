//! Tool calls in a model's output: the formats model families write them in
//! ([`Format`]), and a finished answer split into its text and its calls
//! ([`parse_output`]). The streaming side is [`super::tool_scan`] and
//! [`super::reply`]; the request side (the `tools` parameter, the template,
//! the call grammar) is gpack-api's.
//!
//! Formats, chosen from what the template writes:
//! - Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number;
//! - Llama 3.x: the answer is one JSON object `{"name": ..., "parameters": {...}}`,
//!   optionally after `<|python_tag|>`;
//! - Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.

use serde_json::{json, Value};

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>{json}</tool_call>` (Qwen 2.5/3, Hermes, ChatML models).
    Hermes,
    /// A bare `{"name", "parameters"}` object (Llama 3.1+).
    Llama3,
    /// `[TOOL_CALLS][...]` (Mistral).
    Mistral,
}

impl Format {
    /// The format a chat template asks for (Hermes when it names none: the
    /// ChatML convention).
    pub fn detect(template: &str) -> Format {
        if template.contains("[TOOL_CALLS]") {
            Format::Mistral
        } else if template.contains("<tool_call>") {
            Format::Hermes
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            Format::Llama3
        } else {
            Format::Hermes
        }
    }

    /// Text that starts a tool call in this format (what the stream holds
    /// back once seen).
    pub fn marker(self) -> &'static str {
        match self {
            Format::Hermes => "<tool_call>",
            Format::Llama3 => "{\"name\"",
            Format::Mistral => "[TOOL_CALLS]",
        }
    }
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Function name.
    pub name: String,
    /// Arguments, as the JSON text OpenAI sends.
    pub arguments: String,
}

fn call_of(v: &Value, args_key: &str) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get(args_key)
        .or_else(|| v.get("arguments"))
        .cloned()
        .unwrap_or(json!({}));
    let arguments = match args {
        Value::String(s) => s,
        v => v.to_string(),
    };
    Some(Call { name, arguments })
}

/// Splits a finished answer into its text and its tool calls (none: the
/// text is the answer, as written). Whether there are calls is decided by
/// parsing each call's JSON; their `arguments` are the text a stream sends
/// ([`super::tool_scan`]), so streamed and whole answers agree.
pub fn parse_output(format: Format, text: &str) -> (String, Vec<Call>) {
    let (content, mut calls) = parse_json(format, text);
    let from = match format {
        Format::Llama3 => Some(0),
        f => text.find(f.marker()),
    };
    if let Some(from) = from.filter(|_| !calls.is_empty()) {
        let scanned = super::tool_scan::scan(format, &text[from..]);
        let agree = scanned.len() == calls.len()
            && scanned
                .iter()
                .zip(&calls)
                .all(|(p, c)| p.done && p.name.as_deref() == Some(c.name.as_str()));
        if agree {
            for (c, p) in calls.iter_mut().zip(scanned) {
                c.arguments = p.arguments;
            }
        }
    }
    (content, calls)
}

fn parse_json(format: Format, text: &str) -> (String, Vec<Call>) {
    match format {
        Format::Hermes => {
            let mut calls = Vec::new();
            let mut content = String::new();
            let mut rest = text;
            while let Some(i) = rest.find("<tool_call>") {
                content.push_str(&rest[..i]);
                let after = &rest[i + "<tool_call>".len()..];
                let (body, next) = match after.find("</tool_call>") {
                    Some(j) => (&after[..j], &after[j + "</tool_call>".len()..]),
                    None => (after, ""),
                };
                match serde_json::from_str::<Value>(body.trim())
                    .ok()
                    .and_then(|v| call_of(&v, "arguments"))
                {
                    Some(c) => calls.push(c),
                    None => return (text.to_string(), Vec::new()),
                }
                rest = next;
            }
            content.push_str(rest);
            (content.trim().to_string(), calls)
        }
        Format::Llama3 => {
            let body = text.trim();
            let body = body.strip_prefix("<|python_tag|>").unwrap_or(body).trim();
            match serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| call_of(&v, "parameters"))
            {
                Some(c) => (String::new(), vec![c]),
                None => (text.to_string(), Vec::new()),
            }
        }
        Format::Mistral => {
            let Some(i) = text.find("[TOOL_CALLS]") else {
                return (text.to_string(), Vec::new());
            };
            let body = text[i + "[TOOL_CALLS]".len()..].trim();
            let calls: Option<Vec<Call>> =
                serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| match v {
                        Value::Array(a) => a.iter().map(|c| call_of(c, "arguments")).collect(),
                        o => call_of(&o, "arguments").map(|c| vec![c]),
                    });
            match calls {
                Some(c) if !c.is_empty() => (text[..i].trim().to_string(), c),
                _ => (text.to_string(), Vec::new()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_format() {
        let (c, calls) = parse_output(
            Format::Hermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {}}\n</tool_call>",
        );
        assert_eq!(c, "Let me check.");
        assert_eq!(
            calls,
            vec![
                Call {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                },
                Call {
                    name: "t".into(),
                    arguments: "{}".into()
                }
            ]
        );
        let (c, calls) = parse_output(
            Format::Llama3,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        );
        assert_eq!((c.as_str(), calls[0].name.as_str()), ("", "get_weather"));
        assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
        let (_, calls) = parse_output(
            Format::Mistral,
            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
        );
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, "{\"x\":1}");
        // Arguments are the model's JSON as written, whitespace outside
        // strings removed (key order and spelling kept): what a stream sends.
        let (_, calls) = parse_output(
            Format::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"z\": 1.50, \"a\": \"x y\"}}</tool_call>",
        );
        assert_eq!(calls[0].arguments, "{\"z\":1.50,\"a\":\"x y\"}");
        // Text that only looks like a call stays text.
        for (f, t) in [
            (Format::Hermes, "<tool_call>not json</tool_call>"),
            (Format::Llama3, "{\"city\": 1}"),
            (Format::Mistral, "[TOOL_CALLS] oops"),
            (Format::Hermes, "plain answer"),
        ] {
            let (c, calls) = parse_output(f, t);
            assert!(calls.is_empty() && c == t, "{f:?} {t:?}");
        }
    }
}
