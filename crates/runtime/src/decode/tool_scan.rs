//! The model's tool-call text read as far as it has been generated, so that a
//! stream sends each call's name as soon as its string is closed and its
//! arguments in fragments as they are written (OpenAI `tool_calls` deltas).
//!
//! One rule makes the stream and the whole answer agree: a call's
//! `arguments` is the model's own JSON text of that value with the
//! whitespace outside strings removed (key order, number spelling and
//! escapes kept as written). That text only grows as tokens arrive, so the
//! fragments a stream sends concatenate, for any split of the text, to the
//! `arguments` of the non-streamed answer ([`super::tools::parse_output`]
//! takes them from here too). A value written as a JSON string (some models
//! quote their arguments) is decoded, and only once it is closed.
//!
//! The scan is lenient: it says how far the text looks like calls.
//! Whether the finished text *is* a call is decided by `parse_output`
//! (serde_json over the whole body).

use super::tools::Format;

/// One call as far as the text shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    /// The function name, once its string is closed.
    pub name: Option<String>,
    /// The arguments' text so far (see the module docs); `{}` for a closed
    /// call that has none.
    pub arguments: String,
    /// The call's object is closed.
    pub done: bool,
}

/// The calls in `text`, which starts at the format's marker (see
/// [`Format::marker`]; for Llama 3 the text may also start with
/// `<|python_tag|>` or whitespace).
pub fn scan(format: Format, text: &str) -> Vec<Partial> {
    let mut out = Vec::new();
    match format {
        Format::Hermes => {
            const OPEN: &str = "<tool_call>";
            let mut rest = text;
            while let Some(i) = rest.find(OPEN) {
                let body = &rest[i + OPEN.len()..];
                let Some((p, used)) = object(body, &["arguments"]) else {
                    break;
                };
                let done = p.done;
                out.push(p);
                if !done {
                    break;
                }
                rest = &body[used..];
            }
        }
        Format::Llama3 => {
            let t = text.trim_start();
            let t = t.strip_prefix("<|python_tag|>").unwrap_or(t);
            if let Some((p, _)) = object(t, &["parameters", "arguments"]) {
                out.push(p);
            }
        }
        Format::Mistral => {
            let Some(t) = text.strip_prefix("[TOOL_CALLS]") else {
                return out;
            };
            let b = t.as_bytes();
            let i = skip_ws(b, 0);
            if b.get(i) != Some(&b'[') {
                if let Some((p, _)) = object(t, &["arguments"]) {
                    out.push(p);
                }
                return out;
            }
            let mut i = i + 1;
            loop {
                i = skip_ws(b, i);
                if b.get(i) == Some(&b',') {
                    i += 1;
                    continue;
                }
                let Some((p, used)) = object(&t[i..], &["arguments"]) else {
                    break;
                };
                let done = p.done;
                out.push(p);
                if !done {
                    break;
                }
                i += used;
            }
        }
    }
    out
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end of the JSON string starting at `b[i] == b'"'` (one past its
/// closing quote), or None while it is open.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The end of the JSON value starting at `b[i]` and whether it is closed
/// (an open value ends at the text's end).
fn value_end(b: &[u8], i: usize) -> (usize, bool) {
    match b[i] {
        b'"' => string_end(b, i).map_or((b.len(), false), |e| (e, true)),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => match string_end(b, j) {
                        Some(e) => {
                            j = e;
                            continue;
                        }
                        None => return (b.len(), false),
                    },
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return (j + 1, true);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            (b.len(), false)
        }
        _ => {
            // A number, true, false or null: ends where the next token starts.
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j, j < b.len())
        }
    }
}

/// `raw` without the whitespace outside its strings.
fn minify(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let e = string_end(b, i).unwrap_or(b.len()).min(b.len());
            out.push_str(&raw[i..e]);
            i = e;
        } else {
            let j = (i..b.len()).find(|&j| b[j] == b'"').unwrap_or(b.len());
            out.extend(raw[i..j].chars().filter(|c| !c.is_ascii_whitespace()));
            i = j;
        }
    }
    out
}

