//! `hearth serve` end to end on the tiny fixture: OpenAI's shapes, streaming, errors,
//! keys, cancellation of a client that leaves, many clients at once, prefix reuse, and
//! `OpenAiLlm` against it.

mod common;

use hearth_agent::llm::{complete, Llm, LlmRequest, OpenAiLlm};
use hearth_engine::{ChatMessage, SamplingParams};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A server on a free loopback port, stopped when dropped.
struct Server {
    served: common::Served,
    addr: String,
}

impl Server {
    fn start(extra: &[&str]) -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_model(&common::tiny("qwen2"), extra)
    }

    fn start_model(
        model: &std::path::Path,
        extra: &[&str],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let model = model.to_str().ok_or("model path")?;
        let args = [
            &["--model", model, "--device", "cpu", "--alias", "tiny"][..],
            extra,
        ]
        .concat();
        let served = common::Served::start(&args)?;
        let addr = served.addr.clone();
        Ok(Self { served, addr })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(s: &Server, path: &str, body: Value) -> Result<(u16, Value), reqwest::Error> {
    let r = client().post(s.url(path)).json(&body).send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await?))
}

fn hello(max_tokens: usize) -> Value {
    json!({
        "model": "tiny",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// The `data:` payloads of an event stream, `[DONE]` included.
async fn sse(s: &Server, body: Value) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let r = client()
        .post(s.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 200);
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let text = r.text().await?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_in_openai_shape_whole_and_streamed() -> TestResult {
    let s = Server::start(&[])?;
    let (status, health) = {
        let r = client().get(s.url("/health")).send().await?;
        (r.status().as_u16(), r.json::<Value>().await?)
    };
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let models: Value = client()
        .get(s.url("/v1/models"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(models["data"][0]["id"], json!("tiny"));

    let (status, whole) = post(&s, "/v1/chat/completions", hello(6)).await?;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], json!("chat.completion"));
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["role"], json!("assistant"));
    let content = choice["message"]["content"].as_str().ok_or("no content")?;
    let usage = &whole["usage"];
    let completion = usage["completion_tokens"].as_u64().ok_or("no usage")?;
    assert!((1..=6).contains(&completion), "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap_or(0) + completion)
    );
    assert!(usage["prompt_tokens_details"]["cached_tokens"].is_u64());
    let finish = choice["finish_reason"].as_str().ok_or("no finish_reason")?;
    assert!(finish == "length" || finish == "stop", "{finish}");

    // Streamed, greedy: the same text, one choice per chunk, usage last, then [DONE].
    let mut body = hello(6);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let events = sse(&s, body).await?;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e))
        .collect::<Result<_, _>>()?;
    let (last, rest) = chunks.split_last().ok_or("no chunks")?;
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"]["completion_tokens"].as_u64(),
        Some(completion)
    );
    assert_eq!(rest[0]["choices"][0]["delta"]["role"], json!("assistant"));
    let mut streamed = String::new();
    for c in rest {
        assert_eq!(c["object"], json!("chat.completion.chunk"));
        assert_eq!(c["choices"].as_array().map(Vec::len), Some(1), "{c}");
        assert_eq!(c["id"], rest[0]["id"]);
        streamed.push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    assert_eq!(streamed, content);
    assert_eq!(
        rest.last().ok_or("no chunk")?["choices"][0]["finish_reason"],
        json!(finish)
    );

    // Raw completions.
    let (status, c) = post(
        &s,
        "/v1/completions",
        json!({"prompt": "Once upon", "max_tokens": 4, "temperature": 0}),
    )
    .await?;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["object"], json!("text_completion"));
    assert!(c["choices"][0]["text"].is_string());
    assert_eq!(c["usage"]["completion_tokens"].as_u64(), Some(4));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_the_server_keeps_serving() -> TestResult {
    let s = Server::start(&["--max-body-mb", "1"])?;
    let user = json!({"role": "user", "content": "hi"});
    let cases: Vec<(Value, u16, Option<&str>)> = vec![
        (json!({"messages": []}), 400, Some("messages")),
        (json!({"messages": "hi"}), 400, Some("messages")),
        (
            json!({"messages": [user], "temperature": "hot"}),
            400,
            Some("temperature"),
        ),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            400,
            Some("messages[0].role"),
        ),
        (
            json!({"messages": [user, {"role": "tool", "content": "4", "tool_call_id": "nope"}]}),
            400,
            Some("messages[1].tool_call_id"),
        ),
        (
            json!({"messages": [user], "tools": [{"type": "function", "function": {"name": "f", "parameters": 7}}]}),
            400,
            Some("tools[0].function.parameters"),
        ),
        (
            json!({"messages": [user], "tool_choice": "required"}),
            400,
            Some("tool_choice"),
        ),
        (json!({"messages": [user], "n": 3}), 400, Some("n")),
        (
            json!({"messages": [user], "max_tokens": 0}),
            400,
            Some("max_tokens"),
        ),
        (
            json!({"messages": [user], "presence_penalty": 0.5}),
            400,
            Some("presence_penalty"),
        ),
        (
            json!({"messages": [{"role": "user", "content": "word ".repeat(600)}]}),
            400,
            Some("messages"),
        ),
    ];
    for (body, status, param) in cases {
        let (got, err) = post(&s, "/v1/chat/completions", body.clone()).await?;
        assert_eq!(got, status, "{body}: {err}");
        assert_eq!(err["error"]["param"].as_str(), param, "{body}: {err}");
        assert!(err["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(err["error"]["type"].is_string());
    }
    // Over the context: OpenAI's code.
    let (_, err) = post(
        &s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "word ".repeat(600)}]}),
    )
    .await?;
    assert_eq!(err["error"]["code"], json!("context_length_exceeded"));
    // Anthropic's shape and words, which Claude Code reads to compact its conversation.
    let (status, err) = post(
        &s,
        "/v1/messages",
        json!({"model": "m", "max_tokens": 8,
               "messages": [{"role": "user", "content": "word ".repeat(600)}]}),
    )
    .await?;
    assert_eq!(status, 400);
    assert_eq!(err["type"], json!("error"));
    assert_eq!(err["error"]["type"], json!("invalid_request_error"));
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("prompt is too long: ") && message.ends_with(" maximum"),
        "{err}"
    );

    let raw = |body: Vec<u8>| {
        let url = s.url("/v1/chat/completions");
        async move {
            let r = client()
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.json::<Value>().await?))
        }
    };
    let (status, err) = raw(b"{\"messages\": [".to_vec()).await?;
    assert_eq!(status, 400);
    assert!(err["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("malformed JSON")));
    let (status, err) = raw(vec![b' '; 2 << 20]).await?;
    assert_eq!(status, 413, "{err}");
    assert!(err["error"]["message"].is_string());

    let r = client().get(s.url("/v1/nowhere")).send().await?;
    assert_eq!(r.status().as_u16(), 404);
    assert!(r.json::<Value>().await?["error"]["message"].is_string());

    // Still serving.
    let (status, _) = post(&s, "/v1/chat/completions", hello(2)).await?;
    assert_eq!(status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_makes_even_a_random_model_answer_in_schema() -> TestResult {
    // The tiny model is random weights: only the mask can make its answer valid JSON.
    let s = Server::start(&[])?;
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "sunny": {"type": "boolean"},
        "kind": {"enum": ["rain", "sun"]}},
        "required": ["city", "sunny", "kind"], "additionalProperties": false});
    let mut body = hello(96);
    body["temperature"] = json!(1.0);
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "w", "schema": schema}});
    for seed in 0..3 {
        body["seed"] = json!(seed);
        let (status, v) = post(&s, "/v1/chat/completions", body.clone()).await?;
        assert_eq!(status, 200, "{v}");
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .ok_or("no content")?;
        let answer: Value = serde_json::from_str(content)?;
        assert!(
            answer["city"].is_string() && answer["sunny"].is_boolean(),
            "{answer}"
        );
        assert!(
            answer["kind"] == json!("rain") || answer["kind"] == json!("sun"),
            "{answer}"
        );
        assert_eq!(v["choices"][0]["finish_reason"], json!("stop"));
    }
    body["response_format"] = json!({"type": "json_object"});
    let (_, v) = post(&s, "/v1/chat/completions", body).await?;
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or("no content")?;
    assert!(
        serde_json::from_str::<Value>(content)?.is_object(),
        "{content}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls_are_valid_even_from_a_random_model() -> TestResult {
    let s = Server::start(&[])?;
    let tool = |name: &str, props: Value| {
        json!({"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": props,
            "required": props.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
            "additionalProperties": false}}})
    };
    let tools = json!([
        tool(
            "add",
            json!({"a": {"type": "integer"}, "b": {"type": "integer"}})
        ),
        tool(
            "shout",
            json!({"text": {"type": "string", "maxLength": 10}})
        ),
    ]);
    for (choice, seed) in [
        (json!("required"), 1),
        (
            json!({"type": "function", "function": {"name": "shout"}}),
            2,
        ),
    ] {
        let mut body = hello(160);
        body["temperature"] = json!(1.0);
        body["seed"] = json!(seed);
        body["tools"] = tools.clone();
        body["tool_choice"] = choice.clone();
        let (status, v) = post(&s, "/v1/chat/completions", body).await?;
        assert_eq!(status, 200, "{v}");
        let message = &v["choices"][0]["message"];
        let calls = message["tool_calls"]
            .as_array()
            .ok_or(format!("no calls: {v}"))?;
        assert!(!calls.is_empty());
        for c in calls {
            let name = c["function"]["name"].as_str().ok_or("no name")?;
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().ok_or("no arguments")?)?;
            match name {
                "add" => assert!(args["a"].is_i64() && args["b"].is_i64(), "{args}"),
                "shout" => assert!(
                    args["text"]
                        .as_str()
                        .is_some_and(|t| t.chars().count() <= 10),
                    "{args}"
                ),
                other => return Err(format!("called {other}, which was not offered").into()),
            }
            if choice.is_object() {
                assert_eq!(name, "shout");
            }
        }
        assert_eq!(v["choices"][0]["finish_reason"], json!("tool_calls"), "{v}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_guards_v1_but_not_health() -> TestResult {
    let s = Server::start(&["--api-key", "sesame"])?;
    let r = client()
        .post(s.url("/v1/chat/completions"))
        .json(&hello(2))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        r.json::<Value>().await?["error"]["type"],
        json!("authentication_error")
    );
    let r = client()
        .post(s.url("/v1/chat/completions"))
        .bearer_auth("sesame")
        .json(&hello(2))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        client()
            .get(s.url("/health"))
            .send()
            .await?
            .status()
            .as_u16(),
        200
    );
    Ok(())
}

