//! The Rust side of the differential test against agent-contracts (`scripts/graph-diff.sh`):
//! reads one case per line on stdin (JSON), answers one JSON line per case on stdout.
//!
//! Cases: `{"op": "decide", "file": {…}, "state": {…}, "supervisor": "main",
//! "llm": null | {"answer": "<target>"} | {"fails": true}}`, `{"op": "validate", "file": {…},
//! "strict": bool, "known_services": [..] | null}`, `{"op": "diff", "a": {…}, "b": {…}}`,
//! `{"op": "sanitize", "value": …, "max_len": n}`. A contract set the registry refuses answers
//! `{"rejected": "<why>"}`.

use hearth_agent::{Llm, ScriptedLlm};
use hearth_graph::file::ContractFile;
use hearth_graph::python::sanitize::sanitize;
use hearth_graph::{diff_contracts, State, Validator};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::sync::Arc;

type Res<T> = Result<T, String>;

fn field<'a>(case: &'a Value, name: &str) -> Res<&'a Value> {
    case.get(name)
        .ok_or_else(|| format!("the case has no `{name}`"))
}

fn file(v: &Value) -> Res<ContractFile> {
    serde_json::from_value(v.clone()).map_err(|e| format!("contract file: {e}"))
}

fn decide(case: &Value) -> Res<Value> {
    let f = file(field(case, "file")?)?;
    let registry = match f.registry() {
        Ok(r) => r,
        Err(e) => return Ok(json!({"rejected": e.to_string()})),
    };
    let name = case
        .get("supervisor")
        .and_then(Value::as_str)
        .unwrap_or("main");
    let mut sup = f.supervisor(name);
    let llm = case.get("llm").filter(|v| !v.is_null());
    sup.llm = llm.map(|l| -> Arc<dyn Llm> {
        match l.get("answer").and_then(Value::as_str) {
            Some(a) => Arc::new(ScriptedLlm::new([
                json!({"next_node": a, "reasoning": "scripted"}).to_string(),
            ])),
            None => Arc::new(ScriptedLlm::new(Vec::<String>::new())),
        }
    });
    let slices = field(case, "state")?
        .as_object()
        .cloned()
        .ok_or("the state is not an object")?;
    let state = State { slices };
    let trace = futures::executor::block_on(sup.decide_with_trace(&state, &registry, None));
    serde_json::to_value(&trace).map_err(|e| e.to_string())
}

fn validate(case: &Value) -> Res<Value> {
    let f = file(field(case, "file")?)?;
    let registry = match f.registry() {
        Ok(r) => r,
        Err(e) => return Ok(json!({"rejected": e.to_string()})),
    };
    let mut v = Validator::new(&registry);
    v.strict = case.get("strict").and_then(Value::as_bool).unwrap_or(false);
    v.known_services = case
        .get("known_services")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        });
    serde_json::to_value(v.validate()).map_err(|e| e.to_string())
}

fn diff(case: &Value) -> Res<Value> {
    let (a, b) = (file(field(case, "a")?)?, file(field(case, "b")?)?);
    let (ra, rb) = match (a.registry(), b.registry()) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Ok(json!({"rejected": e.to_string()})),
    };
    match diff_contracts(ra.contracts(), rb.contracts()) {
        Ok(d) => Ok(json!({"report": d, "text": d.to_text(), "breaking": d.has_breaking()})),
        Err(e) => Ok(json!({"rejected": e.to_string()})),
    }
}

fn answer(line: &str) -> Value {
    let case: Value = match serde_json::from_str(line) {
        Ok(c) => c,
        Err(e) => return json!({"error": format!("not JSON: {e}")}),
    };
    let result = match case.get("op").and_then(Value::as_str) {
        Some("decide") => decide(&case),
        Some("validate") => validate(&case),
        Some("diff") => diff(&case),
        Some("sanitize") => {
            let max = case
                .get("max_len")
                .and_then(Value::as_u64)
                .unwrap_or(10_000) as usize;
            field(&case, "value").map(|v| sanitize(v, max))
        }
        other => Err(format!("unknown op {other:?}")),
    };
    result.unwrap_or_else(|e| json!({"error": e}))
}

fn main() -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        writeln!(out, "{}", answer(&line))?;
    }
    Ok(())
}
