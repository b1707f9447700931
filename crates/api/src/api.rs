//! The OpenAI wire format: request bodies (parsed leniently where OpenAI is:
//! unknown fields are ignored), validation into a [`Params`], and the error
//! shape `{"error": {"message", "type", "param", "code"}}`.
//!
//! Bodies are parsed here, not by an extractor, so that malformed JSON and
//! wrong types get OpenAI's error shape with a 400 instead of a framework's
//! plain-text rejection.

use http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::logprobs::MAX_TOP_LOGPROBS;
use gpack_runtime::decode::{Constraint, ConstraintError, MAX_CONSTRAINT_BYTES};

/// An error response in OpenAI's shape.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `server_error`...
    pub kind: &'static str,
    /// The offending parameter, if one.
    pub param: Option<&'static str>,
    /// A machine-readable code (`context_length_exceeded`...).
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header (503).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
            retry_after: None,
        }
    }
    /// A given status and type.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }
    /// 500 `server_error`: a fault of the server, not of the request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }
    /// With a code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<ConstraintError> for ApiError {
    /// A refused schema or grammar is the caller's 400; a vocabulary the
    /// grammar engine cannot load is the server's 500.
    fn from(e: ConstraintError) -> Self {
        match e {
            ConstraintError::Invalid { param, message } => ApiError::invalid(message, Some(param)),
            e @ ConstraintError::Vocabulary(_) => ApiError::internal(e.to_string()),
        }
    }
}

/// The response: the status, OpenAI's JSON error body and `Retry-After`.
#[cfg(feature = "axum")]
impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        use http::{header, HeaderValue};
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One string.
    One(String),
    /// Up to 4 strings.
    Many(Vec<String>),
}

/// A message's `content`: a string, or a list of parts of which the text
/// parts are used.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// `[{"type": "text", "text": ...}, ...]`.
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Deserialize)]
pub struct Part {
    /// `text` (others are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    #[serde(default)]
    pub text: Option<String>,
}

/// A chat message.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, `developer`.
    pub role: String,
    /// The content (null for an assistant message with tool calls).
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant's tool calls (`[{id, type, function: {name, arguments}}]`).
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// A `tool` message's call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// A `tool` message's function name (some templates use it).
    #[serde(default)]
    pub name: Option<String>,
}

/// `stream_options`.
#[derive(Debug, Deserialize, Default)]
pub struct StreamOptions {
    /// Send a last chunk with `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and stopping fields shared by both endpoints.
#[derive(Debug, Deserialize, Default)]
pub struct Common {
    /// Model name (any; one model is served).
    #[serde(default)]
    pub model: Option<String>,
    /// Most new tokens.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Newer name of `max_tokens` (chat).
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// 0 = greedy; default 1.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus threshold; default 1.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Extension (llama-server): keep the k best (default 40, 0 = all).
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Extension (llama-server): min-p (default 0.05).
    #[serde(default)]
    pub min_p: Option<f64>,
    /// RNG seed.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Choices (1..=8), each sampled with its own seed.
    #[serde(default)]
    pub n: Option<i64>,
    /// Chat: `true` for log-probabilities; completions: how many
    /// alternatives per token (0..=20).
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Chat: alternatives per token (0..=20), with `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// −2..2: lowers the logits of tokens already generated, once.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// −2..2: lowers the logits of tokens already generated, per time.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// SSE streaming.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Extension: speculative decoding for this request, `"ngram"`,
    /// `"draft"` (a server started with a draft model) or `"none"`; default
    /// the server's `--spec`. The text is the same either way.
    #[serde(default)]
    pub speculative: Option<String>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`.
    #[serde(default)]
    pub response_format: Option<Value>,
    /// Extension: a grammar (llguidance's Lark syntax) the output follows.
    #[serde(default)]
    pub grammar: Option<Value>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Functions the model may call.
    #[serde(default)]
    pub tools: Option<Value>,
    /// `auto`, `none`, `required` or `{"type": "function", "function": {"name"}}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// `minimal`, `low`, `medium` or `high`: the chat template's
    /// `reasoning_effort` (gpt-oss's "Reasoning: …" line).
    #[serde(default)]
    pub reasoning_effort: Option<Value>,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

/// A completions `prompt`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// A list of one text.
    Texts(Vec<String>),
    /// Token ids.
    Tokens(Vec<u32>),
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// Everything else.
    #[serde(flatten)]
    pub common: Common,
}

/// Validated generation parameters.
#[derive(Debug, Clone)]
pub struct Params {
    /// Requested most new tokens (None: until the context is full).
    pub max_tokens: Option<usize>,
    /// Temperature.
    pub temperature: f32,
    /// Top-p.
    pub top_p: f32,
    /// Top-k.
    pub top_k: usize,
    /// Min-p.
    pub min_p: f32,
    /// Seed.
    pub seed: u64,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stream as SSE.
    pub stream: bool,
    /// Send a usage chunk when streaming.
    pub include_usage: bool,
    /// Speculative decoding asked for (None: the server's default).
    pub spec: Option<gpack_runtime::SpecMode>,
    /// What the output must follow (`response_format`, `grammar`).
    pub constraint: Option<Constraint>,
    /// Choices.
    pub n: usize,
    /// Log-probabilities with this many alternatives per token.
    pub logprobs: Option<usize>,
    /// `presence_penalty`.
    pub presence_penalty: f32,
    /// `frequency_penalty`.
    pub frequency_penalty: f32,
}

impl Params {
    /// The decoding slot's settings for choice `choice` of the request
    /// (each choice's seed is the request's plus its index), with at most
    /// `max_tokens` new tokens and the model's `stop_tokens`: the one
    /// mapping the server and Python's chat completions use.
    pub fn generate_config(
        &self,
        max_tokens: usize,
        stop_tokens: Vec<u32>,
        choice: usize,
    ) -> gpack_runtime::GenerateConfig {
        let mut sampler = self.sampler();
        sampler.seed = sampler.seed.wrapping_add(choice as u64);
        gpack_runtime::GenerateConfig {
            max_tokens,
            sampler,
            stop_tokens,
            stop_strings: self.stop.clone(),
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            logprobs: self.logprobs,
            ..gpack_runtime::GenerateConfig::default()
        }
    }