async fn running(s: &Server) -> Result<u64, Box<dyn std::error::Error>> {
    let h: Value = client().get(s.url("/health")).send().await?.json().await?;
    Ok(h["running"].as_u64().ok_or("no running count")? + h["waiting"].as_u64().unwrap_or(0))
}

async fn wait_idle(s: &Server) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    while running(s).await? > 0 {
        if start.elapsed() > Duration::from_secs(10) {
            return Err("a generation kept running for a client that left".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Sends `body` on a raw connection and returns it once `wanted` bytes came back.
fn raw_request(addr: &str, body: &Value, wanted: usize) -> std::io::Result<TcpStream> {
    let mut conn = TcpStream::connect(addr)?;
    let body = body.to_string();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut got = vec![0u8; wanted];
    if wanted > 0 {
        conn.read_exact(&mut got)?;
    }
    Ok(conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_its_generation() -> TestResult {
    // The real model: slow enough that a long answer is still running when the client leaves.
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let s = Server::start_model(&model, &[])?;
    let mut long = hello(100_000);
    // An answer that runs for minutes, whatever the sampler draws ("Hello there" may be
    // answered in a few tokens, faster than the checks below on an idle machine).
    long["messages"] = json!([{"role": "user", "content":
        "Count from 1 to 100000, one number per line, and write nothing else."}]);
    long["temperature"] = json!(1.0);
    long["stream"] = json!(true);
    let conn = raw_request(&s.addr, &long, 200)?;
    assert!(running(&s).await? > 0, "the stream should be generating");
    drop(conn);
    wait_idle(&s).await?;

    // Not streamed: the answer is only written at the end, but the server still notices.
    long["stream"] = json!(false);
    let conn = raw_request(&s.addr, &long, 0)?;
    let start = Instant::now();
    while running(&s).await? == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the request never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        running(&s).await? > 0,
        "the answer should still be generating"
    );
    drop(conn);
    wait_idle(&s).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_at_once_all_get_answers() -> TestResult {
    let s = Server::start(&["--max-seqs", "8"])?;
    let mut tasks = vec![];
    for i in 0..50 {
        let url = s.url("/v1/chat/completions");
        let mut body = hello(3);
        body["messages"][1]["content"] = json!(format!("Hello number {i}"));
        tasks.push(tokio::spawn(async move {
            let r = client().post(url).json(&body).send().await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.json::<Value>().await?))
        }));
    }
    for t in tasks {
        let (status, v) = t.await??;
        // Served, or refused in OpenAI's shape when the queue is full.
        assert!(status == 200 || status == 503, "{status}: {v}");
        if status == 200 {
            assert_eq!(
                v["usage"]["completion_tokens"].as_u64().map(|n| n <= 3),
                Some(true)
            );
        } else {
            assert!(v["error"]["message"].is_string());
        }
    }
    wait_idle(&s).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_conversation_reuses_its_cached_prefix() -> TestResult {
    let s = Server::start(&[])?;
    let mut body = hello(4);
    let (_, first) = post(&s, "/v1/chat/completions", body.clone()).await?;
    let answer = first["choices"][0]["message"]["content"].clone();
    let messages = body["messages"].as_array_mut().ok_or("messages")?;
    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": "And then?"}));
    let (status, second) = post(&s, "/v1/chat/completions", body).await?;
    assert_eq!(status, 200);
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(
        cached >= first_prompt / 2 && cached > 0,
        "{cached} of {first_prompt}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_llm_talks_to_hearth_serve() -> TestResult {
    let s = Server::start(&["--api-key", "k"])?;
    let (_, whole) = {
        let r = client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth("k")
            .json(&hello(6))
            .send()
            .await?;
        (r.status().as_u16(), r.json::<Value>().await?)
    };
    let llm = OpenAiLlm::new(&format!("http://{}", s.addr), "")?
        .with_api_key(Some("k".into()))
        .discover_model()
        .await?;
    assert_eq!(llm.model(), "tiny");
    let out = complete(
        &llm,
        LlmRequest {
            messages: vec![
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "Hello there"),
            ],
            max_tokens: Some(6),
            sampling: Some(SamplingParams::default()),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(
        Some(out.text.as_str()),
        whole["choices"][0]["message"]["content"].as_str()
    );
    assert_eq!(
        Some(out.completion_tokens as u64),
        whole["usage"]["completion_tokens"].as_u64()
    );
    // A wrong key is an error that says so, not a retry loop.
    let bad = OpenAiLlm::new(&format!("http://{}", s.addr), "tiny")?.with_api_key(Some("x".into()));
    let err = complete(
        &bad,
        LlmRequest {
            messages: vec![ChatMessage::new("user", "hi")],
            ..Default::default()
        },
    )
    .await
    .err()
    .ok_or("a wrong key must fail")?;
    assert!(err.to_string().contains("401"), "{err}");
    assert!(!bad.name().is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearth_agent_runs_on_a_served_model() -> TestResult {
    let s = Server::start(&[])?;
    let url = s.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["agent", "--llm-url", &url, "--tools", "calculator"])
            .args([
                "--max-tokens",
                "8",
                "--max-iterations",
                "2",
                "--json",
                "Say hi",
            ])
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The random model's answer is noise; the run itself must be whole.
    let run: Value =
        serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout} {stderr}"))?;
    assert!(
        run["stop_reason"].is_string() && run["iterations"].as_u64() >= Some(1),
        "{run}"
    );
    assert_ne!(run["stop_reason"], json!("error"), "{run} {stderr}");

    // Neither a model nor a server: a clear error.
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["agent", "Say hi"])
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model"));
    Ok(())
}

/// A model whose template writes XML calls (Qwen3-Coder's) streams each call as it is written:
/// the name first, then its arguments a parameter at a time, adding up to the arguments of the
/// same answer asked for whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_tool_calls_stream_their_arguments_as_they_are_written() -> TestResult {
    let tmp = tempfile::tempdir()?;
    for entry in std::fs::read_dir(common::tiny("qwen3"))? {
        let p = entry?.path();
        std::fs::copy(&p, tmp.path().join(p.file_name().ok_or("a file name")?))?;
    }
    let coder = common::fixtures().join("templates/Qwen3-Coder.jinja");
    std::fs::copy(coder, tmp.path().join("chat_template.jinja"))?;
    // Room for the template's long tool prompt (the fixture's positions are rotary: any fit).
    let config = tmp.path().join("config.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&config)?)?;
    c["max_position_embeddings"] = json!(2048);
    std::fs::write(&config, c.to_string())?;
    let s = Server::start_model(tmp.path(), &[])?;
    let mut body = hello(200);
    body["temperature"] = json!(1.0);
    body["seed"] = json!(3);
    body["tool_choice"] = json!("required");
    body["tools"] = json!([{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": false}}}]);
    let (status, whole) = post(&s, "/v1/chat/completions", body.clone()).await?;
    assert_eq!(status, 200, "{whole}");
    let calls = whole["choices"][0]["message"]["tool_calls"]
        .as_array()
        .ok_or(format!("no calls: {whole}"))?
        .clone();
    body["stream"] = json!(true);
    let events = sse(&s, body).await?;
    // Per call index: its name, and the argument pieces in order.
    let mut streamed: Vec<(String, Vec<String>)> = vec![];
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e)?;
        for d in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().ok_or("a call delta without an index")? as usize;
            if let Some(name) = d["function"]["name"].as_str() {
                assert_eq!(i, streamed.len(), "{e}");
                assert!(d["id"].is_string(), "{e}");
                streamed.push((name.to_string(), vec![]));
            }
            let piece = d["function"]["arguments"].as_str().ok_or("no arguments")?;
            if !piece.is_empty() {
                streamed[i].1.push(piece.to_string());
            }
        }
    }
    assert_eq!(streamed.len(), calls.len(), "{events:?}");
    for ((name, pieces), call) in streamed.iter().zip(&calls) {
        assert_eq!(name, &call["function"]["name"]);
        assert_eq!(
            pieces.concat(),
            call["function"]["arguments"].as_str().unwrap_or_default()
        );
        // `a` went out before `b` was written.
        assert!(pieces.len() >= 2, "{pieces:?}");
        let args: Value = serde_json::from_str(&pieces.concat())?;
        assert!(args["a"].is_i64() && args["b"].is_i64(), "{args}");
    }
    Ok(())
}

/// Access: every route but /health wants the key; a page of another origin gets CORS headers
/// only from `--cors`; a bind other machines can reach, without a key, is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_is_keyed_cors_is_opt_in_and_an_open_bind_is_warned() -> TestResult {
    let preflight = |s: &Server| {
        client()
            .request(reqwest::Method::OPTIONS, s.url("/v1/chat/completions"))
            .header("Origin", "http://localhost:3000")
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization, content-type",
            )
            .send()
    };
    let s = Server::start(&["--api-key", "sesame"])?;
    let r = client().get(s.url("/v1/models")).send().await?;
    assert_eq!(r.status().as_u16(), 401);
    let r = client()
        .get(s.url("/v1/models"))
        .bearer_auth("sesam")
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 401, "a prefix of the key is no key");
    let r = preflight(&s).await?;
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "{:?}",
        r.headers()
    );
    drop(s);
    let s = Server::start(&["--cors", "http://localhost:3000"])?;
    let r = preflight(&s).await?;
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://localhost:3000")
    );
    drop(s);
    // A bad origin is refused at start, naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--model"])
        .arg(common::tiny("qwen2"))
        .args(["--device", "cpu", "--port", "0", "--cors", "bad\norigin"])
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cors"));
    // 0.0.0.0 without a key: a warning before it listens.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--model"])
        .arg(common::tiny("qwen2"))
        .args(["--device", "cpu", "--port", "0", "--host", "0.0.0.0"])
        .env("HF_HUB_OFFLINE", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut warned = false;
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        warned |= line.contains("without --api-key");
        if line.contains("listening on http://") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "no warning for an open bind without a key");
    Ok(())
}

