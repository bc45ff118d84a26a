//! `GET /metrics`: what the server has done and holds, in Prometheus' text format —
//! requests by route and status, prompt, generated and drafted tokens, the scheduler's running and
//! waiting sequences, the KV pool's use, and histograms of time to first token and of the
//! decode rate.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The routes counted by name; any other path counts as `other`, so that a client cannot
/// grow the label set.
const ROUTES: [&str; 9] = [
    "/",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/models",
    "/health",
    "/metrics",
];

pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    prompt_tokens: Counter,
    cached_prompt_tokens: Counter,
    generated_tokens: Counter,
    draft_tokens: Counter,
    accepted_draft_tokens: Counter,
    running: Gauge,
    waiting: Gauge,
    kv_bytes: Gauge,
    kv_budget_bytes: Gauge,
    evictions: Gauge,
    preemptions: Gauge,
    first_token: Histogram,
    decode_rate: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hearth");
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "requests",
            "HTTP requests answered, by route and status",
            requests.clone(),
        );
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let prompt_tokens = counter(
            &mut registry,
            "prompt_tokens",
            "Prompt tokens of finished answers",
        );
        let cached_prompt_tokens = counter(
            &mut registry,
            "cached_prompt_tokens",
            "Prompt tokens read from the prefix cache instead of computed",
        );
        let generated_tokens = counter(&mut registry, "generated_tokens", "Tokens generated");
        let draft_tokens = counter(
            &mut registry,
            "draft_tokens",
            "Tokens drafted for speculative verification",
        );
        let accepted_draft_tokens = counter(
            &mut registry,
            "accepted_draft_tokens",
            "Drafted tokens that were what decoding chose",
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let running = gauge(
            &mut registry,
            "running_sequences",
            "Sequences in the running batch",
        );
        let waiting = gauge(
            &mut registry,
            "waiting_sequences",
            "Requests queued for a place in the batch",
        );
        let kv_bytes = gauge(&mut registry, "kv_cache_bytes", "Bytes the KV pool holds");
        let kv_budget_bytes = gauge(
            &mut registry,
            "kv_cache_budget_bytes",
            "Bytes the KV pool may hold",
        );
        let evictions = gauge(
            &mut registry,
            "kv_cache_evictions",
            "Idle caches evicted to stay under the budget, since the start",
        );
        let preemptions = gauge(
            &mut registry,
            "preemptions",
            "Running sequences whose caches were dropped for others to grow, since the start",
        );
        // 10 ms to ~80 s, and 0.5 to ~4,000 tokens/s.
        let first_token = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "time_to_first_token_seconds",
            "From a request's arrival to its first token",
            first_token.clone(),
        );
        let decode_rate = Histogram::new(exponential_buckets(0.5, 2.0, 14));
        registry.register(
            "decode_tokens_per_second",
            "Decode rate of each finished answer",
            decode_rate.clone(),
        );
        Self {
            registry,
            requests,
            prompt_tokens,
            cached_prompt_tokens,
            generated_tokens,
            draft_tokens,
            accepted_draft_tokens,
            running,
            waiting,
            kv_bytes,
            kv_budget_bytes,
            evictions,
            preemptions,
            first_token,
            decode_rate,
        }
    }

    pub fn request(&self, path: &str, status: u16) {
        let route = ROUTES.iter().find(|r| **r == path).map_or("other", |r| r);
        self.requests
            .get_or_create(&vec![
                ("route", route.to_string()),
                ("status", status.to_string()),
            ])
            .inc();
    }

    /// A finished generation's counts and times.
    pub fn finished(&self, s: &hearth_engine::Summary) {
        let u = &s.usage;
        self.prompt_tokens.inc_by(u.prompt_tokens as u64);
        self.cached_prompt_tokens
            .inc_by(u.cached_prompt_tokens as u64);
        self.generated_tokens.inc_by(u.completion_tokens as u64);
        self.draft_tokens.inc_by(u.draft_tokens as u64);
        self.accepted_draft_tokens
            .inc_by(u.accepted_draft_tokens as u64);
        if u.completion_tokens > 0 {
            self.first_token.observe(s.timings.first_token_s);
        }
        // One token has no rate of its own.
        if u.completion_tokens > 1 && s.timings.decode_tok_s.is_finite() {
            self.decode_rate.observe(s.timings.decode_tok_s);
        }
    }

    /// The text exposition, with the scheduler's gauges as they are now.
    pub fn render(&self, stats: &hearth_engine::SchedulerStats) -> String {
        let gauge = |g: &Gauge, v: usize| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        gauge(&self.running, stats.running);
        gauge(&self.waiting, stats.waiting);
        gauge(&self.kv_bytes, stats.kv_bytes);
        gauge(&self.kv_budget_bytes, stats.kv_budget_bytes);
        gauge(&self.evictions, stats.evictions);
        gauge(&self.preemptions, stats.preemptions);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_share_one_label() {
        let m = Metrics::new();
        m.request("/v1/chat/completions", 200);
        for i in 0..100 {
            m.request(&format!("/probe/{i}"), 404);
        }
        let text = m.render(&Default::default());
        assert!(
            text.contains(r#"hearth_requests_total{route="/v1/chat/completions",status="200"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"hearth_requests_total{route="other",status="404"} 100"#));
        assert_eq!(text.matches("route=\"other\"").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }
}
