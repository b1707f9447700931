//! The harmony chat format (gpt-oss): an assistant turn is a sequence of
//! messages, each a header and a body,
//!
//! ```text
//! <|channel|>analysis<|message|>…reasoning…<|end|>
//! <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
//! <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>
//! ```
//!
//! (the prompt ends with `<|start|>assistant`, so generated text starts with
//! the first header). `<|return|>` and `<|call|>` end the turn; `<|end|>`
//! only ends a message, so it is not a stop token for these models
//! ([`crate::Tokenizer::stop_ids`]).
//!
//! [`reply`] turns generated text (special tokens rendered as their text,
//! as the decoders do) into what a chat client shows: the `analysis`
//! channel as reasoning, the `final` channel (and `commentary` without a
//! recipient: preambles) as content, and messages to `functions.NAME` as
//! tool calls. It is a pure function of the text so far, and each field
//! only grows as text is appended, so a streaming server sends the new
//! suffix of each field.

/// A vocabulary with harmony's control tokens.
pub fn is_harmony(tok: &crate::Tokenizer<'_>) -> bool {
    ["<|channel|>", "<|message|>", "<|start|>", "<|call|>"]
        .iter()
        .all(|t| tok.special_id(t).is_some())
}

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const CONSTRAIN: &str = "<|constrain|>";

/// One message of an assistant turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// `analysis`, `commentary`, `final` (empty when the header had none).
    pub channel: String,
    /// `to=…` (e.g. `functions.get_weather`), if any.
    pub recipient: Option<String>,
    /// The body so far.
    pub content: String,
    /// Whether the body was closed (`<|end|>`).
    pub done: bool,
}

/// What a chat client sees of an assistant turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The `analysis` channel's text.
    pub reasoning: String,
    /// The `final` channel's text, and preambles (`commentary` without a
    /// recipient); or all of the text when it has no harmony header.
    pub content: String,
    /// `(function name, arguments as written)` of each message to
    /// `functions.NAME`, in order.
    pub calls: Vec<(String, String)>,
}

/// Whether generated text is in harmony form: it starts with a header
/// (`<|channel|>`, `<|start|>`, ` to=`, `<|constrain|>`), or is a prefix of
/// one of those (more tokens decide).
fn starts_as_header(text: &str) -> bool {
    let t = text.trim_start_matches([' ', '\n']);
    [CHANNEL, START, "to=", CONSTRAIN]
        .iter()
        .any(|h| t.starts_with(h) || (h.starts_with(t) && text.len() < 16))
}

/// Splits generated text into messages (see the module note).
pub fn parse(text: &str) -> Vec<Message> {
    let mut out = Vec::new();
    let mut rest = text;
    // Header: up to `<|message|>` (an unfinished header is no message yet).
    while let Some(h) = rest.find(MESSAGE) {
        let header = &rest[..h];
        let body_all = &rest[h + MESSAGE.len()..];
        let (content, done, next) = match body_all.find(END) {
            Some(e) => (&body_all[..e], true, Some(&body_all[e + END.len()..])),
            None => (body_all, false, None),
        };
        let (channel, recipient) = parse_header(header);
        out.push(Message {
            channel,
            recipient,
            content: content.to_string(),
            done,
        });
        match next {
            Some(n) => rest = n.strip_prefix(START).unwrap_or(n),
            None => break,
        }
    }
    out
}

/// The channel and recipient of a header such as
/// `assistant to=functions.f<|channel|>commentary json` or
/// `<|channel|>commentary to=functions.f <|constrain|>json`.
fn parse_header(h: &str) -> (String, Option<String>) {
    let word = |s: &str| -> String {
        let s = s.trim_start();
        let end = s
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(s.len());
        s[..end].to_string()
    };
    let channel = h.find(CHANNEL).map(|i| word(&h[i + CHANNEL.len()..]));
    let recipient = h
        .find("to=")
        .filter(|&i| i == 0 || h[..i].ends_with([' ', '>']) || h[..i].ends_with("assistant"))
        .map(|i| word(&h[i + 3..]))
        .filter(|r| !r.is_empty());
    (channel.unwrap_or_default(), recipient)
}

/// What a chat client sees of generated text `text` (see the module note).
pub fn reply(text: &str) -> Reply {
    let mut r = Reply::default();
    if !starts_as_header(text) {
        r.content = text.to_string();
        return r;
    }
    for m in parse(text) {
        match (m.channel.as_str(), m.recipient) {
            (_, Some(to)) => {
                let name = to.strip_prefix("functions.").unwrap_or(&to).to_string();
                r.calls.push((name, m.content.trim_end().to_string()));
            }
            ("analysis", None) => r.reasoning.push_str(&m.content),
            (_, None) => r.content.push_str(&m.content),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The turns of OpenAI's harmony guide (reasoning, then a final answer;
    /// reasoning, then a function call).
    #[test]
    fn reasoning_final_and_calls() {
        let t = "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. \
                 Provide answer.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";
        let r = reply(t);
        assert_eq!(
            r.reasoning,
            "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer."
        );
        assert_eq!(r.content, "2 + 2 = 4.");
        assert!(r.calls.is_empty());

        let t = "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|>\
                 <|start|>assistant<|channel|>commentary to=functions.get_current_weather \
                 <|constrain|>json<|message|>{\"location\":\"San Francisco\"}";
        let r = reply(t);
        assert_eq!(r.reasoning, "Need to use function get_current_weather.");
        assert_eq!(r.content, "");
        assert_eq!(
            r.calls,
            [(
                "get_current_weather".to_string(),
                "{\"location\":\"San Francisco\"}".to_string()
            )]
        );
        // The template's own spelling: the recipient in the role part.
        let t = " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}";
        assert_eq!(
            reply(t).calls,
            [("lookup".to_string(), "{\"q\": 1}".to_string())]
        );
    }

    /// Every field of the reply only grows as text is appended, token by
    /// token: what a stream sends is each field's new suffix.
    #[test]
    fn fields_grow_monotonically() {
        let pieces = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Think",
            "ing.",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "commentary",
            " to",
            "=functions",
            ".f",
            " ",
            "<|constrain|>",
            "json",
            "<|message|>",
            "{\"a\"",
            ":1}",
        ];
        let mut text = String::new();
        let mut last = Reply::default();
        for p in pieces {
            text.push_str(p);
            let r = reply(&text);
            assert!(r.reasoning.starts_with(&last.reasoning), "{text:?}");
            assert!(r.content.starts_with(&last.content), "{text:?}");
            assert!(r.calls.len() >= last.calls.len(), "{text:?}");
            for (a, b) in last.calls.iter().zip(&r.calls) {
                assert_eq!(a.0, b.0);
                assert!(b.1.starts_with(&a.1), "{text:?}");
            }
            last = r;
        }
        assert_eq!(last.reasoning, "Thinking.");
        assert_eq!(last.calls, [("f".to_string(), "{\"a\":1}".to_string())]);
        assert_eq!(last.content, "");
    }

    /// Text that is not harmony (a model that does not follow the format)
    /// is content as it is; a header still being written is nothing yet.
    #[test]
    fn plain_text_and_partial_headers() {
        assert_eq!(reply("Hello there").content, "Hello there");
        assert_eq!(reply("<|chan").content, "");
        assert_eq!(reply("<|channel|>fin").content, "");
        assert_eq!(reply("<|channel|>final<|message|>Hi").content, "Hi");
        // A preamble (commentary without a recipient) is content.
        let t = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done.";
        assert_eq!(reply(t).content, "Checking.Done.");
    }
}