/// SIGTERM: a running stream still ends with its final chunk and `[DONE]` (at once when the
/// grace is 0, after its last token otherwise), no new request is taken, and the server exits
/// cleanly rather than being killed by the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_running_answers_end_and_exits_cleanly() -> TestResult {
    for grace in ["0", "30"] {
        let mut s = Server::start(&["--shutdown-grace", grace])?;
        let pid = s.served.child.id().to_string();
        let mut body = hello(400);
        body["stream"] = json!(true);
        body["temperature"] = json!(1.0);
        let answer = sse(&s, body);
        let stop = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Command::new("kill").args(["-TERM", &pid]).status()
        };
        let (events, killed) = tokio::join!(answer, stop);
        assert!(killed?.success());
        let events = events?;
        assert_eq!(
            events.last().map(String::as_str),
            Some("[DONE]"),
            "grace {grace}"
        );
        let finish: Value = serde_json::from_str(&events[events.len() - 2])?;
        assert!(
            finish["choices"][0]["finish_reason"].is_string(),
            "grace {grace}: {finish}"
        );
        let started = Instant::now();
        let status = loop {
            if let Some(status) = s.served.child.try_wait()? {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "grace {grace}: still running"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "grace {grace}: {status:?}");
        assert!(client().get(s.url("/health")).send().await.is_err());
    }
    Ok(())
}

