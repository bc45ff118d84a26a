//! The tool loop over a scripted model: results fed back, loops cut, limits, choices, errors.

use hearth_agent::run::tool_agent::{Knowledge, RunOptions};
use hearth_agent::tools::{registry, Calculator};
use hearth_agent::{
    ActionStatusCode, Agent, ScriptedLlm, StopReason, Tool, ToolAgent, ToolAgentEvent, ToolChoice,
};
use std::sync::Arc;

fn calc_call(expr: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"calculator\", \"arguments\": {{\"expression\": \"{expr}\"}}}}\n</tool_call>")
}

fn agent(script: Vec<String>) -> (ToolAgent, ScriptedLlm) {
    let llm = ScriptedLlm::new(script);
    let tools = registry(&["calculator".into(), "time".into()], None).unwrap();
    (ToolAgent::new(Arc::new(llm.clone()), tools), llm)
}

#[tokio::test]
async fn results_go_back_and_the_answer_comes_out() {
    let bare =
        "{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1234 * 5678\"}}".to_string();
    let (a, llm) = agent(vec![bare, "1234 * 5678 = 7006652.".into()]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = a
        .run(
            "What is 1234 * 5678?",
            "s",
            RunOptions::default(),
            Some(&tx),
        )
        .await
        .unwrap();
    assert_eq!(run.stop_reason, StopReason::Answer);
    assert_eq!(run.answer, "1234 * 5678 = 7006652.");
    assert_eq!(run.iterations, 2);
    assert_eq!(run.tool_calls.len(), 1);
    assert_eq!(run.tool_calls[0].content, "7006652");
    // The second request carries the call and its result in the tool role.
    let second = &llm.requests()[1];
    let roles: Vec<&str> = second.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(second.messages[3].text(), "7006652");
    assert!(!second.tools.is_empty());
    // Events: the raw JSON call was never shown as text.
    drop(tx);
    let mut kinds = vec![];
    let mut shown = String::new();
    while let Some(e) = rx.recv().await {
        match &e {
            ToolAgentEvent::TextDelta { text } => shown.push_str(text),
            ToolAgentEvent::ToolCallsStart { .. } => kinds.push("start"),
            ToolAgentEvent::ToolResult { .. } => kinds.push("result"),
            ToolAgentEvent::ToolCallsComplete => kinds.push("complete"),
            ToolAgentEvent::Done { .. } => kinds.push("done"),
            ToolAgentEvent::Reasoning { .. } => {}
        }
    }
    assert_eq!(kinds, ["start", "result", "complete", "done"]);
    assert_eq!(shown, "1234 * 5678 = 7006652.");
    // The exchange is remembered for the session.
    assert_eq!(a.llm_agent.memory.get("s").len(), 2);
}

#[tokio::test]
async fn an_answer_that_repeats_its_call_ends_at_the_repeat() {
    // As a small model writes under `tool_choice: required`: the call again and again, the
    // last one cut by the token limit. Read up to the repeat, it is one call, not a parse error.
    let call = calc_call("1234 * 5678");
    let repeating = format!("{call}\n{call}\n<tool_call>\n{{\"name\": \"calcu");
    let (a, llm) = agent(vec![repeating, "7006652.".into()]);
    let run = a
        .run("What is 1234 * 5678?", "s", RunOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(run.tool_calls.len(), 1);
    assert_eq!(run.stop_reason, StopReason::Answer);
    assert_eq!(llm.requests().len(), 2, "no correction turn");
    let turn = &llm.requests()[1].messages[2];
    assert_eq!(turn.tool_calls.len(), 1, "{turn:?}");
}

#[tokio::test]
async fn an_identical_call_is_not_run_again() {
    let (a, llm) = agent(vec![
        calc_call("1234 * 5678"),
        format!("{}\n{}", calc_call("7006652"), calc_call("7006652")),
        calc_call("7006652"),
        "The answer is 7006652.".into(),
    ]);
    let run = a
        .run("What is 1234 * 5678?", "s", RunOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(run.tool_calls.len(), 2, "each distinct call ran once");
    assert_eq!(run.answer, "The answer is 7006652.");
    assert_eq!(run.stop_reason, StopReason::Answer);
    let last = llm.requests().last().unwrap().clone();
    assert!(
        last.tools.is_empty(),
        "tools are withheld for the final answer"
    );
}

#[tokio::test]
async fn max_iterations_is_its_own_outcome() {
    let (mut a, _) = agent((0..5).map(|i| calc_call(&format!("{i} + 1"))).collect());
    a.max_iterations = 3;
    let run = a
        .run("count", "s", RunOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(
        (run.stop_reason, run.iterations, run.tool_calls.len()),
        (StopReason::MaxIterations, 3, 3)
    );
}

#[tokio::test]
async fn parallel_calls_unknown_tools_and_bad_arguments() {
    let both = format!(
        "{}\n{}\n<tool_call>\n{{\"name\": \"teleport\", \"arguments\": {{}}}}\n</tool_call>\n<tool_call>\n{{\"name\": \"calculator\", \"arguments\": {{\"expression\": 5}}}}\n</tool_call>",
        calc_call("2+2"),
        calc_call("3*3")
    );
    let (a, _) = agent(vec![both, "4 and 9".into()]);
    let run = a
        .run("2+2 and 3*3", "s", RunOptions::default(), None)
        .await
        .unwrap();
    let status: Vec<ActionStatusCode> = run.tool_calls.iter().map(|r| r.status).collect();
    assert_eq!(
        status,
        [
            ActionStatusCode::Success,
            ActionStatusCode::Success,
            ActionStatusCode::ApiError,
            ActionStatusCode::ArgsError
        ]
    );
    assert_eq!(run.tool_calls[0].content, "4");
    assert!(run.tool_calls[2]
        .content
        .contains("unknown tool `teleport`"));
    assert_eq!(run.answer, "4 and 9");
}

#[tokio::test]
async fn malformed_tool_json_is_fed_back() {
    let (a, llm) = agent(vec![
        "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": }\n</tool_call>"
            .into(),
        "Sorry: 4.".into(),
    ]);
    let run = a
        .run("2+2?", "s", RunOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(run.answer, "Sorry: 4.");
    assert!(run.tool_calls.is_empty());
    let second = &llm.requests()[1];
    assert!(second
        .messages
        .last()
        .unwrap()
        .text()
        .contains("could not be read"));
}

#[tokio::test]
async fn tool_choice_and_tools_for_one_call() {
    let (a, llm) = agent(vec![
        "plain".into(),
        "plain".into(),
        "plain".into(),
        calc_call("1+1"),
        "2".into(),
    ]);
    a.run(
        "hi",
        "s",
        RunOptions {
            tool_choice: ToolChoice::None,
            ..Default::default()
        },
        None,
    )
    .await
    .unwrap();
    assert!(llm.requests()[0].tools.is_empty());
    let extra: Arc<dyn Tool> = Arc::new(Calculator);
    let opts = RunOptions {
        tool_choice: ToolChoice::Named("current_time".into()),
        extra_tools: vec![extra],
        ..Default::default()
    };
    a.run("time?", "s", opts, None).await.unwrap();
    let names: Vec<String> = llm.requests()[1]
        .tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["current_time"]);
    // Required: a plain answer is asked again once.
    let run = a
        .run(
            "1+1",
            "s",
            RunOptions {
                tool_choice: ToolChoice::Required,
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!((run.answer.as_str(), run.tool_calls.len()), ("2", 1));
}

#[tokio::test]
async fn empty_message_is_refused() {
    let (a, _) = agent(vec![]);
    let err = a
        .run("   ", "s", RunOptions::default(), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("empty message"), "{err}");
}

#[tokio::test]
async fn model_failure_is_an_error_outcome() {
    let (a, _) = agent(vec![calc_call("1+1")]); // the script runs out after the call
    let run = a
        .run("1+1", "s", RunOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(run.stop_reason, StopReason::Error);
    assert!(run.error.unwrap().contains("no more answers"));
}

struct Facts;
impl Knowledge for Facts {
    fn retrieve(&self, _q: &str, _k: usize) -> Vec<String> {
        vec!["Hearth runs offline.".into()]
    }
}

#[tokio::test]
async fn old_turns_are_summarised_and_knowledge_is_added() {
    let (mut a, llm) = agent(vec![
        "a1".into(),
        "a2".into(),
        "SUMMARY".into(),
        "a3".into(),
    ]);
    a.history_window = 2;
    a.knowledge = Some(Arc::new(Facts));
    a.run("q1", "s", RunOptions::default(), None).await.unwrap();
    a.run("q2", "s", RunOptions::default(), None).await.unwrap();
    let run = a.run("q3", "s", RunOptions::default(), None).await.unwrap();
    assert_eq!(run.answer, "a3");
    let reqs = llm.requests();
    assert!(
        reqs[2].messages[1].text().contains("user: q1"),
        "the summary request holds the old turns"
    );
    let texts: Vec<&str> = reqs[3].messages.iter().map(|m| m.text()).collect();
    assert!(texts[1].contains("SUMMARY"));
    assert_eq!(&texts[2..4], ["q2", "a2"]);
    assert!(texts.iter().any(|t| t.contains("Hearth runs offline.")));
    // As an Agent: forward runs the loop on the last message.
    let (b, _) = agent(vec!["hello".into()]);
    let out = b.forward(&["hi".into()], "t").await.unwrap();
    assert_eq!(out.text(), "hello");
}

#[tokio::test]
async fn calls_to_unknown_tools_in_bare_json_are_corrected() {
    let (a, llm) = agent(vec![
        "{\"name\": \"square_root\", \"arguments\": {\"x\": 1764}}".into(),
        calc_call("sqrt(1764)"),
        "{\"name\": \"calculator\", \"arguments\": {\"expression\": \"sqrt(1764)\"}}".into(),
        "{\"name\": \"calculator\", \"arguments\": {\"expression\": \"42\"}}".into(),
        "The square root of 1764 is 42.".into(),
    ]);
    let run = a
        .run(
            "What is the square root of 1764?",
            "s",
            RunOptions::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(run.answer, "The square root of 1764 is 42.");
    assert_eq!(run.tool_calls.len(), 1);
    let reqs = llm.requests();
    assert!(reqs[1]
        .messages
        .last()
        .unwrap()
        .text()
        .contains("no tool named `square_root`"));
    // The repeated call withheld the tools; JSON written anyway is corrected once more.
    assert!(reqs[3].tools.is_empty());
    assert!(reqs[4]
        .messages
        .last()
        .unwrap()
        .text()
        .contains("plain words"));
}

/// An event bus: two subscribers each get the run's every event in order; one that goes away
/// holds no one up and is forgotten.
#[tokio::test]
async fn an_event_bus_gives_every_subscriber_the_run() {
    use hearth_agent::EventBus;
    let (a, _) = agent(vec![calc_call("6 * 7"), "6 * 7 = 42.".into()]);
    let bus = EventBus::new();
    let (mut first, mut second, gone) = (bus.subscribe(), bus.subscribe(), bus.subscribe());
    drop(gone);
    let tx = bus.sender();
    let run = a
        .run("What is 6 * 7?", "s", RunOptions::default(), Some(&tx))
        .await
        .unwrap();
    assert_eq!(run.answer, "6 * 7 = 42.");
    drop(tx);
    let kinds = |e: &ToolAgentEvent| match e {
        ToolAgentEvent::TextDelta { .. } => "text",
        ToolAgentEvent::Reasoning { .. } => "reasoning",
        ToolAgentEvent::ToolCallsStart { .. } => "start",
        ToolAgentEvent::ToolResult { .. } => "result",
        ToolAgentEvent::ToolCallsComplete => "complete",
        ToolAgentEvent::Done { .. } => "done",
    };
    let mut seen = [vec![], vec![]];
    for (rx, seen) in [&mut first, &mut second].into_iter().zip(&mut seen) {
        while let Some(e) = rx.recv().await {
            let done = matches!(e, ToolAgentEvent::Done { .. });
            seen.push(kinds(&e));
            if done {
                break;
            }
        }
    }
    assert_eq!(seen[0], seen[1]);
    seen[0].dedup(); // the answer's text comes in several deltas
    assert_eq!(seen[0], ["start", "result", "complete", "text", "done"]);
    assert_eq!(bus.subscribers(), 2, "the one gone is forgotten");
}

/// A tool that reads its caller: who it runs for (session, agent, user, tenant), and one that
/// waits until it is stopped.
struct Whoami;

#[async_trait::async_trait]
impl Tool for Whoami {
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Who the call is for; waits for `wait` seconds first."
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"wait": {"type": "number"}}})
    }
    async fn call(&self, args: serde_json::Value) -> Result<String, String> {
        self.call_in(args, &Default::default()).await
    }
    async fn call_in(
        &self,
        args: serde_json::Value,
        c: &hearth_agent::ToolContext,
    ) -> Result<String, String> {
        let wait = args["wait"].as_f64().unwrap_or(0.0);
        tokio::time::sleep(std::time::Duration::from_secs_f64(wait)).await;
        Ok(format!(
            "{} {} {} {}",
            c.session,
            c.agent,
            c.user.as_deref().unwrap_or("-"),
            c.tenant.as_deref().unwrap_or("-")
        ))
    }
}

/// The run passes its tools the caller's context (and the action hooks see it); the context's
/// deadline ends a call before the registry's timeout, and its cancellation ends one at once.
#[tokio::test]
async fn tools_and_hooks_see_who_the_call_is_for() {
    use hearth_agent::tool::ToolRegistry;
    use hearth_agent::{Hook, ToolCall, ToolContext};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    struct Seen(Mutex<Vec<String>>);
    impl Hook for Seen {
        fn before_action_in(&self, call: ToolCall, c: &ToolContext) -> ToolCall {
            self.0
                .lock()
                .unwrap()
                .push(format!("{}@{:?}", call.function.name, c.tenant));
            call
        }
    }
    let call = |wait: f64| {
        format!("<tool_call>\n{{\"name\": \"whoami\", \"arguments\": {{\"wait\": {wait}}}}}\n</tool_call>")
    };
    let llm = ScriptedLlm::new(vec![call(0.0), "done.".into()]);
    let mut tools = ToolRegistry::new();
    tools.add(Arc::new(Whoami));
    let a = ToolAgent::new(Arc::new(llm), tools);
    let seen = Arc::new(Seen(Mutex::new(vec![])));
    a.llm_agent.hooks.add(seen.clone());
    let options = RunOptions {
        context: ToolContext {
            user: Some("ada".into()),
            tenant: Some("acme".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = a.run("who?", "s1", options, None).await.unwrap();
    assert_eq!(run.tool_calls[0].content, "s1 assistant ada acme");
    assert_eq!(*seen.0.lock().unwrap(), ["whoami@Some(\"acme\")"]);

    // The registry's timeout is 30 s; the context's deadline, 200 ms.
    let mut reg = ToolRegistry::new();
    reg.add(Arc::new(Whoami));
    let slow = ToolCall::new("whoami", serde_json::json!({"wait": 5}));
    let context = ToolContext {
        deadline: Some(Instant::now() + Duration::from_millis(200)),
        ..Default::default()
    };
    let started = Instant::now();
    let r = reg.execute_in(&slow, &context).await;
    assert!(!r.ok() && r.content.contains("deadline"), "{}", r.content);
    assert!(started.elapsed() < Duration::from_secs(2));
    // Cancelled while it runs: it ends then; cancelled before: it does not run.
    let context = ToolContext::default();
    let cancel = context.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let r = reg.execute_in(&slow, &context).await;
    assert!(!r.ok() && r.content.contains("cancelled"), "{}", r.content);
    assert!(started.elapsed() < Duration::from_secs(2));
    let r = reg.execute_in(&slow, &context).await;
    assert!(r.content.contains("was not run"), "{}", r.content);
}

/// `Agent::call_in` through a pipeline and a list: the caller's context reaches the tools of
/// the tool agent inside them.
#[tokio::test]
async fn a_context_passes_through_pipelines_to_the_tools() {
    use hearth_agent::tool::ToolRegistry;
    use hearth_agent::{AgentList, AgentMessage, LlmAgent, Sequential, ToolContext};
    let tool_agent = |answers: Vec<String>| {
        let mut tools = ToolRegistry::new();
        tools.add(Arc::new(Whoami));
        let mut a = ToolAgent::new(Arc::new(ScriptedLlm::new(answers)), tools);
        a.llm_agent.name = "worker".into();
        a
    };
    let call = "<tool_call>\n{\"name\": \"whoami\", \"arguments\": {}}\n</tool_call>".to_string();
    let context = ToolContext {
        user: Some("ada".into()),
        tenant: Some("acme".into()),
        ..Default::default()
    };
    let pipe = Sequential {
        name: "pipe".into(),
        agents: vec![
            (
                "planner".into(),
                Box::new(LlmAgent::new(
                    "planner",
                    Arc::new(ScriptedLlm::new(["ask who"])),
                    None,
                )),
            ),
            (
                "worker".into(),
                Box::new(tool_agent(vec![call.clone(), "It is ada.".into()])),
            ),
        ],
        exit_at: None,
    };
    let out = pipe
        .call_in(vec![AgentMessage::user("who?")], "s1", &context)
        .await
        .unwrap();
    assert_eq!(out.text(), "It is ada.");
    let ran = |m: &AgentMessage| m.extra_info.as_ref().unwrap()["tool_calls"][0]["content"].clone();
    assert_eq!(ran(&out), "s1 worker ada acme");
    let list = AgentList {
        name: "list".into(),
        agents: vec![Box::new(tool_agent(vec![call, "ok".into()]))],
    };
    let out = list
        .call_in(vec![AgentMessage::user("who?")], "s2", &context)
        .await
        .unwrap();
    assert_eq!(ran(&out), "s2 worker ada acme");
}
