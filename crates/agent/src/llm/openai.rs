//! Any OpenAI-compatible server as an [`Llm`]: `hearth serve`, llama.cpp's `llama-server`,
//! vLLM or SGLang serving a model too big for one machine. Answers are streamed; tools go
//! out in OpenAI's `tools` and come back as native `tool_calls`, which are handed to the
//! agent as Qwen's `<tool_call>` text so that the agents' parsers read them unchanged.

use super::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::error::{AgentError, Result};
use crate::image::{self, Piece};
use futures::StreamExt;
use hearth_chat::ChatMessage;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// A model behind an OpenAI-compatible `/chat/completions` endpoint.
#[derive(Clone)]
pub struct OpenAiLlm {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    max_tokens: usize,
    retries: u32,
    backoff: Duration,
}

/// The environment variables read for the API key, in order.
pub const API_KEY_VARS: [&str; 2] = ["HEARTH_LLM_API_KEY", "OPENAI_API_KEY"];

impl OpenAiLlm {
    /// `base_url` ends before `/chat/completions` (`http://host:8000/v1`; a URL without a
    /// path gets `/v1`). The API key comes from `HEARTH_LLM_API_KEY`, else `OPENAI_API_KEY`.
    pub fn new(base_url: &str, model: impl Into<String>) -> Result<Self> {
        let mut base = base_url.trim_end_matches('/').to_string();
        let url = reqwest::Url::parse(&base)
            .map_err(|e| AgentError::invalid("llm_url", format!("`{base_url}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(AgentError::invalid(
                "llm_url",
                format!("`{base_url}`: expected an http:// or https:// URL"),
            ));
        }
        if url.path() == "/" || url.path().is_empty() {
            base.push_str("/v1");
        }
        let api_key = API_KEY_VARS
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|k| !k.is_empty()));
        Ok(Self {
            client: Self::client(Duration::from_secs(600))?,
            base_url: base,
            api_key,
            model: model.into(),
            max_tokens: 512,
            retries: 3,
            backoff: Duration::from_millis(500),
        })
    }

    fn client(timeout: Duration) -> Result<reqwest::Client> {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Between two reads, not for the whole answer: a long answer streams for minutes.
            .read_timeout(timeout)
            .build()
            .map_err(|e| AgentError::Llm(format!("cannot build the HTTP client: {e}")))
    }

    /// Replaces the API key read from the environment; `None` or empty sends none.
    pub fn with_api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|k| !k.is_empty());
        self
    }

    /// How long to wait for the server between two reads (default 600 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.client = Self::client(timeout)?;
        Ok(self)
    }

    /// Retries on 429, 5xx and failed connections, waiting `backoff`, then twice as long, …
    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.backoff = backoff;
        self
    }

    /// The answer length when a request does not set one (default 512).
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n;
        self
    }

    /// The model name sent with each request.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The models the server lists (`GET /models`).
    pub async fn models(&self) -> Result<Vec<String>> {
        let mut req = self.client.get(format!("{}/models", self.base_url));
        if let Some(k) = &self.api_key {
            req = req.bearer_auth(k);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| AgentError::Llm(format!("{}/models: {e}", self.base_url)))?;
        let status = resp.status();
        let body: Value = resp
            .json()
            .await
            .map_err(|e| AgentError::Llm(format!("{}/models: {e}", self.base_url)))?;
        if !status.is_success() {
            return Err(AgentError::Llm(format!(
                "{}/models: {status}: {}",
                self.base_url,
                error_message(&body)
            )));
        }
        Ok(body["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Takes the server's first model when none was named.
    pub async fn discover_model(mut self) -> Result<Self> {
        if self.model.is_empty() {
            self.model = self.models().await?.into_iter().next().ok_or_else(|| {
                AgentError::Llm(format!("{}/models lists no model", self.base_url))
            })?;
        }
        Ok(self)
    }

    fn body(&self, r: &LlmRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": openai_messages(&r.messages),
            "max_tokens": r.max_tokens.unwrap_or(self.max_tokens),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !r.tools.is_empty() {
            body["tools"] = Value::Array(r.tools.clone());
        }
        if let Some(s) = &r.sampling {
            body["temperature"] = json!(s.temperature);
            body["seed"] = json!(s.seed);
            if let Some(p) = s.top_p {
                body["top_p"] = json!(p);
            }
            // Extensions vLLM, SGLang, llama.cpp and Hearth accept.
            if let Some(k) = s.top_k {
                body["top_k"] = json!(k);
            }
            if let Some(p) = s.min_p {
                body["min_p"] = json!(p);
            }
            if s.repetition_penalty != 1.0 {
                body["repetition_penalty"] = json!(s.repetition_penalty);
            }
        }
        if let Some(stop) = &r.stop {
            body["stop"] = json!(stop);
        }
        if let Some(t) = r.enable_thinking {
            body["chat_template_kwargs"] = json!({"enable_thinking": t});
        }
        body
    }

    /// Sends the request, retrying while the server is busy or unreachable.
    async fn send(self, body: Value) -> Result<reqwest::Response> {
        let url = format!("{}/chat/completions", self.base_url);
        let mut attempt = 0;
        loop {
            let mut req = self.client.post(&url).json(&body);
            if let Some(k) = &self.api_key {
                req = req.bearer_auth(k);
            }
            let wait = self.backoff * 2u32.saturating_pow(attempt);
            match req.send().await {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let status = resp.status();
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = resp.text().await.unwrap_or_default();
                    let retry = status.as_u16() == 429 || status.is_server_error();
                    if !retry || attempt >= self.retries {
                        let message = serde_json::from_str::<Value>(&text)
                            .map(|v| error_message(&v))
                            .unwrap_or(text);
                        return Err(AgentError::Llm(format!("{url}: {status}: {message}")));
                    }
                    tracing::warn!("{url}: {status}; retrying");
                    tokio::time::sleep(retry_after.unwrap_or(wait).min(Duration::from_secs(60)))
                        .await;
                }
                Err(e) if attempt < self.retries && (e.is_connect() || e.is_timeout()) => {
                    tracing::warn!("{url}: {e}; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(AgentError::Llm(format!("{url}: {e}"))),
            }
            attempt += 1;
        }
    }
}

impl Llm for OpenAiLlm {
    fn chat(&self, r: LlmRequest) -> Result<LlmStream> {
        if r.messages.is_empty() {
            return Err(AgentError::invalid("messages", "no messages"));
        }
        let body = self.body(&r);
        let this = self.clone();
        let events = futures::stream::once(async move { this.send(body).await })
            .map(|resp| match resp {
                Ok(resp) => sse_events(resp).boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .flatten();
        Ok(Box::pin(events))
    }

    fn name(&self) -> String {
        format!("{} at {}", self.model, self.base_url)
    }
}

/// The server's `{"error": {"message": …}}`, or the body itself.
fn error_message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

/// Messages in OpenAI's form: tool-call arguments as JSON strings, every call with an id
/// and every tool result naming the call it answers (servers check both).
fn openai_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut unanswered: VecDeque<String> = VecDeque::new();
    let mut n = 0;
    messages
        .iter()
        .map(|m| {
            let mut out = Map::new();
            out.insert("role".into(), json!(m.role));
            out.insert("content".into(), content(m.content.as_deref()));
            for (k, v) in &m.extra {
                out.insert(k.clone(), v.clone());
            }
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let id = c.id.clone().unwrap_or_else(|| {
                            n += 1;
                            format!("call_{n}")
                        });
                        unanswered.push_back(id.clone());
                        json!({"id": id, "type": "function", "function": {
                            "name": c.function.name,
                            "arguments": c.function.arguments.to_string(),
                        }})
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            if m.role == "tool" {
                match out.get("tool_call_id").and_then(Value::as_str) {
                    Some(id) => unanswered.retain(|u| u != id),
                    None => {
                        if let Some(id) = unanswered.pop_front() {
                            out.insert("tool_call_id".into(), json!(id));
                        }
                    }
                }
            }
            if let Some(r) = &m.reasoning_content {
                out.insert("reasoning_content".into(), json!(r));
            }
            Value::Object(out)
        })
        .collect()
}

/// A message's content: its text, or where it holds images ([`crate::image`]) text and
/// `image_url` parts in order.
fn content(text: Option<&str>) -> Value {
    let Some(text) = text.filter(|t| image::has_images(t)) else {
        return json!(text);
    };
    let parts: Vec<Value> = image::pieces(text)
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => json!({"type": "text", "text": t}),
            Piece::Image { uri, .. } => json!({"type": "image_url", "image_url": {"url": uri}}),
        })
        .collect();
    Value::Array(parts)
}

/// A tool call being streamed: its pieces arrive by `index`.
#[derive(Default)]
struct PartialCall {
    name: String,
    arguments: String,
}

/// What the reader of one answer holds between chunks.
struct State {
    bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    ready: VecDeque<Result<LlmEvent>>,
    calls: BTreeMap<usize, PartialCall>,
    finish: Option<String>,
    usage: HashMap<&'static str, usize>,
    done: bool,
}

/// Reads the server-sent events of a streamed answer.
fn sse_events(resp: reqwest::Response) -> impl futures::Stream<Item = Result<LlmEvent>> {
    let state = State {
        bytes: resp.bytes_stream().boxed(),
        buf: vec![],
        ready: VecDeque::new(),
        calls: BTreeMap::new(),
        finish: None,
        usage: HashMap::new(),
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(e) = s.ready.pop_front() {
                return Some((e, s));
            }
            if s.done {
                return None;
            }
            // One event per blank-line-separated block.
            if let Some(end) = find_event_end(&s.buf) {
                let block: Vec<u8> = s.buf.drain(..end.0 + end.1).collect();
                let text = String::from_utf8_lossy(&block[..end.0]).into_owned();
                for line in text.lines() {
                    let Some(data) = line.strip_prefix("data:") else {
                        continue;
                    };
                    let data = data.trim();
                    if data == "[DONE]" {
                        finish(&mut s.ready, &mut s.calls, &s.finish, &s.usage);
                        s.done = true;
                        break;
                    }
                    match serde_json::from_str::<Value>(data) {
                        Ok(v) => {
                            if let Err(e) = chunk(&v, &mut s) {
                                s.ready.push_back(Err(e));
                                s.done = true;
                                break;
                            }
                        }
                        Err(e) => {
                            s.ready.push_back(Err(AgentError::Llm(format!(
                                "the server sent an event that is not JSON: {e}: {data}"
                            ))));
                            s.done = true;
                            break;
                        }
                    }
                }
                continue;
            }
            match s.bytes.next().await {
                Some(Ok(_)) if s.buf.len() > MAX_EVENT_BYTES => {
                    s.ready.push_back(Err(AgentError::Llm(format!(
                        "the server sent more than {MAX_EVENT_BYTES} bytes without ending an event"
                    ))));
                    s.done = true;
                }
                Some(Ok(b)) => s.buf.extend_from_slice(&b),
                Some(Err(e)) => {
                    s.ready
                        .push_back(Err(AgentError::Llm(format!("the answer broke off: {e}"))));
                    s.done = true;
                }
                None => {
                    // A server that ends the body without `[DONE]`: what came is the answer,
                    // if it said why it finished.
                    if s.finish.is_some() {
                        finish(&mut s.ready, &mut s.calls, &s.finish, &s.usage);
                    } else {
                        s.ready.push_back(Err(AgentError::Llm(
                            "the answer ended before it finished".into(),
                        )));
                    }
                    s.done = true;
                }
            }
        }
    })
}