/// A server killed outright (SIGKILL) mid-stream: the client's stream ends in an error, not a
/// hang, and a new server starts at once on the same port (its connections still closing) and
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_restarts_on_its_port_and_serves() -> TestResult {
    let mut s = Server::start(&[])?;
    let port = s.addr.rsplit(':').next().ok_or("no port")?.to_string();
    let mut body = hello(400);
    body["stream"] = json!(true);
    body["temperature"] = json!(1.0);
    let mut stream = client()
        .post(s.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(stream.status().as_u16(), 200);
    assert!(stream.chunk().await?.is_some(), "no first chunk");
    s.served.child.kill()?; // SIGKILL
    s.served.child.wait()?;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
    })
    .await?;
    assert!(ended, "the stream of a killed server ended as if whole");
    let again = Server::start(&["--port", &port])?;
    let (status, v) = post(&again, "/v1/chat/completions", hello(4)).await?;
    assert_eq!(status, 200, "{v}");
    Ok(())
}

/// A body that never ends: a 400 in OpenAI's shape once `--body-timeout` has passed, and the
/// server keeps serving others meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_ends_gets_a_400_in_bounded_time() -> TestResult {
    let s = Server::start(&["--body-timeout", "1"])?;
    let mut slow = TcpStream::connect(&s.addr)?;
    slow.set_read_timeout(Some(Duration::from_secs(10)))?;
    let started = Instant::now();
    slow.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\"",
    )?;
    // Others are served while it hangs.
    let (status, _) = post(&s, "/v1/chat/completions", hello(2)).await?;
    assert_eq!(status, 200);
    let mut reply = String::new();
    let mut buf = [0u8; 4096];
    while !reply.contains("\r\n\r\n{") {
        let n = slow.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let waited = started.elapsed();
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(reply.contains("invalid_request_error"), "{reply}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    Ok(())
}

/// A client that sends its headers a byte at a time (slowloris) has its connection closed once
/// `--header-timeout` passes, and others are served while it trickles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_headers_is_cut_off() -> TestResult {
    let s = Server::start(&["--header-timeout", "1"])?;
    let addr = s.addr.clone();
    let slow = std::thread::spawn(move || -> std::io::Result<Option<Duration>> {
        let mut t = TcpStream::connect(&addr)?;
        t.set_read_timeout(Some(Duration::from_millis(100)))?;
        let started = Instant::now();
        t.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")?;
        let mut buf = [0u8; 256];
        while started.elapsed() < Duration::from_secs(10) {
            if t.write_all(b"a").is_err() {
                return Ok(Some(started.elapsed()));
            }
            match t.read(&mut buf) {
                Ok(0) => return Ok(Some(started.elapsed())),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Ok(Some(started.elapsed())),
            }
        }
        Ok(None)
    });
    let (status, _) = post(&s, "/v1/chat/completions", hello(2)).await?;
    assert_eq!(status, 200);
    let closed_after = slow.join().map_err(|_| "the slow client panicked")??;
    let waited = closed_after.ok_or("the trickling connection was still open after 10 s")?;
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    Ok(())
}

