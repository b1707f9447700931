//! A reply read as it is generated: the final text a slot emits split into
//! what a streaming client gets as content, as reasoning (gpt-oss's
//! harmony channels) and as tool calls (a call's name once its string is
//! closed, then its arguments as they grow), so every front end that
//! streams (the server's SSE, and any other) gets the same pieces from the
//! slot instead of scanning text itself.
//!
//! With tools, text from the format's marker on is held (it may be a call);
//! text that may be the marker's start is held too. At the end
//! ([`ReplyScan::finish`]) the whole text decides: calls (then the reply's
//! finish reason is `tool_calls`), or, when no call parses and none was
//! streamed, the held text is content after all. Arguments follow
//! [`super::tool_scan`]'s rule, so the fragments streamed concatenate to the
//! `arguments` of the non-streamed answer ([`super::tools::parse_output`]).

use super::stop::partial_stop;
use super::tool_scan;
use super::tools::{parse_output, Format};

/// How a reply is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// Tool calls may follow the content, written in this format.
    Tools(Format),
    /// gpt-oss's harmony channels: analysis (reasoning), final (content)
    /// and commentary (tool calls).
    Harmony,
}

/// One tool call's growth.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallDelta {
    /// The call's index in the reply.
    pub index: usize,
    /// The function's name, the first time the call appears (with its
    /// arguments so far); `None` afterwards.
    pub name: Option<String>,
    /// Arguments text added since the last delta.
    pub arguments: String,
}

/// What a reply gained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyDelta {
    /// Reasoning text (harmony's analysis channel).
    pub reasoning: String,
    /// Content text.
    pub content: String,
    /// Tool calls started or grown.
    pub calls: Vec<CallDelta>,
    /// Set by [`ReplyScan::finish`]: the reply is tool calls (its finish
    /// reason is `tool_calls`).
    pub tool_calls: bool,
}

impl ReplyDelta {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty() && self.calls.is_empty()
    }
}

/// The state of one reply being read (see the module docs).
#[derive(Clone, Debug)]
pub struct ReplyScan {
    kind: ReplyKind,
    /// All the reply's text so far.
    text: String,
    /// Content bytes given out (of `text` with tools; of harmony's content).
    sent: usize,
    /// Harmony: reasoning bytes given out.
    reasoning_sent: usize,
    /// With tools: where the first call's marker is.
    call_at: Option<usize>,
    /// Per call given out: arguments bytes given out.
    calls_sent: Vec<usize>,
}

impl ReplyScan {
    /// A reply read as `kind` says.
    pub fn new(kind: ReplyKind) -> ReplyScan {
        ReplyScan {
            kind,
            text: String::new(),
            sent: 0,
            reasoning_sent: 0,
            call_at: None,
            calls_sent: Vec::new(),
        }
    }

    /// What the reply gained with the final text `t`.
    pub fn push(&mut self, t: &str) -> ReplyDelta {
        self.text.push_str(t);
        let mut d = ReplyDelta::default();
        match self.kind {
            ReplyKind::Harmony => self.harmony(&mut d),
            ReplyKind::Tools(f) => {
                d.content = self.content(f);
                self.sent += d.content.len();
                self.calls(f, &mut d);
            }
        }
        d
    }

    /// The last delta, once the reply is complete: the rest of the calls,
    /// or the held text as content when it was no call; and whether the
    /// reply is tool calls.
    pub fn finish(&mut self) -> ReplyDelta {
        let mut d = ReplyDelta::default();
        match self.kind {
            ReplyKind::Harmony => d.tool_calls = !self.calls_sent.is_empty(),
            ReplyKind::Tools(f) => {
                let (_, calls) = parse_output(f, &self.text);
                let rest = self.text[self.sent..].to_string();
                self.calls(f, &mut d);
                if !calls.is_empty() {
                    d.tool_calls = true;
                } else if !rest.is_empty() && self.calls_sent.is_empty() {
                    // Not a call after all: the held text is content.
                    self.sent += rest.len();
                    d.content = rest;
                }
            }
        }
        d
    }