fn chunk(v: &Value, s: &mut State) -> Result<()> {
    if v.get("error").is_some() {
        return Err(AgentError::Llm(error_message(v)));
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let get = |k: &str| u[k].as_u64().unwrap_or(0) as usize;
        s.usage.insert("prompt", get("prompt_tokens"));
        s.usage.insert("completion", get("completion_tokens"));
        s.usage.insert(
            "cached",
            u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0) as usize,
        );
    }
    let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
        return Ok(());
    };
    let delta = &choice["delta"];
    for key in ["reasoning_content", "reasoning"] {
        if let Some(t) = delta[key].as_str().filter(|t| !t.is_empty()) {
            s.ready.push_back(Ok(LlmEvent::Reasoning(t.to_string())));
            break;
        }
    }
    if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
        s.ready.push_back(Ok(LlmEvent::Text(t.to_string())));
    }
    for c in delta["tool_calls"].as_array().into_iter().flatten() {
        let index = c["index"].as_u64().unwrap_or(s.calls.len() as u64) as usize;
        let call = s.calls.entry(index).or_default();
        if let Some(n) = c["function"]["name"].as_str() {
            call.name.push_str(n);
        }
        if let Some(a) = c["function"]["arguments"].as_str() {
            call.arguments.push_str(a);
        }
    }
    if let Some(f) = choice["finish_reason"].as_str() {
        s.finish = Some(f.to_string());
    }
    Ok(())
}

