//! Chat templates rendered with minijinja the way `transformers`' `apply_chat_template` does.
//!
//! transformers compiles templates in a sandboxed Jinja2 environment with
//! `trim_blocks=True, lstrip_blocks=True`, the `loopcontrols` extension, a `raise_exception`
//! global, a `strftime_now` global and its own `tojson` filter (Python `json.dumps`,
//! `ensure_ascii=False`). The same setup is reproduced here; Python string/dict methods
//! (`.strip()`, `.startswith()`, `.items()`...) come from minijinja-contrib's pycompat.
//! No loader is installed, so templates cannot read files or the network.

use crate::error::{Error, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`...
    pub role: String,
    /// Text content.
    pub content: String,
}

impl ChatMessage {
    /// A message.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTemplate")
    }
}

/// Python `json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`.
fn py_json(
    v: &serde_json::Value,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    let (item_sep, key_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    let nl = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.is_finite() && f == f.trunc() && f.abs() < 1e16 {
                    out.push_str(&format!("{f:.1}"));
                } else {
                    out.push_str(&n.to_string());
                }
            } else {
                out.push_str(&n.to_string());
            }
        }
        J::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        J::Array(a) => {
            if a.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (k, x) in a.iter().enumerate() {
                if k > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                py_json(x, indent, sort_keys, depth + 1, out);
            }
            nl(out, depth);
            out.push(']');
        }
        J::Object(m) => {
            if m.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            if sort_keys {
                keys.sort();
            }
            for (k, key) in keys.into_iter().enumerate() {
                if k > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                py_json(&J::String(key.clone()), None, false, 0, out);
                out.push_str(key_sep);
                py_json(&m[key], indent, sort_keys, depth + 1, out);
            }
            nl(out, depth);
            out.push('}');
        }
    }
}

fn tojson(v: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let j = serde_json::to_value(&v)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut s = String::new();
    py_json(&j, indent, sort_keys.unwrap_or(false), 0, &mut s);
    Ok(Value::from_safe_string(s))
}

/// Python's `str.strip()` whitespace (differs from Rust's `char::is_whitespace` on U+001C..U+001F).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn trim(s: String, chars: Option<String>) -> String {
    match chars {
        Some(cs) => s.trim_matches(|c| cs.contains(c)).to_string(),
        None => s.trim_matches(py_space).to_string(),
    }
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(fmt)`: the current UTC time formatted with the common `%` codes.
fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(secs as i64, &fmt)
}

/// Format Unix time `t` (UTC). Supports %Y %m %d %H %M %S %y %B %b %A %a %j %e %p %I %%.
pub fn strftime(t: i64, fmt: &str) -> String {
    let days = t.div_euclid(86400);
    let sod = t.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let mut y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    if m <= 2 {
        y += 1;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + if leap && m > 2 { 1 } else { 0 };
    let wday = (days + 4).rem_euclid(7); // 1970-01-01 was a Thursday
    const MON: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAY: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", if hh % 12 == 0 { 12 } else { hh % 12 })),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('B') => out.push_str(MON[(m - 1) as usize]),
            Some('b') => out.push_str(&MON[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAY[wday as usize]),
            Some('a') => out.push_str(&DAY[wday as usize][..3]),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

impl ChatTemplate {
    /// Compile a template.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_filter("trim", trim);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source.to_string())
            .map_err(|source| Error::Template {
                what: "compile",
                source,
            })?;
        Ok(ChatTemplate { env })
    }

    /// Render `messages`. `extra` adds variables (`bos_token`, `eos_token`, `tools`...).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &[(&str, Value)],
    ) -> Result<String> {
        let mut ctx: std::collections::BTreeMap<String, Value> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        self.render_value(Value::from(ctx))
    }

    /// Render with a free-form context (messages with tool calls, documents...).
    pub fn render_value(&self, ctx: Value) -> Result<String> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|source| Error::Template {
                what: "compile",
                source,
            })?;
        t.render(ctx).map_err(|source| Error::Template {
            what: "render",
            source,
        })
    }
}

impl crate::Tokenizer<'_> {
    /// Render the stored chat template with `bos_token`/`eos_token` set from this tokenizer.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let src = self.chat_template().ok_or(Error::Missing {
            what: "chat template",
        })?;
        let t = ChatTemplate::new(src)?;
        t.render(messages, add_generation_prompt, &self.special_names())
    }

    /// Render `template` (the stored one when `None`) as transformers'
    /// `apply_chat_template(messages, tools=tools)` does: `messages` as given
    /// (assistant `tool_calls`, `tool` results...), `tools` a list of
    /// function definitions or none.
    pub fn apply_chat_template_json(
        &self,
        template: Option<&str>,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.apply_chat_template_kwargs(
            template,
            messages,
            tools,
            add_generation_prompt,
            &serde_json::Map::new(),
        )
    }

    /// [`Self::apply_chat_template_json`] with more template variables, as
    /// transformers' `apply_chat_template(..., **kwargs)` passes them (e.g.
    /// gpt-oss's `reasoning_effort`). They cannot replace `messages`,
    /// `tools`, `add_generation_prompt` or the special-token names.
    pub fn apply_chat_template_kwargs(
        &self,
        template: Option<&str>,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let src = template.or(self.chat_template()).ok_or(Error::Missing {
            what: "chat template",
        })?;
        let t = ChatTemplate::new(src)?;
        let mut ctx: std::collections::BTreeMap<String, Value> = self
            .special_names()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        for (k, v) in kwargs {
            ctx.entry(k.clone())
                .or_insert_with(|| Value::from_serialize(v));
        }
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("tools".into(), Value::from_serialize(tools));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        t.render_value(Value::from(ctx))
    }

    /// `bos_token`, `eos_token`, `pad_token`, `unk_token` as templates see them.
    fn special_names(&self) -> [(&'static str, Value); 4] {
        let name = |id: Option<u32>| {
            id.and_then(|i| self.token_text(i))
                .map(Value::from)
                .unwrap_or(Value::from(""))
        };
        [
            ("bos_token", name(self.bos())),
            ("eos_token", name(self.eos())),
            ("pad_token", name(self.gbt1().pad())),
            ("unk_token", name(self.gbt1().unk())),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known() {
        // 2024-02-29 13:05:09 UTC
        assert_eq!(
            strftime(1_709_211_909, "%Y-%m-%d %H:%M:%S %a %b %j"),
            "2024-02-29 13:05:09 Thu Feb 060"
        );
        assert_eq!(strftime(0, "%d %B %Y"), "01 January 1970");
    }

    #[test]
    fn hf_extras() {
        let t = ChatTemplate::new("{% for m in messages %}{% if loop.index0 == 5 %}{% break %}{% endif %}{{ m.content | tojson }}{{ m.role.upper() }}\n{% endfor %}{% if add_generation_prompt %}GO{% endif %}").unwrap();
        let msgs = vec![ChatMessage::new("user", "a\"b é")];
        assert_eq!(t.render(&msgs, true, &[]).unwrap(), "\"a\\\"b é\"USER\nGO");
        let e = ChatTemplate::new("{{ raise_exception('nope') }}").unwrap();
        assert!(e.render(&[], false, &[]).is_err());
    }
}