/// The call object at the start of `s` (after whitespace): what it shows
/// and the bytes it takes, or None when no object has begun (or the text is
/// not one).
fn object(s: &str, args_keys: &[&str]) -> Option<(Partial, usize)> {
    let b = s.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut p = Partial::default();
    let mut args: Option<String> = None;
    loop {
        i = skip_ws(b, i);
        match b.get(i) {
            None => break,
            Some(b'}') => {
                p.done = true;
                i += 1;
                break;
            }
            Some(b',') => {
                i += 1;
                continue;
            }
            Some(b'"') => {}
            Some(_) => break, // not JSON: the scan stops here
        }
        let Some(kend) = string_end(b, i) else { break };
        let Ok(key) = serde_json::from_str::<String>(&s[i..kend]) else {
            break;
        };
        i = skip_ws(b, kend);
        if b.get(i) != Some(&b':') {
            break;
        }
        i = skip_ws(b, i + 1);
        if i >= b.len() {
            break;
        }
        let (vend, closed) = value_end(b, i);
        let raw = &s[i..vend];
        if key == "name" {
            if closed {
                p.name = serde_json::from_str::<String>(raw).ok();
            }
        } else if args.is_none() && args_keys.contains(&key.as_str()) {
            args = Some(if raw.starts_with('"') {
                // Arguments written as a string of JSON: sent once whole.
                match closed {
                    true => serde_json::from_str::<String>(raw).unwrap_or_default(),
                    false => String::new(),
                }
            } else {
                minify(raw)
            });
        }
        i = vend;
        if !closed {
            break;
        }
    }
    p.arguments = match (args, p.done) {
        (Some(a), _) => a,
        (None, true) => "{}".into(),
        (None, false) => String::new(),
    };
    Some((p, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CASES: &[(Format, &str)] = &[
        (
            Format::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, \\\"the\\\" city\", \"days\": [1, 2.5e1, -3], \"x\": {\"deep\": true}}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"b\": null}, \"name\": \"t\"}\n</tool_call>",
        ),
        (
            Format::Hermes,
            "<tool_call>{\"name\": \"quoted\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
        ),
        (
            Format::Hermes,
            "<tool_call>{\"name\": \"none\"}</tool_call>",
        ),
        (
            Format::Llama3,
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Köln 🌧\", \"n\": 12}}",
        ),
        (
            Format::Mistral,
            "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {\"s\": \"}]\"}}]",
        ),
        (
            Format::Mistral,
            "[TOOL_CALLS]{\"name\": \"one\", \"arguments\": {\"k\": [ ]}}",
        ),
    ];

    /// What a stream sends when the text arrives cut at `cuts`: per call,
    /// its name when first seen and the arguments' new bytes at each cut.
    fn streamed(f: Format, text: &str, cuts: &[usize]) -> Vec<(String, String)> {
        let mut sent: Vec<(String, String)> = Vec::new();
        for &c in cuts.iter().chain([text.len()].iter()) {
            for (k, p) in scan(f, &text[..c]).into_iter().enumerate() {
                let Some(name) = p.name else { break };
                if k == sent.len() {
                    sent.push((name.clone(), String::new()));
                }
                assert_eq!(sent[k].0, name, "a sent name never changes");
                assert!(
                    p.arguments.starts_with(&sent[k].1),
                    "arguments only grow: {:?} then {:?}",
                    sent[k].1,
                    p.arguments
                );
                sent[k].1 = p.arguments;
            }
        }
        sent
    }

    #[test]
    fn the_whole_text_gives_every_call() {
        let names = |f, t| -> Vec<(Option<String>, String, bool)> {
            scan(f, t)
                .into_iter()
                .map(|p| (p.name, p.arguments, p.done))
                .collect()
        };
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            names(CASES[0].0, CASES[0].1),
            vec![
                (
                    s("get_weather"),
                    "{\"city\":\"Paris, \\\"the\\\" city\",\"days\":[1,2.5e1,-3],\"x\":{\"deep\":true}}"
                        .into(),
                    true
                ),
                (s("t"), "{\"b\":null}".into(), true)
            ]
        );
        assert_eq!(
            names(CASES[1].0, CASES[1].1),
            vec![(s("quoted"), "{\"a\": 1}".into(), true)]
        );
        assert_eq!(
            names(CASES[2].0, CASES[2].1),
            vec![(s("none"), "{}".into(), true)]
        );
        assert_eq!(
            names(CASES[3].0, CASES[3].1),
            vec![(
                s("get_weather"),
                "{\"city\":\"Köln 🌧\",\"n\":12}".into(),
                true
            )]
        );
        assert_eq!(
            names(CASES[4].0, CASES[4].1),
            vec![
                (s("a"), "{\"x\":1}".into(), true),
                (s("b"), "{\"s\":\"}]\"}".into(), true)
            ]
        );
        assert_eq!(
            names(CASES[5].0, CASES[5].1),
            vec![(s("one"), "{\"k\":[]}".into(), true)]
        );
        // Not calls: nothing, or an open object that never names a function.
        assert!(scan(Format::Hermes, "<tool_call>not json</tool_call>").is_empty());
        assert!(scan(Format::Mistral, "[TOOL_CALLS] oops").is_empty());
        let p = scan(Format::Hermes, "<tool_call>{\"name\": 3}");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].name, None);
    }

    #[test]
    fn every_split_of_the_text_streams_the_same_calls() {
        for &(f, text) in CASES {
            let whole = streamed(f, text, &[]);
            let bounds: Vec<usize> = (0..=text.len())
                .filter(|&c| text.is_char_boundary(c))
                .collect();
            // Cut at every boundary (a byte at a time), and at every pair.
            assert_eq!(streamed(f, text, &bounds), whole, "{text}");
            for &a in &bounds {
                for &b in bounds.iter().filter(|&&b| b > a).step_by(7) {
                    assert_eq!(streamed(f, text, &[a, b]), whole, "{text} cut at {a}, {b}");
                }
            }
        }
    }

    #[test]
    fn arguments_arrive_before_the_call_closes() {
        let text = CASES[0].1;
        let at = text.find("Paris").unwrap() + 3;
        let p = scan(Format::Hermes, &text[..at]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].name.as_deref(), Some("get_weather"));
        assert_eq!(p[0].arguments, "{\"city\":\"Par");
        assert!(!p[0].done);
    }
}
