//! The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M through the scheduler: eight different prompts
//! at once give each the greedy tokens it gives alone. (Its own test binary: other real-model
//! tests change the process-wide kernel level.)

mod common;

use hearth_engine::{
    DeviceSpec, Engine, Event, EventStream, GenerateRequest, LoadOptions, SchedulerOptions,
};

fn tokens(mut s: EventStream) -> Vec<u32> {
    let mut ids = vec![];
    loop {
        match s.blocking_next() {
            Some(Event::Token { id }) => ids.push(id),
            Some(Event::Finished(_)) => return ids,
            Some(Event::Error { message }) => panic!("{message}"),
            Some(_) => {}
            None => panic!("stream ended without a summary"),
        }
    }
}

#[test]
fn eight_concurrent_requests_give_their_greedy_tokens_alone() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        scheduler: SchedulerOptions {
            max_seqs: Some(8),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Engine::load(path.to_str().unwrap(), &opts).unwrap();
    let prompts = [
        "def fibonacci(n):",
        "The capital of France is",
        "// A function in C that reverses a linked list\nstruct node *reverse(struct node *head) {",
        "SELECT name, COUNT(*) FROM orders",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
        "import numpy as np\n\ndef softmax(x):",
        "Q: What is 17 times 23?\nA:",
        "<html>\n<head>\n<title>",
    ];
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| e.tokenizer().encode(p).unwrap())
        .collect();
    let request = |prompt: &Vec<u32>, session: Option<String>| GenerateRequest {
        stop_token_ids: Some(vec![]),
        session,
        ..GenerateRequest::new(prompt.clone(), 32)
    };
    // Alone, one after another; each cache is then forgotten so the batch shares nothing.
    let alone: Vec<Vec<u32>> = ids
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let session = format!("alone-{i}");
            let t = tokens(e.generate(request(p, Some(session.clone()))).unwrap());
            e.drop_session(&session).unwrap();
            t
        })
        .collect();
    let streams: Vec<EventStream> = ids
        .iter()
        .map(|p| e.generate(request(p, None)).unwrap())
        .collect();
    let together: Vec<Vec<u32>> = streams.into_iter().map(tokens).collect();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), 32);
        assert_eq!(a, t, "prompt {i} ({:?}): alone vs 8 at once", prompts[i]);
    }
}