    /// The sampler these parameters ask for (the OpenAI surface has no
    /// repetition penalty: off).
    pub fn sampler(&self) -> gpack_runtime::SamplerConfig {
        gpack_runtime::SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: 1.0,
            repeat_last_n: 0,
            seed: self.seed,
        }
    }
}

/// One `chat.completion.chunk` of a streamed chat answer (the OpenAI shape;
/// `gpack serve` and the Python package stream the same objects).
pub fn chat_chunk(
    id: &str,
    created: u64,
    model: &str,
    delta: Value,
    finish_reason: Option<&str>,
) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "gpack",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

/// Parses a JSON body into `T` with OpenAI-shaped errors.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("could not parse the JSON body: {e}"), None))?;
    if !v.is_object() {
        return Err(ApiError::invalid(
            "the request body must be a JSON object",
            None,
        ));
    }
    serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("invalid request: {e}"), None))
}

/// Most choices per request (`n`): each takes a sequence slot.
pub const MAX_N: usize = 8;

/// Most stop strings (OpenAI's limit).
const MAX_STOP: usize = 4;
/// Longest stop string in bytes.
const MAX_STOP_LEN: usize = 256;

impl Common {
    /// Checks ranges and fills defaults.
    pub fn params(&self) -> Result<Params, ApiError> {
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_N as i64).contains(&n) {
            return Err(ApiError::invalid(
                format!("n must be between 1 and {MAX_N}, got {n}"),
                Some("n"),
            ));
        }
        let logprobs = self.logprobs()?;
        let penalty = |v: Option<f64>, name: &'static str| {
            gpack_runtime::decode::check_penalty(name, v.unwrap_or(0.0))
                .map_err(|m| ApiError::invalid(m, Some(name)))
        };
        let presence_penalty = penalty(self.presence_penalty, "presence_penalty")?;
        let frequency_penalty = penalty(self.frequency_penalty, "frequency_penalty")?;
        let max = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = match max {
            None => None,
            Some(m) if m < 1 => {
                return Err(ApiError::invalid(
                    format!("max_tokens must be at least 1, got {m}"),
                    Some("max_tokens"),
                ))
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid(
                format!("temperature must be between 0 and 2, got {temperature}"),
                Some("temperature"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(
                format!("top_p must be in (0, 1], got {top_p}"),
                Some("top_p"),
            ));
        }
        let top_k = self.top_k.unwrap_or(40);
        if top_k < 0 {
            return Err(ApiError::invalid("top_k must be at least 0", Some("top_k")));
        }
        let min_p = self.min_p.unwrap_or(0.05);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::invalid(
                "min_p must be between 0 and 1",
                Some("min_p"),
            ));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP {
            return Err(ApiError::invalid(
                format!("at most {MAX_STOP} stop sequences are allowed"),
                Some("stop"),
            ));
        }
        if stop.iter().any(|s| s.is_empty() || s.len() > MAX_STOP_LEN) {
            return Err(ApiError::invalid(
                format!("stop sequences must be 1 to {MAX_STOP_LEN} bytes long"),
                Some("stop"),
            ));
        }
        let seed = match self.seed {
            Some(s) => s as u64,
            None => {
                use std::time::{SystemTime, UNIX_EPOCH};
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            }
        };
        let stream = self.stream.unwrap_or(false);
        let spec = match &self.speculative {
            None => None,
            Some(m) => Some(
                m.parse::<gpack_runtime::SpecMode>()
                    .map_err(|e| ApiError::invalid(e, Some("speculative")))?,
            ),
        };
        let constraint = self.constraint()?;
        Ok(Params {
            spec,
            max_tokens,
            temperature: temperature as f32,
            top_p: top_p as f32,
            top_k: top_k as usize,
            min_p: min_p as f32,
            seed,
            stop,
            stream,
            include_usage: stream
                && self
                    .stream_options
                    .as_ref()
                    .is_some_and(|o| o.include_usage),
            constraint,
            n: n as usize,
            logprobs,
            presence_penalty,
            frequency_penalty,
        })
    }

    /// `logprobs` (a bool, chat; a count, completions) and `top_logprobs`.
    fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        let top = |k: i64, param: &'static str| {
            if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) {
                Ok(k as usize)
            } else {
                Err(ApiError::invalid(
                    format!("{param} must be between 0 and {MAX_TOP_LOGPROBS}, got {k}"),
                    Some(param),
                ))
            }
        };
        let on = match &self.logprobs {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(0),
            Some(Value::Number(k)) => Some(top(k.as_i64().unwrap_or(-1), "logprobs")?),
            Some(_) => {
                return Err(ApiError::invalid(
                    "logprobs must be a boolean (chat) or an integer (completions)",
                    Some("logprobs"),
                ))
            }
        };
        match (on, self.top_logprobs) {
            (None, Some(_)) => Err(ApiError::invalid(
                "top_logprobs needs logprobs: true",
                Some("top_logprobs"),
            )),
            (Some(_), Some(k)) => Ok(Some(top(k, "top_logprobs")?)),
            (on, None) => Ok(on),
        }
    }

    /// `response_format` and `grammar`, checked (shape and size; whether
    /// the grammar engine accepts them is [`crate::constrain`]'s verdict).
    fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        let rf = Some("response_format");
        let format = match &self.response_format {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => match o.get("type").and_then(Value::as_str) {
                Some("text") => None,
                Some("json_object") => Some(Constraint::JsonObject),
                Some("json_schema") => {
                    let js = o.get("json_schema").and_then(Value::as_object).ok_or_else(|| {
                        ApiError::invalid(
                            "response_format of type json_schema needs a json_schema object",
                            rf,
                        )
                    })?;
                    let schema = match js.get("schema") {
                        Some(v @ Value::Object(_)) => v.clone(),
                        Some(Value::Bool(true)) | None => json!({}),
                        Some(_) => {
                            return Err(ApiError::invalid(
                                "response_format.json_schema.schema must be a JSON object",
                                rf,
                            ))
                        }
                    };
                    if serde_json::to_vec(&schema).map_or(usize::MAX, |v| v.len())
                        > MAX_CONSTRAINT_BYTES
                    {
                        return Err(ApiError::invalid(
                            format!("the JSON schema is larger than {MAX_CONSTRAINT_BYTES} bytes"),
                            rf,
                        ));
                    }
                    Some(Constraint::JsonSchema(schema))
                }
                Some(t) => {
                    return Err(ApiError::invalid(
                        format!(
                            "response_format type {t:?} is not supported (text, json_object, json_schema)"
                        ),
                        rf,
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        "response_format needs a \"type\"",
                        rf,
                    ))
                }
            },
            Some(_) => {
                return Err(ApiError::invalid(
                    "response_format must be an object",
                    rf,
                ))
            }
        };
        let grammar = match &self.grammar {
            None | Some(Value::Null) => None,
            Some(Value::String(g)) => {
                if g.len() > MAX_CONSTRAINT_BYTES {
                    return Err(ApiError::invalid(
                        format!("the grammar is larger than {MAX_CONSTRAINT_BYTES} bytes"),
                        Some("grammar"),
                    ));
                }
                Some(Constraint::Lark(g.clone()))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "grammar must be a string (llguidance's Lark syntax)",
                    Some("grammar"),
                ))
            }
        };
        match (format, grammar) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                "give either response_format (json_object, json_schema) or grammar, not both",
                Some("grammar"),
            )),
            (f, g) => Ok(f.or(g)),
        }
    }
}

