//! Speculative decoding on the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M: with prompt-lookup
//! drafts, or a draft model's, verified in one pass, every request gets the tokens plain
//! decoding gives it — greedy and sampled, alone and eight at once, at every CPU level — and a
//! code edit accepts most of its drafts.

mod common;

use common::{at_once, one_by_one, tokens_of};
use hearth_engine::kernels::{cpu, CpuLevel};
use hearth_engine::{
    DeviceSpec, Engine, GenerateRequest, LoadOptions, SamplingParams, SchedulerOptions, Speculation,
};

fn options(speculation: Speculation, level: CpuLevel) -> LoadOptions {
    LoadOptions {
        device: DeviceSpec::Cpu,
        cpu: Some(level),
        scheduler: SchedulerOptions {
            max_seqs: Some(8),
            speculation: Some(speculation),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn engine(path: &std::path::Path, speculation: Speculation, level: CpuLevel) -> Engine {
    Engine::load(path.to_str().unwrap(), &options(speculation, level)).unwrap()
}

fn chat(user: &str) -> String {
    format!(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )
}

const SOURCE: &str = "```python\nimport json\n\n\ndef load_items(path):\n    with open(path) as f:\n        return json.load(f)\n\n\ndef total_price(items):\n    total = 0\n    for item in items:\n        total += item[\"price\"] * item[\"count\"]\n    return total\n\n\ndef main():\n    items = load_items(\"items.json\")\n    print(total_price(items))\n\n\nif __name__ == \"__main__\":\n    main()\n```";

/// Eight prompts: code edits that copy most of their input, and plain questions.
fn prompts() -> Vec<String> {
    vec![
        chat(&format!(
            "Rename the function `total_price` to `order_total` and return the whole file.\n\n{SOURCE}"
        )),
        chat(&format!(
            "Add a docstring to `load_items` and return the whole file.\n\n{SOURCE}"
        )),
        chat("What is the capital of France? Answer in one sentence."),
        chat("Write a haiku about the sea."),
        chat(&format!(
            "Rename the variable `items` to `orders` everywhere and return the whole file.\n\n{SOURCE}"
        )),
        chat("List three prime numbers greater than 100."),
        "def fibonacci(n):".to_string(),
        chat("Explain what a mutex is in two sentences."),
    ]
}

#[test]
fn speculation_gives_the_tokens_of_decoding_at_every_level() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let levels = cpu::runnable();
    println!("levels on this CPU: {levels:?}");
    let sampled = SamplingParams {
        temperature: 0.7,
        top_p: Some(0.9),
        seed: 42,
        ..Default::default()
    };
    for level in levels {
        let off = engine(&path, Speculation::Off, level);
        let on = engine(&path, Speculation::Ngram, level);
        let ids: Vec<Vec<u32>> = prompts()
            .iter()
            .map(|p| on.tokenizer().encode(p).unwrap())
            .collect();
        let request = |p: &Vec<u32>, sampling: &SamplingParams, n: usize| GenerateRequest {
            sampling: sampling.clone(),
            ..GenerateRequest::new(p.clone(), n)
        };
        // The edit alone, greedy and sampled: the same tokens, most of them from drafts.
        for sampling in [SamplingParams::greedy(), sampled.clone()] {
            let (want, _) = tokens_of(off.generate(request(&ids[0], &sampling, 96)).unwrap());
            let (got, usage) = tokens_of(on.generate(request(&ids[0], &sampling, 96)).unwrap());
            assert_eq!(got, want, "{level}, {sampling:?}: the edit alone");
            println!(
                "{level}, temperature {}: {} tokens, {} of {} drafted tokens accepted",
                sampling.temperature,
                got.len(),
                usage.accepted_draft_tokens,
                usage.draft_tokens
            );
            if sampling.temperature == 0.0 {
                // How many tokens a step drafts follows measured step times (46 to 53 of these
                // 96 came from drafts, lower when other tests load the cores); how many of the
                // drafted ones are accepted does not.
                assert!(
                    usage.accepted_draft_tokens * 3 > got.len()
                        && usage.accepted_draft_tokens * 10 >= usage.draft_tokens * 7,
                    "{level}: {} of {} tokens came from drafts, of {} drafted",
                    usage.accepted_draft_tokens,
                    got.len(),
                    usage.draft_tokens
                );
            }
        }
        // Eight at once, greedy: each as plain decoding gives it alone.
        let greedy = SamplingParams::greedy();
        let requests = || ids.iter().map(|p| request(p, &greedy, 40)).collect();
        let want = one_by_one(&off, requests());
        let mut accepted = 0;
        for (i, (got, usage)) in at_once(&on, requests()).into_iter().enumerate() {
            assert_eq!(got, want[i], "{level}: prompt {i} of 8 at once");
            accepted += usage.accepted_draft_tokens;
        }
        assert!(accepted > 0, "{level}: no draft accepted in the batch");
    }
}

#[test]
fn a_draft_model_gives_the_tokens_of_decoding_at_every_level() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let spec = path.to_str().unwrap();
    for level in cpu::runnable() {
        let off = engine(&path, Speculation::Off, level);
        // The model drafting for itself: its greedy drafts are what it then chooses.
        let on = Engine::load(
            spec,
            &LoadOptions {
                draft_model: Some(spec.to_string()),
                ..options(Speculation::Draft, level)
            },
        )
        .unwrap();
        let ids: Vec<Vec<u32>> = prompts()
            .iter()
            .map(|p| on.tokenizer().encode(p).unwrap())
            .collect();
        // No stop token: a draft is never cut short by the answer's end.
        let request = |p: &Vec<u32>| GenerateRequest {
            sampling: SamplingParams::greedy(),
            stop_token_ids: Some(vec![]),
            ..GenerateRequest::new(p.clone(), 32)
        };
        let want = one_by_one(&off, ids.iter().map(request).collect());
        let (got, usage) = tokens_of(on.generate(request(&ids[2])).unwrap());
        assert_eq!(got, want[2], "{level}: alone");
        assert!(usage.draft_tokens > 0, "{level}: nothing drafted");
        // Its draft head covers the first 32,768 ids, the added tokens and the context's: a
        // rarer token of the answer is not drafted there (this answer has one).
        assert!(
            usage.accepted_draft_tokens * 4 >= usage.draft_tokens * 3,
            "{level}: {usage:?}"
        );
        for (i, (got, _)) in at_once(&on, ids.iter().map(request).collect())
            .into_iter()
            .enumerate()
        {
            assert_eq!(got, want[i], "{level}: prompt {i} of 8 at once");
        }
    }
    // A model of another vocabulary is no draft model for this one.
    let tiny = common::tiny("qwen2");
    let e = Engine::load(
        spec,
        &LoadOptions {
            draft_model: Some(tiny.to_str().unwrap().to_string()),
            ..options(Speculation::Auto, cpu::detected())
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("draft_model") && e.contains("another tokenizer"),
        "{e}"
    );
}