/// Hostile bodies each get a clear 4xx naming the problem, in bounded time: JSON nested far
/// deeper than any request, bytes that are not UTF-8, a 40 MB body, 10,000 stop strings, a 1 MB
/// stop string, a negative temperature, a million choices, out-of-range token counts and
/// sampling values, a 10,000-entry logit_bias. Prints each case's status and time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_clear_4xx_in_bounded_time() -> TestResult {
    let s = Server::start(&[])?;
    let raw = |body: Vec<u8>| {
        client()
            .post(s.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let with = |field: &str, value: Value| {
        let mut b = hello(2);
        b[field] = value;
        serde_json::to_vec(&b).unwrap_or_default()
    };
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("nested 100,000 deep", "[".repeat(100_000).into_bytes(), 400),
        (
            "invalid UTF-8",
            b"{\"messages\": [\"\xff\xfe\"]}".to_vec(),
            400,
        ),
        (
            "10,000 stop strings",
            with(
                "stop",
                json!((0..10_000).map(|i| format!("s{i}")).collect::<Vec<_>>()),
            ),
            400,
        ),
        (
            "1 MB stop string",
            with("stop", json!("x".repeat(1 << 20))),
            400,
        ),
        (
            "negative temperature",
            with("temperature", json!(-1.0)),
            400,
        ),
        ("n = 1,000,000", with("n", json!(1_000_000)), 400),
        ("max_tokens 1e30", with("max_tokens", json!(1e30)), 400),
        ("negative max_tokens", with("max_tokens", json!(-5)), 400),
        (
            "a huge logit_bias",
            with(
                "logit_bias",
                json!((0..10_000)
                    .map(|i| (i.to_string(), json!(100)))
                    .collect::<serde_json::Map<_, _>>()),
            ),
            400,
        ),
        // JSON has no NaN; a number past f64 is the nearest a client can send.
        (
            "top_p 1e999",
            br#"{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e999}"#.to_vec(),
            400,
        ),
        ("top_p above 1", with("top_p", json!(1.5)), 400),
        ("negative top_k", with("top_k", json!(-3)), 400),
    ];
    for (what, body, want) in cases {
        let started = Instant::now();
        let r = raw(body).await?;
        let status = r.status().as_u16();
        let v: Value = r.json().await?;
        let took = started.elapsed();
        println!("{what}: {status} in {took:?}: {}", v["error"]["message"]);
        assert_eq!(status, want, "{what}: {v}");
        assert!(v["error"]["message"].is_string(), "{what}: {v}");
        assert!(took < Duration::from_secs(5), "{what}: {took:?}");
    }
    // 40 MB: refused once past the limit, before the rest is read (the writer then finds the
    // connection closed, as with any server that refuses a body).
    let started = Instant::now();
    let mut big = TcpStream::connect(&s.addr)?;
    big.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = big.try_clone()?;
    std::thread::spawn(move || {
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 41943040\r\n\r\n";
        let _ = writer.write_all(head);
        let _ = writer.write_all(&vec![b' '; 40 << 20]);
    });
    let mut reply = vec![0u8; 4096];
    let n = big.read(&mut reply)?;
    let reply = String::from_utf8_lossy(&reply[..n]).to_string();
    println!(
        "40 MB body: {} in {:?}",
        reply.lines().next().unwrap_or_default(),
        started.elapsed()
    );
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // And the server still answers.
    assert_eq!(post(&s, "/v1/chat/completions", hello(2)).await?.0, 200);
    Ok(())
}

/// Past the queue (`--max-queue`), a request gets a 503 in OpenAI's shape with `Retry-After`;
/// the ones admitted are answered whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_a_request_gets_503_with_retry_after() -> TestResult {
    let s = Server::start(&["--max-seqs", "1", "--max-queue", "1"])?;
    let mut body = hello(400);
    body["temperature"] = json!(1.0);
    let asks = (0..12).map(|i| {
        let mut b = body.clone();
        b["seed"] = json!(i);
        client().post(s.url("/v1/chat/completions")).json(&b).send()
    });
    let replies = futures::future::join_all(asks).await;
    let (mut ok, mut refused) = (0, 0);
    for r in replies {
        let r = r?;
        match r.status().as_u16() {
            200 => ok += 1,
            503 => {
                assert_eq!(
                    r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
                    Some("1")
                );
                let v: Value = r.json().await?;
                assert_eq!(v["error"]["code"], json!("queue_full"), "{v}");
                refused += 1;
            }
            other => return Err(format!("status {other}").into()),
        }
    }
    assert!(ok >= 1 && refused >= 1, "{ok} answered, {refused} refused");
    Ok(())
}

