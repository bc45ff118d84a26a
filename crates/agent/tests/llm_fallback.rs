//! `FallbackLlm` against a loopback server of OpenAI's API that fails, hangs and recovers:
//! the next backend answers, the answer names it, a failed backend is skipped for its
//! back-off and asked again after it, and when every backend fails the error names each.

use hearth_agent::llm::{complete, Backend, FallbackLlm, LlmRequest, OpenAiLlm, ScriptedLlm};
use hearth_agent::ChatMessage;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const FAIL: u8 = 0;
const HANG: u8 = 1;
const ANSWER: u8 = 2;

/// A server that, by `mode`, answers 500, never answers, or streams "from the server";
/// `asked` counts its requests.
async fn server(mode: Arc<AtomicU8>, asked: Arc<AtomicUsize>) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (mode, asked) = (mode.clone(), asked.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                let _ = sock.read(&mut buf).await;
                asked.fetch_add(1, Ordering::SeqCst);
                let reply: &[u8] = match mode.load(Ordering::SeqCst) {
                    FAIL => b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nboom",
                    HANG => {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    }
                    _ => b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                           data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"from the server\"}}]}\n\n\
                           data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                           data: [DONE]\n\n",
                };
                let _ = sock.write_all(reply).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Ok(format!("http://{addr}/v1"))
}

fn ask() -> LlmRequest {
    LlmRequest {
        messages: vec![ChatMessage::user("hi")],
        ..Default::default()
    }
}

#[tokio::test]
async fn the_next_backend_answers_while_one_fails_hangs_or_recovers() -> TestResult {
    let (mode, asked) = (Arc::new(AtomicU8::new(FAIL)), Arc::new(AtomicUsize::new(0)));
    let url = server(mode.clone(), asked.clone()).await?;
    let remote = Backend::new(Arc::new(OpenAiLlm::new(&url, "m")?))
        .named("remote")
        .with_timeout(Duration::from_millis(400))
        .with_retries(1);
    let local =
        Backend::new(Arc::new(ScriptedLlm::new(vec!["from the script"; 4]))).named("script");
    let llm = FallbackLlm::new(vec![remote, local])?.with_backoff(Duration::from_millis(600));

    // The server fails (twice: one retry): the script answers, and says so.
    let out = complete(&llm, ask()).await?;
    assert_eq!(
        (out.text.as_str(), out.model.as_deref()),
        ("from the script", Some("script"))
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one try and one retry");
    // Within its back-off the server is not asked.
    mode.store(ANSWER, Ordering::SeqCst);
    let out = complete(&llm, ask()).await?;
    assert_eq!(out.model.as_deref(), Some("script"));
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // After it, the server answers again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let out = complete(&llm, ask()).await?;
    assert_eq!(
        (out.text.as_str(), out.model.as_deref()),
        ("from the server", Some("remote"))
    );
    // It hangs: after its timeout (per try) the script answers.
    mode.store(HANG, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let out = complete(&llm, ask()).await?;
    assert_eq!(out.model.as_deref(), Some("script"));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(5),
        "{took:?}"
    );

    // Every backend failing: one error naming each.
    let dead = Backend::new(Arc::new(ScriptedLlm::new(Vec::<String>::new()))).named("empty");
    let remote = Backend::new(Arc::new(OpenAiLlm::new(&url, "m")?))
        .named("remote")
        .with_timeout(Duration::from_millis(200));
    let err = complete(&FallbackLlm::new(vec![remote, dead])?, ask())
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("every backend failed") && err.contains("remote") && err.contains("empty"),
        "{err}"
    );
    assert!(FallbackLlm::new(vec![]).is_err());
    Ok(())
}
