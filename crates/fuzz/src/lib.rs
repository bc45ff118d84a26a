//! The property runner every crate's `tests/fuzz.rs` shares: a bounded
//! number of cases from `HEARTH_FUZZ_CASES`, a time limit per case, and a count the fuzz script
//! reads.
#![warn(missing_docs)]

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value};
use std::time::{Duration, Instant};

/// One input may take this long; more is a hang.
const CASE_LIMIT: Duration = Duration::from_secs(5);

fn cases() -> u32 {
    std::env::var("HEARTH_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Runs `test` on `cases()` inputs from `strategy`, failing on a slow case, and prints how
/// many ran (the fuzz script counts them).
pub fn check<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: cases(),
        // Failures found are kept as named regression tests, not in files beside the test.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let ran = std::cell::Cell::new(0u64);
    let result = runner.run(&strategy, |input| {
        ran.set(ran.get() + 1);
        let start = Instant::now();
        test(input)?;
        let took = start.elapsed();
        prop_assert!(took < CASE_LIMIT, "took {took:?}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    eprintln!("fuzz {name}: {} cases", ran.get());
}

/// JSON of any shape: leaves of every type (strings from `text`), arrays and objects (keys
/// from `keys`) nested up to `depth` deep with at most `width` items each.
pub fn json_value<T, K>(text: T, keys: K, depth: u32, width: usize) -> impl Strategy<Value = Value>
where
    T: Strategy<Value = String> + 'static,
    K: Strategy<Value = String> + Clone + 'static,
{
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, depth * 8, width as u32, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..width)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}
