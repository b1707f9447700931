//! `gpack.Tokenizer`: the tokenizer of a .gpack (its TokenizerBin section,
//! mapped), a .gguf, a tokenizer.json / Hugging Face directory or a GBT1
//! file, as `gpack tokenize` opens them.

use crate::err_msg;
use gpack_format::{Gpack, SectionKind};
use gpack_tokenizer::{load_any, ChatMessage, LoadedTokenizer, Tokenizer as RTokenizer};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::{Path, PathBuf};

/// Where the GBT1 bytes live.
pub(crate) enum Source {
    /// A mapped .gpack (its TokenizerBin section).
    Gpack(Box<Gpack>),
    /// Built from a GGUF, tokenizer.json or read from a GBT1 file.
    Owned(LoadedTokenizer),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            // Checked present in `open`.
            Source::Gpack(g) => g
                .section(SectionKind::TokenizerBin)
                .map_or(&[], |s| s.bytes),
            Source::Owned(t) => &t.gbt1,
        }
    }

    fn open(path: &Path) -> Result<Source, String> {
        let fail = |e: &dyn std::error::Error| format!("{}: {}", path.display(), crate::chain(e));
        let is_gpack = path.extension().is_some_and(|e| e == "gpack") || {
            use std::io::Read;
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
                && &magic == b"GPCK"
        };
        if is_gpack {
            let g = Gpack::open(path).map_err(|e| fail(&e))?;
            if g.section(SectionKind::TokenizerBin).is_none() {
                return Err(format!(
                    "{}: this .gpack has no TokenizerBin section",
                    path.display()
                ));
            }
            Ok(Source::Gpack(Box::new(g)))
        } else {
            load_any(path).map(Source::Owned).map_err(|e| fail(&e))
        }
    }
}

self_cell::self_cell!(
    /// The source and the tokenizer view over its bytes.
    pub(crate) struct Cell {
        owner: Source,
        #[covariant]
        dependent: RTokenizer,
    }
);

/// Chat messages from Python: dicts with `role` and `content` (a string,
/// or a list of `{"type": "text", "text": ...}` parts, as OpenAI's API).
pub(crate) fn messages(list: &Bound<'_, PyList>) -> PyResult<Vec<ChatMessage>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let m = m.cast::<PyDict>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "message {i} is not a dict with \"role\" and \"content\""
            ))
        })?;
        let role: String = match m.get_item("role")? {
            Some(r) => r.extract()?,
            None => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "message {i} has no \"role\""
                )))
            }
        };
        let content = match m.get_item("content")? {
            None => String::new(),
            Some(c) if c.is_none() => String::new(),
            Some(c) => match c.extract::<String>() {
                Ok(s) => s,
                Err(_) => {
                    let parts = c.cast::<PyList>().map_err(|_| {
                        pyo3::exceptions::PyTypeError::new_err(format!(
                            "message {i}: content must be a string or a list of text parts"
                        ))
                    })?;
                    let mut s = String::new();
                    for p in parts.iter() {
                        let text = p.get_item("text").map_err(|_| {
                            pyo3::exceptions::PyValueError::new_err(format!(
                                "message {i}: only text parts are supported"
                            ))
                        })?;
                        s.push_str(&text.extract::<String>()?);
                    }
                    s
                }
            },
        };
        out.push(ChatMessage::new(role, content));
    }
    Ok(out)
}

/// A tokenizer (BPE or SentencePiece, the model's own rules and special
/// tokens), loaded from a .gpack, a .gguf, a tokenizer.json (with the
/// tokenizer_config.json beside it), a Hugging Face directory or a GBT1 file.
#[pyclass(module = "gpack._gpack", frozen)]
pub struct Tokenizer {
    cell: Cell,
    path: PathBuf,
}

impl Tokenizer {
    pub(crate) fn open(path: &Path) -> Result<Tokenizer, String> {
        let src = Source::open(path)?;
        let cell = Cell::try_new(src, |s| RTokenizer::from_bytes(s.bytes()))
            .map_err(|e| format!("{}: {}", path.display(), crate::chain(&e)))?;
        Ok(Tokenizer {
            cell,
            path: path.to_path_buf(),
        })
    }
}