/// 1,000 clients that send a streamed request and leave before reading it: none keeps a
/// sequence, and the KV pool holds what one such client leaves (its prompt's prefix, kept for
/// reuse), not a thousand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_that_leave_leave_the_pool_as_it_was() -> TestResult {
    let s = Server::start(&[])?;
    let mut body = hello(200);
    body["stream"] = json!(true);
    let pool = |h: &Value| {
        (
            h["kv_cache"]["bytes"].as_u64().unwrap_or(u64::MAX),
            h["kv_cache"]["idle_caches"].as_u64().unwrap_or(u64::MAX),
        )
    };
    let health = || async {
        client()
            .get(s.url("/health"))
            .send()
            .await?
            .json::<Value>()
            .await
    };
    drop(raw_request(&s.addr, &body, 0)?);
    wait_idle(&s).await?;
    let after_one = pool(&health().await?);
    let started = Instant::now();
    for _ in 0..1000 {
        drop(raw_request(&s.addr, &body, 0)?);
    }
    wait_idle(&s).await?;
    let h = health().await?;
    println!(
        "1000 clients left in {:?}; pool after one {after_one:?}, after 1000 {:?}",
        started.elapsed(),
        pool(&h)
    );
    assert_eq!(
        (h["running"].as_u64(), h["waiting"].as_u64()),
        (Some(0), Some(0))
    );
    // One prompt, answered greedily: whatever each client got to, one cache holds it all.
    assert!(pool(&h).1 <= after_one.1.max(1), "{h}");
    // And it still answers.
    assert_eq!(post(&s, "/v1/chat/completions", hello(2)).await?.0, 200);
    Ok(())
}

/// A Qwen3.5 hybrid (Gated DeltaNet state beside the KV cache) through the server: answers
/// batched with others equal the answer alone, and the next turn resumes from the state the
/// last one left instead of recomputing the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hybrid_model_batches_and_resumes_its_next_turn() -> TestResult {
    let s = Server::start_model(&common::tiny("qwen3.5"), &[])?;
    let (status, alone) = post(&s, "/v1/chat/completions", hello(8)).await?;
    assert_eq!(status, 200, "{alone}");
    let answer = alone["choices"][0]["message"]["content"].clone();
    let together =
        futures::future::join_all((0..4).map(|_| post(&s, "/v1/chat/completions", hello(8)))).await;
    for r in together {
        let (status, v) = r?;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], answer);
    }
    let mut body = hello(4);
    let messages = body["messages"].as_array_mut().ok_or("messages")?;
    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": "And then?"}));
    let (status, next) = post(&s, "/v1/chat/completions", body).await?;
    assert_eq!(status, 200, "{next}");
    let cached = next["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    // The state resumes at the last checkpoint the history still matches: the start of the
    // answer's message (its empty thinking block is not rendered again in the history).
    let first_prompt = alone["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(
        first_prompt > 8 && cached + 8 >= first_prompt && cached < first_prompt + 8,
        "{cached} cached of a first prompt of {first_prompt}"
    );
    Ok(())
}

/// The `(event, data)` pairs of a stream whose events are named (Anthropic's, Responses').
async fn named_events(
    s: &Server,
    path: &str,
    body: Value,
) -> Result<Vec<(String, Value)>, Box<dyn std::error::Error>> {
    let r = client().post(s.url(path)).json(&body).send().await?;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await?;
    let mut out = vec![];
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let data: Value = serde_json::from_str(d)?;
            // Each event's name is its data's `type`.
            assert_eq!(data["type"].as_str(), Some(name.as_str()), "{line}");
            out.push((std::mem::take(&mut name), data));
        }
    }
    Ok(out)
}

/// The same conversation through chat completions, Anthropic's messages and OpenAI's
/// responses renders the same prompt (the same token count) and, greedy, the same answer,
/// whole and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_apis_render_the_same_prompt_and_answer() -> TestResult {
    let s = Server::start(&[])?;
    let (system, user) = ("Be brief.", "Hello there");
    let (status, chat) = post(&s, "/v1/chat/completions", hello(8)).await?;
    assert_eq!(status, 200, "{chat}");
    let text = chat["choices"][0]["message"]["content"].clone();
    let prompt = chat["usage"]["prompt_tokens"].as_u64();
    assert!(text.as_str().is_some_and(|t| !t.is_empty()), "{chat}");

    let anthropic = json!({"model": "tiny", "system": system, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": user}]});
    let (status, message) = post(&s, "/v1/messages", anthropic.clone()).await?;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["type"], json!("message"));
    assert_eq!(message["content"][0]["text"], text, "{message}");
    let usage = &message["usage"];
    let read = |k: &str| usage[k].as_u64().unwrap_or(0);
    assert_eq!(
        Some(read("input_tokens") + read("cache_read_input_tokens")),
        prompt
    );
    let (status, count) = post(&s, "/v1/messages/count_tokens", anthropic.clone()).await?;
    assert_eq!((status, count["input_tokens"].as_u64()), (200, prompt));

    let responses = json!({"model": "tiny", "instructions": system, "input": user,
        "max_output_tokens": 8, "temperature": 0});
    let (status, response) = post(&s, "/v1/responses", responses.clone()).await?;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["output"][0]["content"][0]["text"], text,
        "{response}"
    );
    assert_eq!(response["usage"]["input_tokens"].as_u64(), prompt);

    // Streamed: Anthropic's event order, and the deltas add up to the same text.
    let mut streamed = anthropic;
    streamed["stream"] = json!(true);
    let events = named_events(&s, "/v1/messages", streamed).await?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let deltas: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(Some(deltas.as_str()), text.as_str());
    assert_eq!(
        events[0].1["message"]["usage"]["input_tokens"].as_u64(),
        prompt
    );

    let mut streamed = responses;
    streamed["stream"] = json!(true);
    let events = named_events(&s, "/v1/responses", streamed).await?;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    assert!(
        matches!(
            names.last(),
            Some(&"response.completed" | &"response.incomplete")
        ),
        "{names:?}"
    );
    for (i, (_, d)) in events.iter().enumerate() {
        assert_eq!(d["sequence_number"].as_u64(), Some(i as u64));
    }
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(Some(deltas.as_str()), text.as_str());
    Ok(())
}

