//! Streaming decode: text is released only in whole UTF-8 characters.
//!
//! A byte-level or byte-fallback token can end inside a multi-byte character; the decoder
//! keeps such a tail (at most 3 bytes) until the next token completes it. Bytes that can
//! never become valid UTF-8 are released as U+FFFD, as `String::from_utf8_lossy` would.

use crate::gbt1::FLAG_ADD_SPACE_PREFIX;
use crate::tokenizer::Tokenizer;

/// Incremental decoder; see the module note.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: Tokenizer<'a>,
    pending: Vec<u8>,
    first: bool,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder at the start of a text.
    pub fn new(tok: Tokenizer<'a>) -> Self {
        StreamDecoder {
            tok,
            pending: Vec::new(),
            first: true,
        }
    }

    /// Add one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.tok.token_piece(id);
        let mut p: &[u8] = &piece;
        if self.first && !p.is_empty() {
            self.first = false;
            if self.tok.gbt1().flags() & FLAG_ADD_SPACE_PREFIX != 0 && p.first() == Some(&b' ') {
                p = &p[1..];
            }
        }
        self.pending.extend_from_slice(p);
        self.drain(false)
    }

    /// Release whatever is left (an incomplete tail becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, all: bool) -> String {
        let mut out = String::new();
        let mut i = 0;
        let b = &self.pending;
        while i < b.len() {
            match std::str::from_utf8(&b[i..]) {
                Ok(s) => {
                    out.push_str(s);
                    i = b.len();
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // valid_up_to is a char boundary of valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(&b[i..i + good]));
                    i += good;
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            i += n;
                        }
                        None => {
                            // Incomplete sequence at the end: keep it unless flushing.
                            if all {
                                out.push('\u{FFFD}');
                                i = b.len();
                            }
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..i);
        out
    }
}