#[pymethods]
impl Tokenizer {
    /// Loads the tokenizer of `path` (see the class docstring).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Tokenizer> {
        py.detach(|| Tokenizer::open(&path)).map_err(err_msg)
    }

    /// The file it was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Number of tokens in the vocabulary.
    #[getter]
    fn vocab_size(&self) -> u32 {
        self.cell.borrow_dependent().vocab_size()
    }

    /// The beginning-of-sequence id, if the model has one.
    #[getter]
    fn bos_id(&self) -> Option<u32> {
        self.cell.borrow_dependent().bos()
    }

    /// The end-of-sequence id, if the model has one.
    #[getter]
    fn eos_id(&self) -> Option<u32> {
        self.cell.borrow_dependent().eos()
    }

    /// The chat template (Jinja source), if the model has one.
    #[getter]
    fn chat_template(&self) -> Option<String> {
        self.cell
            .borrow_dependent()
            .chat_template()
            .map(str::to_string)
    }

    /// Token ids of `text`. `add_special` adds BOS/EOS as the model's rules
    /// say (the default, as `gpack tokenize`); special tokens written in the
    /// text (`<|im_start|>`) are matched as such.
    #[pyo3(signature = (text, add_special = true))]
    fn encode(&self, py: Python<'_>, text: &str, add_special: bool) -> Vec<u32> {
        py.detach(|| self.cell.borrow_dependent().encode(text, add_special))
    }

    /// The text of `ids` (invalid UTF-8 replaced); `skip_special` drops
    /// special tokens (BOS, `<|im_end|>`…).
    #[pyo3(signature = (ids, skip_special = false))]
    fn decode(&self, ids: Vec<u32>, skip_special: bool) -> PyResult<String> {
        let t = self.cell.borrow_dependent();
        check_ids(t, &ids)?;
        Ok(if skip_special {
            t.decode_skip_special(&ids)
        } else {
            t.decode(&ids)
        })
    }

    /// The piece of one token, as bytes.
    fn token_bytes<'py>(
        &self,
        py: Python<'py>,
        id: u32,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let t = self.cell.borrow_dependent();
        check_ids(t, &[id])?;
        Ok(pyo3::types::PyBytes::new(py, &t.token_piece(id)))
    }

    /// The id of a token written exactly as `text`, if there is one.
    fn token_to_id(&self, text: &str) -> Option<u32> {
        self.cell.borrow_dependent().token_to_id(text)
    }

    /// Renders `messages` (dicts with `role` and `content`) with the model's
    /// chat template; `add_generation_prompt` appends the assistant turn's
    /// opening. With `tokenize=True`, returns the ids of the result (encoded
    /// without adding BOS again, as `gpack run --chat` does).
    #[pyo3(signature = (messages, add_generation_prompt = true, tokenize = false))]
    fn apply_chat_template(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        add_generation_prompt: bool,
        tokenize: bool,
    ) -> PyResult<Py<PyAny>> {
        let msgs = self::messages(messages)?;
        let t = self.cell.borrow_dependent();
        let text = t
            .apply_chat_template(&msgs, add_generation_prompt)
            .map_err(|e| err_msg(format!("chat template: {}", crate::chain(&e))))?;
        if tokenize {
            let ids = py.detach(|| t.encode(&text, false));
            Ok(ids.into_pyobject(py)?.into_any().unbind())
        } else {
            Ok(text.into_pyobject(py)?.into_any().unbind())
        }
    }

    fn __len__(&self) -> usize {
        self.cell.borrow_dependent().vocab_size() as usize
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpack.Tokenizer {:?} ({} tokens)>",
            self.path.display().to_string(),
            self.cell.borrow_dependent().vocab_size()
        )
    }
}

/// Raises ValueError for an id outside the vocabulary.
pub(crate) fn check_ids(t: &RTokenizer<'_>, ids: &[u32]) -> PyResult<()> {
    let n = t.vocab_size();
    match ids.iter().find(|&&i| i >= n) {
        Some(bad) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "token id {bad} is outside the vocabulary of {n}"
        ))),
        None => Ok(()),
    }
}