/// A thinking model's reasoning comes back as Anthropic `thinking` blocks and Responses
/// `reasoning` items, streamed as their own deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_comes_back_as_thinking_blocks_and_reasoning_items() -> TestResult {
    // Qwen3.5's own template: its generation prompt opens the thinking block.
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/engine/tests/fixtures/templates/Qwen3.5-4B.jinja"
    );
    let s = Server::start_model(&common::tiny("qwen3.5"), &["--template", template])?;
    let body = json!({"model": "tiny", "max_tokens": 6, "temperature": 0,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Hello there"}]});
    let (status, message) = post(&s, "/v1/messages", body.clone()).await?;
    assert_eq!(status, 200, "{message}");
    let first = &message["content"][0];
    assert_eq!(first["type"], json!("thinking"), "{message}");
    let thought = first["thinking"].as_str().ok_or("no thinking")?;
    assert!(!thought.is_empty());
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = named_events(&s, "/v1/messages", streamed).await?;
    assert_eq!(
        events[2].1["content_block"]["type"],
        json!("thinking"),
        "{events:?}"
    );
    let deltas: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(deltas, thought);

    let body = json!({"model": "tiny", "max_output_tokens": 6, "temperature": 0,
        "reasoning": {"effort": "medium"}, "input": "Hello there"});
    let (status, response) = post(&s, "/v1/responses", body).await?;
    assert_eq!(status, 200, "{response}");
    let item = &response["output"][0];
    assert_eq!(item["type"], json!("reasoning"), "{response}");
    assert_eq!(item["content"][0]["text"].as_str(), Some(thought));
    // Cut off by max_output_tokens.
    assert_eq!(response["status"], json!("incomplete"));
    assert_eq!(
        response["incomplete_details"]["reason"],
        json!("max_output_tokens")
    );
    Ok(())
}

/// Each API's bad requests get that API's error shape and a 4xx naming the field; the key
/// is read from `x-api-key` as Anthropic's clients send it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_answers_bad_requests_in_its_own_shape() -> TestResult {
    let s = Server::start(&["--api-key", "sesame"])?;
    let send = |path: &'static str, body: Value, key: Option<(&'static str, &'static str)>| {
        let mut r = client().post(s.url(path)).json(&body);
        if let Some((h, v)) = key {
            r = r.header(h, v);
        }
        async move {
            let r = r.send().await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.json::<Value>().await?))
        }
    };
    let x_key = Some(("x-api-key", "sesame"));
    let user = json!([{"role": "user", "content": "hi"}]);
    for (body, field) in [
        (json!({"messages": user}), "max_tokens"),
        (
            json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            "messages[0].content[0].source.type",
        ),
        (
            json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]}),
            "messages[0].content[0].tool_use_id",
        ),
        (
            json!({"max_tokens": 4, "messages": user, "temperature": "warm"}),
            "temperature",
        ),
    ] {
        let (status, v) = send("/v1/messages", body, x_key).await?;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["type"], json!("error"), "{v}");
        assert_eq!(v["error"]["type"], json!("invalid_request_error"), "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(field), "{field}: {v}");
    }
    let (status, v) = send(
        "/v1/messages",
        json!({"max_tokens": 4, "messages": user}),
        None,
    )
    .await?;
    assert_eq!(
        (status, &v["error"]["type"]),
        (401, &json!("authentication_error"))
    );
    let bearer = Some(("authorization", "Bearer sesame"));
    for (body, field) in [
        (
            json!({"input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "4"}]}),
            "input[0].call_id",
        ),
        (json!({"input": 5}), "input"),
    ] {
        let (status, v) = send("/v1/responses", body, bearer).await?;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], json!(field), "{v}");
    }
    // Not JSON at all: still the API's shape, and the server keeps serving.
    let r = client()
        .post(s.url("/v1/messages"))
        .header("x-api-key", "sesame")
        .body("{not json")
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<Value>().await?["type"], json!("error"));
    let (status, _) = send(
        "/v1/messages",
        json!({"max_tokens": 2, "messages": user}),
        x_key,
    )
    .await?;
    assert_eq!(status, 200);
    Ok(())
}