fn finish(
    ready: &mut VecDeque<Result<LlmEvent>>,
    calls: &mut BTreeMap<usize, PartialCall>,
    reason: &Option<String>,
    usage: &HashMap<&'static str, usize>,
) {
    for (_, c) in std::mem::take(calls) {
        let arguments =
            serde_json::from_str::<Value>(&c.arguments).unwrap_or(Value::String(c.arguments));
        let call = json!({"name": c.name, "arguments": arguments});
        ready.push_back(Ok(LlmEvent::Text(format!(
            "\n<tool_call>\n{call}\n</tool_call>"
        ))));
    }
    let finish = match reason.as_deref() {
        Some("length") => "length",
        _ => "stop",
    };
    ready.push_back(Ok(LlmEvent::Done {
        finish: finish.into(),
        prompt_tokens: usage.get("prompt").copied().unwrap_or(0),
        cached_prompt_tokens: usage.get("cached").copied().unwrap_or(0),
        completion_tokens: usage.get("completion").copied().unwrap_or(0),
        model: None,
    }));
}

/// The longest server-sent event read (a chunk is a few hundred bytes; a server that never
/// ends one must not fill the memory).
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Where the first event ends: its length and the separator's.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_chat::ToolCall;

    #[tokio::test]
    async fn an_event_that_never_ends_is_an_error(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // A server that answers with 2.5 MiB of one event that never ends.
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await?;
            let mut request = vec![0u8; 1 << 16];
            let _ = sock.read(&mut request).await?;
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ")
                .await?;
            let chunk = vec![b'x'; 64 << 10];
            for _ in 0..40 {
                if sock.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            std::io::Result::Ok(())
        });
        let llm = OpenAiLlm::new(&format!("http://{addr}/v1"), "m")?;
        let request = crate::llm::LlmRequest {
            messages: vec![ChatMessage::new("user", "hi")],
            ..Default::default()
        };
        let err = crate::llm::complete(&llm, request)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("without ending an event"), "{err}");
        server.abort();
        Ok(())
    }

    #[test]
    fn tool_results_name_the_call_they_answer() {
        let mut tool = ChatMessage::new("tool", "4");
        tool.extra.clear();
        let msgs = vec![
            ChatMessage::new("user", "2+2?"),
            ChatMessage::new("assistant", "")
                .with_tool_calls(vec![ToolCall::new("add", json!({"a": 2}))]),
            tool,
        ];
        let out = openai_messages(&msgs);
        let id = out[1]["tool_calls"][0]["id"].as_str().unwrap_or_default();
        assert!(!id.is_empty());
        assert_eq!(
            out[1]["tool_calls"][0]["function"]["arguments"],
            json!("{\"a\":2}")
        );
        assert_eq!(out[2]["tool_call_id"], json!(id));
    }

    #[test]
    fn a_url_without_a_path_gets_v1_and_a_bad_one_is_refused() -> Result<()> {
        assert_eq!(
            OpenAiLlm::new("http://127.0.0.1:8080", "m")?.base_url,
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            OpenAiLlm::new("http://h:1/v1/", "m")?.base_url,
            "http://h:1/v1"
        );
        assert!(OpenAiLlm::new("ftp://h", "m").is_err());
        assert!(OpenAiLlm::new("not a url", "m").is_err());
        Ok(())
    }

    #[test]
    fn events_end_at_blank_lines() {
        assert_eq!(find_event_end(b"data: 1\n\ndata: 2"), Some((7, 2)));
        assert_eq!(find_event_end(b"data: 1\r\n\r\n"), Some((7, 4)));
        assert_eq!(find_event_end(b"data: 1\n"), None);
    }
}