    /// Of the unsent text, what is content now: everything before a call's
    /// marker (text that may be the marker's start is held).
    fn content(&mut self, f: Format) -> String {
        if self.call_at.is_some() {
            return String::new();
        }
        let unsent = &self.text[self.sent..];
        let marker = f.marker();
        if let Some(p) = unsent.find(marker) {
            self.call_at = Some(self.sent + p);
            return unsent[..p].to_string();
        }
        let hold = partial_stop(unsent, &[marker.to_string()]);
        unsent[..unsent.len() - hold].to_string()
    }

    /// The calls' growth since the last delta, into `d`.
    fn calls(&mut self, f: Format, d: &mut ReplyDelta) {
        let Some(at) = self.call_at else {
            return;
        };
        let parts = tool_scan::scan(f, &self.text[at..]);
        let named = parts
            .iter()
            .map_while(|p| Some((p.name.as_deref()?, p.arguments.as_str())));
        grow(&mut self.calls_sent, named, d);
    }

    fn harmony(&mut self, d: &mut ReplyDelta) {
        let r = gpack_tokenizer::harmony::reply(&self.text);
        if let Some(new) = r.reasoning.get(self.reasoning_sent..) {
            d.reasoning = new.to_string();
            self.reasoning_sent = r.reasoning.len();
        }
        if let Some(new) = r.content.get(self.sent..) {
            d.content = new.to_string();
            self.sent = r.content.len();
        }
        let calls = r.calls.iter().map(|(n, a)| (n.as_str(), a.as_str()));
        grow(&mut self.calls_sent, calls, d);
    }
}

/// The deltas of `calls` (name, arguments so far) beyond `sent` (arguments
/// bytes given out per call), into `d`.
fn grow<'t>(
    sent: &mut Vec<usize>,
    calls: impl Iterator<Item = (&'t str, &'t str)>,
    d: &mut ReplyDelta,
) {
    for (k, (name, args)) in calls.enumerate() {
        if k == sent.len() {
            sent.push(args.len());
            d.calls.push(CallDelta {
                index: k,
                name: Some(name.to_string()),
                arguments: args.to_string(),
            });
        } else if args.len() > sent[k] {
            let new = args.get(sent[k]..).unwrap_or_default();
            sent[k] = args.len();
            d.calls.push(CallDelta {
                index: k,
                name: None,
                arguments: new.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of a Hermes answer gives the same content and the same
    /// arguments, concatenated, as the whole answer parsed at once.
    #[test]
    fn any_split_streams_what_the_whole_answer_parses_to() {
        let answer = "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
        let (content, calls) = parse_output(Format::Hermes, answer);
        for step in [1, 2, 3, 5, 7, 11, answer.len()] {
            let mut r = ReplyScan::new(ReplyKind::Tools(Format::Hermes));
            let (mut got_content, mut names, mut args) = (String::new(), Vec::new(), String::new());
            let mut take = |d: ReplyDelta| {
                got_content.push_str(&d.content);
                for c in d.calls {
                    if let Some(n) = c.name {
                        names.push(n);
                    }
                    args.push_str(&c.arguments);
                }
                d.tool_calls
            };
            let mut i = 0;
            while i < answer.len() {
                let j = (i + step).min(answer.len());
                take(r.push(&answer[i..j]));
                i = j;
            }
            assert!(take(r.finish()), "step {step}");
            assert_eq!(got_content.trim_end(), content.trim_end(), "step {step}");
            assert_eq!(names, vec![calls[0].name.clone()], "step {step}");
            assert_eq!(args, calls[0].arguments, "step {step}");
        }
    }

    /// Text that looked like a marker's start but was none is content at
    /// the end, and the reply is not tool calls.
    #[test]
    fn a_held_marker_prefix_that_is_no_call_is_content_at_the_end() {
        let mut r = ReplyScan::new(ReplyKind::Tools(Format::Hermes));
        let d = r.push("a <tool_");
        assert_eq!(d.content, "a ");
        let end = r.finish();
        assert_eq!(end.content, "<tool_");
        assert!(!end.tool_calls && end.calls.is_empty());
    }
}