/// The value of the sample `name` (with its labels, as written) in a Prometheus text page.
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `/metrics` counts requests by route and status and the tokens of finished answers,
/// times the first tokens, and shows the scheduler's gauges; it needs the key like /v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_tokens_and_times() -> TestResult {
    let s = Server::start(&["--api-key", "sesame"])?;
    let authed = |path: &str| {
        client()
            .post(s.url(path))
            .header("authorization", "Bearer sesame")
    };
    for _ in 0..2 {
        let r = authed("/v1/chat/completions")
            .json(&hello(4))
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), 200);
    }
    let r = authed("/v1/chat/completions")
        .json(&json!({"messages": []}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 400);
    let r = authed("/v1/completions")
        .json(&json!({"prompt": "Hi", "max_tokens": 3}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 200);
    let r = client().get(s.url("/metrics")).send().await?;
    assert_eq!(r.status().as_u16(), 401);
    let r = client()
        .get(s.url("/metrics"))
        .header("authorization", "Bearer sesame")
        .send()
        .await?;
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let page = r.text().await?;
    let chat = r#"hearth_requests_total{route="/v1/chat/completions",status="#;
    assert_eq!(
        sample(&page, &format!("{chat}\"200\"}}")),
        Some(2.0),
        "{page}"
    );
    assert_eq!(sample(&page, &format!("{chat}\"400\"}}")), Some(1.0));
    assert_eq!(
        sample(
            &page,
            r#"hearth_requests_total{route="/metrics",status="401"}"#
        ),
        Some(1.0)
    );
    let generated = sample(&page, "hearth_generated_tokens_total").unwrap_or(0.0);
    assert!((3.0..=11.0).contains(&generated), "{page}");
    assert!(sample(&page, "hearth_prompt_tokens_total").unwrap_or(0.0) > 10.0);
    let drafted = sample(&page, "hearth_draft_tokens_total");
    let accepted = sample(&page, "hearth_accepted_draft_tokens_total");
    assert!(
        drafted.is_some() && accepted.is_some() && accepted <= drafted,
        "{page}"
    );
    assert_eq!(
        sample(&page, "hearth_time_to_first_token_seconds_count"),
        Some(3.0)
    );
    assert!(sample(&page, "hearth_kv_cache_budget_bytes").unwrap_or(0.0) > 0.0);
    assert_eq!(sample(&page, "hearth_running_sequences"), Some(0.0));
    Ok(())
}

/// `/` is the chat page: HTML that needs no key, confined by its content security policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_page_is_served_without_a_key_and_confined() -> TestResult {
    let s = Server::start(&["--api-key", "sesame"])?;
    let r = client().get(s.url("/")).send().await?;
    assert_eq!(r.status().as_u16(), 200);
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert!(header("content-type").starts_with("text/html"));
    let csp = header("content-security-policy");
    assert!(
        csp.contains("connect-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let page = r.text().await?;
    assert!(page.contains("/v1/chat/completions") && page.contains("textContent"));
    // The model's words are never parsed as HTML.
    assert!(!page.contains("innerHTML"));
    Ok(())
}

/// The server's MCP calls tell the MCP server whom the request is for: OpenAI's `user` (or
/// `safety_identifier`) as `hearth/user` in the call's `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_carry_the_requests_user() -> TestResult {
    let fault = format!(
        "python3 {}/tests/mcp_fault_server.py whoami",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = Server::start(&["--mcp", &fault])?;
    let mut body = hello(48);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "whoami"}});
    body["user"] = json!("ana");
    let (status, v) = post(&s, "/v1/chat/completions", body).await?;
    assert_eq!(status, 200, "{v}");
    let ran = &v["choices"][0]["message"]["mcp_calls"][0];
    assert_eq!(ran["name"], json!("whoami"), "{v}");
    let meta: Value = serde_json::from_str(ran["result"].as_str().unwrap_or_default())?;
    assert_eq!(meta["hearth/user"], json!("ana"), "{v}");
    Ok(())
}

/// With `--mcp`, the server's MCP tools are offered beside the client's; a turn whose calls
/// are all to them is run by the server, which asks the model again: the client gets the
/// answer, with `mcp_calls` saying what ran (even a call the server's tool failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_are_run_by_the_server_and_the_answer_goes_on() -> TestResult {
    // Two tools: the tiny model's context is 512 tokens.
    let fault = format!(
        "python3 {}/tests/mcp_fault_server.py clock fail",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = Server::start(&["--mcp", &fault])?;
    let mut body = hello(48);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "clock"}});
    let (status, v) = post(&s, "/v1/chat/completions", body.clone()).await?;
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    let ran = &message["mcp_calls"][0];
    assert_eq!(ran["name"], json!("clock"), "{v}");
    assert_eq!(ran["server"], json!("mcp_fault_server"), "{v}");
    assert_eq!(ran["ok"], json!(true), "{v}");
    assert_eq!(ran["result"], json!("12:00"), "{v}");
    // The calls the server ran are not the client's to run.
    assert!(message["tool_calls"].is_null(), "{v}");
    // Generated over both turns: the call, then the answer.
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 6,
        "{v}"
    );

    // Streamed: the same, as an `mcp_calls` delta.
    body["stream"] = json!(true);
    let chunks = sse(&s, body).await?;
    let ran: Vec<Value> = chunks
        .iter()
        .filter_map(|c| serde_json::from_str::<Value>(c).ok())
        .filter_map(|c| c["choices"][0]["delta"]["mcp_calls"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(ran.len(), 1, "{chunks:?}");
    assert_eq!(ran[0]["name"], json!("clock"));
    assert!(
        !chunks.iter().any(|c| c.contains("\"tool_calls\"")),
        "{chunks:?}"
    );

    // Through the Responses API: OpenAI's own `mcp_call` items, then the answer.
    let body = json!({"model": "tiny", "input": "Hello there", "max_output_tokens": 48,
        "temperature": 0, "tool_choice": {"type": "function", "name": "clock"}});
    let (status, v) = post(&s, "/v1/responses", body).await?;
    assert_eq!(status, 200, "{v}");
    let item = &v["output"][0];
    assert_eq!(item["type"], json!("mcp_call"), "{v}");
    assert_eq!(
        (&item["name"], &item["output"], &item["server_label"]),
        (&json!("clock"), &json!("12:00"), &json!("mcp_fault_server")),
        "{v}"
    );

    // count_tokens counts the prompt with the server's tools, as the answer has it.
    let body = json!({"model": "tiny", "max_tokens": 1, "temperature": 0,
        "tool_choice": {"type": "none"}, "messages": [{"role": "user", "content": "Hello there"}]});
    let (_, none) = post(&s, "/v1/messages/count_tokens", body.clone()).await?;
    let mut with_tools = body;
    with_tools["tool_choice"] = json!({"type": "auto"});
    let (_, counted) = post(&s, "/v1/messages/count_tokens", with_tools.clone()).await?;
    let (status, answered) = post(&s, "/v1/messages", with_tools).await?;
    assert_eq!(status, 200, "{answered}");
    let usage = &answered["usage"];
    let read = |k: &str| usage[k].as_u64().unwrap_or(0);
    assert_eq!(
        counted["input_tokens"].as_u64(),
        Some(read("input_tokens") + read("cache_read_input_tokens")),
        "{counted} {answered}"
    );
    assert!(counted["input_tokens"].as_u64() > none["input_tokens"].as_u64());

    // A tool that fails: its error goes back to the model, and the answer still comes.
    let mut body = hello(48);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "fail"}});
    let (status, v) = post(&s, "/v1/chat/completions", body).await?;
    assert_eq!(status, 200, "{v}");
    let ran = &v["choices"][0]["message"]["mcp_calls"][0];
    assert_eq!(
        (&ran["name"], &ran["ok"]),
        (&json!("fail"), &json!(false)),
        "{v}"
    );
    assert!(ran["result"].as_str().unwrap_or_default().contains("boom"));
    Ok(())
}
