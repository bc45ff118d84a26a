//! Tools from MCP servers through Hearth's client: the real servers the registries ship
//! (mcp-server-time and mcp-server-git from PyPI; the filesystem, memory and everything
//! servers from npm) answer calls made through the tool registry, and a server of our own
//! that fails, hangs, crashes, changes its tools and lists a bad schema never stops the agent.

mod common;

use hearth_agent::mcp::{Approval, McpOptions, McpServer, McpTools};
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::{ScriptedLlm, StopReason, ToolAgent, ToolCall, ToolRegistry};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn connect(command: &str, options: McpOptions) -> Result<Arc<McpTools>, String> {
    let server = McpServer::from_arg(command)?;
    Ok(Arc::new(McpTools::connect(&server, options).await?))
}

fn fault_server() -> String {
    format!(
        "python3 {}/tests/mcp_fault_server.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

async fn call(registry: &ToolRegistry, name: &str, args: Value) -> (bool, String) {
    let r = registry.execute(&ToolCall::new(name, args)).await;
    (r.ok(), r.content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_servers_offer_their_tools_and_answer_calls() -> TestResult {
    let Some(dir) = common::mcp_servers() else {
        return Ok(());
    };
    let work = tempfile::tempdir()?;
    let repo = work.path().join("repo");
    std::fs::create_dir(&repo)?;
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&repo)
            .output()
    };
    git(&["init", "-q"])?;
    std::fs::write(repo.join("a.txt"), "one\n")?;
    git(&["add", "a.txt"])?;
    git(&["commit", "-q", "-m", "first"])?;
    std::fs::write(repo.join("a.txt"), "two\n")?;
    let files = work.path().join("files");
    std::fs::create_dir(&files)?;
    let bin = |p: &str| dir.join(p).display().to_string();
    let mut registry = ToolRegistry::new();
    let options = McpOptions::default();
    let servers = [
        format!("{} --local-timezone UTC", bin("venv/bin/mcp-server-time")),
        format!(
            "{} --repository '{}'",
            bin("venv/bin/mcp-server-git"),
            repo.display()
        ),
        format!(
            "{} '{}'",
            bin("node_modules/.bin/mcp-server-filesystem"),
            files.display()
        ),
        bin("node_modules/.bin/mcp-server-memory"),
        bin("node_modules/.bin/mcp-server-everything"),
    ];
    let mut sources = vec![];
    for s in &servers {
        let tools = connect(s, options.clone()).await?;
        registry.add_source(tools.clone());
        sources.push(tools);
    }
    let tools = registry.resolved();
    let names = tools.names();
    for wanted in [
        "get_current_time",
        "git_status",
        "git_diff_unstaged",
        "write_file",
        "read_text_file",
        "create_entities",
        "read_graph",
        "echo",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} not in {names:?}"
        );
    }
    // Each tool's schema reaches the model as given.
    let spec = tools
        .specs()
        .into_iter()
        .find(|s| s["function"]["name"] == "get_current_time")
        .ok_or("no spec")?;
    assert_eq!(
        spec["function"]["parameters"]["required"],
        json!(["timezone"])
    );

    let (ok, text) = call(
        &tools,
        "get_current_time",
        json!({"timezone": "Asia/Tokyo"}),
    )
    .await;
    assert!(
        ok && text.contains("Asia/Tokyo") && text.contains("datetime"),
        "{text}"
    );
    let (ok, text) = call(
        &tools,
        "git_diff_unstaged",
        json!({"repo_path": repo.display().to_string()}),
    )
    .await;
    assert!(
        ok && text.contains("-one") && text.contains("+two"),
        "{text}"
    );
    let note = files.join("note.txt").display().to_string();
    let (ok, text) = call(
        &tools,
        "write_file",
        json!({"path": note, "content": "from hearth"}),
    )
    .await;
    assert!(ok, "{text}");
    assert_eq!(std::fs::read_to_string(&note)?, "from hearth");
    let (ok, text) = call(&tools, "read_text_file", json!({"path": note})).await;
    assert!(ok && text.contains("from hearth"), "{text}");
    // Outside the allowed directory: the server's error, as the tool's result.
    let (ok, text) = call(&tools, "read_text_file", json!({"path": "/etc/hostname"})).await;
    assert!(!ok && text.contains("MCP server"), "{text}");
    let (ok, text) = call(
        &tools,
        "create_entities",
        json!({"entities": [{"name": "Hearth", "entityType": "program", "observations": ["runs Qwen"]}]}),
    )
    .await;
    assert!(ok, "{text}");
    let (ok, text) = call(&tools, "read_graph", json!({})).await;
    assert!(ok && text.contains("runs Qwen"), "{text}");
    let (ok, text) = call(&tools, "echo", json!({"message": "hello mcp"})).await;
    assert!(ok && text.contains("hello mcp"), "{text}");
    // Arguments the schema refuses never reach the server.
    let (ok, text) = call(&tools, "get_current_time", json!({"zone": 3})).await;
    assert!(!ok && text.contains("timezone"), "{text}");
    drop(tools);
    drop(registry);
    for s in sources {
        if let Ok(s) = Arc::try_unwrap(s) {
            s.close().await;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_server_gives_tool_errors_and_the_agent_goes_on() -> TestResult {
    let options = McpOptions {
        call_timeout: Duration::from_secs(1),
        ..McpOptions::default()
    };
    let fault = connect(&fault_server(), options.clone()).await?;
    let mut registry = ToolRegistry::new();
    registry.add_source(fault.clone());
    // A second server with the same tools: its names are prefixed by its own.
    let mut twin = McpServer::from_arg(&fault_server())?;
    twin.name = "twin".into();
    registry.add_source(Arc::new(McpTools::connect(&twin, options).await?));
    let tools = registry.resolved();
    let names = tools.names();
    assert!(names.contains(&"echo".to_string()) && names.contains(&"twin_echo".to_string()));
    // The tool whose schema describes no object is left out.
    assert!(!names.iter().any(|n| n.contains("bad_schema")), "{names:?}");

    assert_eq!(
        call(&tools, "twin_echo", json!({"text": "hi"})).await,
        (true, "hi".into())
    );
    let (ok, text) = call(&tools, "fail", json!({})).await;
    assert!(!ok && text.contains("boom"), "{text}");
    let start = Instant::now();
    let (ok, text) = call(&tools, "hang", json!({})).await;
    assert!(!ok && text.contains("no answer"), "{text}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // The list changes: the next run sees the new tool.
    assert!(call(&tools, "grow", json!({})).await.0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !registry.resolved().names().contains(&"late".to_string()) {
        assert!(
            Instant::now() < deadline,
            "tools/list_changed was not honoured"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        call(&registry.resolved(), "late", json!({})).await,
        (true, "late answer".into())
    );

    // An agent whose tool's server dies mid-call reads the error and answers.
    let script = [
        r#"{"name": "crash", "arguments": {}}"#,
        r#"{"name": "echo", "arguments": {"text": "after"}}"#,
        "The server is gone; I answer without it.",
    ];
    let agent = ToolAgent::new(Arc::new(ScriptedLlm::new(script)), registry.clone());
    let run = agent
        .run("Use the tools.", "s", RunOptions::default(), None)
        .await?;
    assert_eq!(run.stop_reason, StopReason::Answer);
    assert_eq!(run.answer, "The server is gone; I answer without it.");
    assert_eq!(run.tool_calls.len(), 2);
    assert!(
        run.tool_calls.iter().all(|r| !r.ok()),
        "{:?}",
        run.tool_calls
    );
    // The twin still answers.
    assert!(
        call(&registry.resolved(), "twin_echo", json!({"text": "x"}))
            .await
            .0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_wait_for_approval_or_are_denied() -> TestResult {
    let asked = Arc::new(std::sync::Mutex::new(vec![]));
    let log = asked.clone();
    let ask = Approval::Ask(Arc::new(move |name: &str, args: &Value| {
        if let Ok(mut l) = log.lock() {
            l.push(format!("{name} {args}"));
        }
        args["text"] != "no"
    }));
    let options = |approval| McpOptions {
        approval,
        ..McpOptions::default()
    };
    let mut registry = ToolRegistry::new();
    registry.add_source(connect(&fault_server(), options(ask)).await?);
    let tools = registry.resolved();
    assert_eq!(
        call(&tools, "echo", json!({"text": "yes"})).await,
        (true, "yes".into())
    );
    let (ok, text) = call(&tools, "echo", json!({"text": "no"})).await;
    assert!(!ok && text.contains("declined"), "{text}");
    assert_eq!(asked.lock().map(|l| l.len()).unwrap_or(0), 2);

    let mut registry = ToolRegistry::new();
    registry.add_source(connect(&fault_server(), options(Approval::Deny)).await?);
    let (ok, text) = call(&registry.resolved(), "echo", json!({"text": "yes"})).await;
    assert!(!ok && text.contains("not allowed"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_named_in_the_error() -> TestResult {
    let e = connect("/no/such/mcp-server --flag", McpOptions::default())
        .await
        .err()
        .unwrap_or_default();
    assert!(
        e.contains("mcp-server") && e.contains("cannot start"),
        "{e}"
    );
    // A program that is no MCP server: it exits, and initialize fails within the timeout.
    let options = McpOptions {
        connect_timeout: Duration::from_secs(5),
        ..McpOptions::default()
    };
    // https: TLS is there (a refused connection is an error, not a panic for a missing
    // crypto provider).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let e = connect(&format!("https://127.0.0.1:{port}/mcp"), options.clone())
        .await
        .err()
        .unwrap_or_default();
    assert!(e.contains("MCP server 127_0_0_1"), "{e}");
    let start = Instant::now();
    let e = connect("true", options).await.err().unwrap_or_default();
    assert!(
        e.contains("MCP server true") && e.contains("initialize"),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!Path::new("/no/such/mcp-server").exists());
    Ok(())
}

/// The everything server over streamable HTTP: reached by URL, its tools answer as over stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_reached_over_streamable_http() -> TestResult {
    let Some(dir) = common::mcp_servers() else {
        return Ok(());
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut server =
        tokio::process::Command::new(dir.join("node_modules/.bin/mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
    let stderr = server.stderr.take().ok_or("no stderr")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(listening, Ok(true), "the everything server did not start");
    let tools = connect(
        &format!("http://127.0.0.1:{port}/mcp"),
        McpOptions::default(),
    )
    .await?;
    let mut registry = ToolRegistry::new();
    registry.add_source(tools);
    let (ok, text) = call(
        &registry.resolved(),
        "echo",
        json!({"message": "over http"}),
    )
    .await;
    assert!(ok && text.contains("over http"), "{text}");
    server.kill().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_learns_whom_a_call_is_for_in_its_meta() -> TestResult {
    let tools = connect(&format!("{} whoami", fault_server()), McpOptions::default()).await?;
    let mut registry = ToolRegistry::new();
    registry.add_source(tools);
    let registry = registry.resolved();
    let context = hearth_agent::tool_context::ToolContext {
        session: "s1".into(),
        user: Some("ana".into()),
        tenant: Some("acme".into()),
        ..Default::default()
    };
    let r = registry
        .execute_in(&ToolCall::new("whoami", json!({})), &context)
        .await;
    assert!(r.ok(), "{}", r.content);
    // The client's own keys (rmcp's `progressToken`) aside.
    let ours = |text: &str| -> Result<Value, serde_json::Error> {
        let meta: serde_json::Map<String, Value> = serde_json::from_str(text)?;
        Ok(meta
            .into_iter()
            .filter(|(k, _)| k.starts_with("hearth/"))
            .collect())
    };
    assert_eq!(
        ours(&r.content)?,
        json!({"hearth/session": "s1", "hearth/tenant": "acme", "hearth/user": "ana"})
    );
    // Without a context, nothing is said.
    let (ok, text) = call(&registry, "whoami", json!({})).await;
    assert!(ok);
    assert_eq!(ours(&text)?, json!({}));
    Ok(())
}