/// A `/v1/chat/completions` body checked: the messages' roles and text and
/// the generation parameters (everything but the chat template's verdict).
#[derive(Debug)]
pub struct ValidChat {
    /// The conversation, text parts joined.
    pub messages: Vec<gpack_tokenizer::ChatMessage>,
    /// With tools or tool messages: the conversation as the template gets
    /// it (tool calls, tool results), rendered with `tools`.
    pub tool_messages: Option<Value>,
    /// The request's tools.
    pub tools: Option<crate::tools::Tools>,
    /// `reasoning_effort`, for the chat template.
    pub reasoning_effort: Option<String>,
    /// The parameters.
    pub params: Params,
}

/// A `/v1/completions` prompt checked.
#[derive(Debug, PartialEq, Eq)]
pub enum ValidPrompt {
    /// Text to encode (with BOS).
    Text(String),
    /// Token ids, each below the vocabulary size.
    Tokens(Vec<u32>),
}

/// A `/v1/completions` body checked.
#[derive(Debug)]
pub struct ValidCompletion {
    /// The prompt.
    pub prompt: ValidPrompt,
    /// The parameters.
    pub params: Params,
}

/// Turns the bytes of a `/v1/chat/completions` body into a checked request
/// (or the 400 that names what is wrong). No model is needed.
pub fn chat_request(body: &[u8]) -> Result<ValidChat, ApiError> {
    let r: ChatRequest = parse(body)?;
    let params = r.common.params()?;
    if r.messages.is_empty() {
        return Err(ApiError::invalid(
            "messages must not be empty",
            Some("messages"),
        ));
    }
    let tools = crate::tools::parse(r.tools.as_ref(), r.tool_choice.as_ref())?;
    let reasoning_effort = match &r.reasoning_effort {
        None | Some(Value::Null) => None,
        Some(Value::String(e)) if matches!(e.as_str(), "minimal" | "low" | "medium" | "high") => {
            Some(e.clone())
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "reasoning_effort must be \"minimal\", \"low\", \"medium\" or \"high\"",
                Some("reasoning_effort"),
            ))
        }
    };
    let uses_tools = tools.is_some()
        || r.messages
            .iter()
            .any(|m| m.tool_calls.is_some() || m.role == "tool");
    if params.constraint.is_some()
        && tools.as_ref().is_some_and(|t| {
            matches!(
                t.choice,
                crate::tools::Choice::Required | crate::tools::Choice::Named(_)
            )
        })
    {
        return Err(ApiError::invalid(
            "tool_choice required or a named function cannot be combined with response_format or grammar",
            Some("tool_choice"),
        ));
    }
    let mut messages = Vec::with_capacity(r.messages.len());
    let mut tool_messages = Vec::new();
    for m in &r.messages {
        let text = match &m.content {
            Some(c) => Some(c.text()?),
            None => None,
        };
        if uses_tools {
            tool_messages.push(crate::tools::template_message(
                &m.role,
                text.clone(),
                m.tool_calls.as_ref(),
                m.tool_call_id.as_deref(),
                m.name.as_deref(),
            )?);
        }
        messages.push(gpack_tokenizer::ChatMessage::new(
            m.role.as_str(),
            text.unwrap_or_default(),
        ));
    }
    Ok(ValidChat {
        messages,
        tool_messages: uses_tools.then_some(Value::Array(tool_messages)),
        tools,
        reasoning_effort,
        params,
    })
}

/// Turns the bytes of a `/v1/completions` body into a checked request for a
/// vocabulary of `vocab_size` tokens (or the 400 that names what is wrong).
pub fn completion_request(body: &[u8], vocab_size: u32) -> Result<ValidCompletion, ApiError> {
    let r: CompletionRequest = parse(body)?;
    let params = r.common.params()?;
    let prompt = match r.prompt {
        Prompt::Text(t) => ValidPrompt::Text(t),
        Prompt::Texts(mut v) if v.len() == 1 => ValidPrompt::Text(v.pop().unwrap_or_default()),
        Prompt::Texts(_) => {
            return Err(ApiError::invalid(
                "only one prompt per request is supported",
                Some("prompt"),
            ))
        }
        Prompt::Tokens(ids) => {
            if let Some(bad) = ids.iter().find(|&&t| t >= vocab_size) {
                return Err(ApiError::invalid(
                    format!("token id {bad} is outside the vocabulary of {vocab_size}"),
                    Some("prompt"),
                ));
            }
            ValidPrompt::Tokens(ids)
        }
    };
    Ok(ValidCompletion { prompt, params })
}

impl Content {
    /// The text (parts joined); non-text parts are refused.
    pub fn text(&self) -> Result<String, ApiError> {
        match self {
            Content::Text(s) => Ok(s.clone()),
            Content::Parts(p) => {
                let mut s = String::new();
                for part in p {
                    if part.kind != "text" {
                        return Err(ApiError::invalid(
                            format!("content parts of type {:?} are not supported", part.kind),
                            Some("messages"),
                        ));
                    }
                    s.push_str(part.text.as_deref().unwrap_or(""));
                }
                Ok(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_and_wrong_types_are_400_in_openai_shape() {
        for body in [
            &b"{"[..],
            b"[]",
            b"{\"messages\": \"hi\"}",
            b"{\"messages\": [], \"max_tokens\": \"x\"}",
        ] {
            let e = parse::<ChatRequest>(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            let b = e.body();
            assert_eq!(b["error"]["type"], "invalid_request_error");
            assert!(b["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()));
        }
    }

    /// `reasoning_effort`: one of OpenAI's four levels, else a 400 naming it.
    #[test]
    fn reasoning_effort_levels() {
        let req = |e: Value| {
            let b = json!({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": e});
            chat_request(b.to_string().as_bytes())
        };
        for level in ["minimal", "low", "medium", "high"] {
            assert_eq!(
                req(json!(level)).unwrap().reasoning_effort.as_deref(),
                Some(level)
            );
        }
        assert_eq!(req(Value::Null).unwrap().reasoning_effort, None);
        for bad in [json!("max"), json!(3), json!(["low"])] {
            let e = req(bad).unwrap_err();
            assert_eq!(
                (e.status, e.param),
                (StatusCode::BAD_REQUEST, Some("reasoning_effort"))
            );
        }
    }

    #[test]
    fn params_ranges_and_defaults() {
        let c = |v: Value| serde_json::from_value::<Common>(v).unwrap().params();
        assert_eq!(c(json!({"n": 9})).unwrap_err().param, Some("n"));
        assert_eq!(c(json!({"n": 0})).unwrap_err().param, Some("n"));
        assert_eq!(c(json!({"n": 3})).unwrap().n, 3);
        assert_eq!(
            c(json!({"logprobs": true, "top_logprobs": 21}))
                .unwrap_err()
                .param,
            Some("top_logprobs")
        );
        assert_eq!(
            c(json!({"top_logprobs": 2})).unwrap_err().param,
            Some("top_logprobs")
        );
        assert_eq!(
            c(json!({"logprobs": 21})).unwrap_err().param,
            Some("logprobs")
        );
        assert_eq!(
            c(json!({"logprobs": "x"})).unwrap_err().param,
            Some("logprobs")
        );
        assert_eq!(
            c(json!({"logprobs": true, "top_logprobs": 20}))
                .unwrap()
                .logprobs,
            Some(20)
        );
        assert_eq!(c(json!({"logprobs": 3})).unwrap().logprobs, Some(3));
        assert_eq!(c(json!({"logprobs": false})).unwrap().logprobs, None);
        assert_eq!(
            c(json!({"presence_penalty": 2.5})).unwrap_err().param,
            Some("presence_penalty")
        );
        assert_eq!(
            c(json!({"frequency_penalty": -3})).unwrap_err().param,
            Some("frequency_penalty")
        );
        assert_eq!(
            c(json!({"temperature": 2.5})).unwrap_err().param,
            Some("temperature")
        );
        assert_eq!(c(json!({"top_p": 0})).unwrap_err().param, Some("top_p"));
        assert_eq!(
            c(json!({"max_tokens": 0})).unwrap_err().param,
            Some("max_tokens")
        );
        assert_eq!(
            c(json!({"stop": ["a", "b", "c", "d", "e"]}))
                .unwrap_err()
                .param,
            Some("stop")
        );
        let p = c(json!({"max_tokens": 1_000_000_000_000i64, "seed": 7, "stop": "x"})).unwrap();
        assert_eq!(p.max_tokens, Some(1_000_000_000_000));
        assert_eq!((p.seed, p.stop.as_slice()), (7, &["x".to_string()][..]));
        assert!(!p.stream && !p.include_usage);
        let p = c(json!({"stream": true, "stream_options": {"include_usage": true}})).unwrap();
        assert!(p.stream && p.include_usage);
    }

    #[test]
    fn content_parts_join_text_and_refuse_images() {
        let m: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}))
        .unwrap();
        assert_eq!(m.content.unwrap().text().unwrap(), "ab");
        let m: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}))
        .unwrap();
        assert!(m.content.unwrap().text().is_err());
    }
}
