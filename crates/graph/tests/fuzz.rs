//! Property tests: contract files go through the loader and validator `hearth graph validate`
//! uses, and every text is answered with a report or an error, without panicking or hanging.
//! `HEARTH_FUZZ_CASES` sets the cases per property (`scripts/fuzz.sh` runs them long).

use hearth_graph::diff_contracts;
use hearth_graph::file::ContractFile;
use hearth_graph::{NodeContract, SubgraphContract, TriggerCondition, Validator};
use proptest::prelude::*;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

use hearth_fuzz::check;

/// Loads `text` as `hearth graph validate` does and runs everything it runs. `Err` is the
/// loader's or the registry's error message.
fn validate(dir: &Path, ext: &str, text: &str, strict: bool, entry: &str) -> Result<(), String> {
    let path = dir.join(format!("contracts.{ext}"));
    std::fs::write(&path, text).unwrap();
    let f = ContractFile::load(&path).map_err(|e| e.to_string())?;
    let registry = f.registry().map_err(|e| e.to_string())?;
    let mut v = Validator::new(&registry);
    v.strict = strict;
    v.entry = entry.to_string();
    v.known_services = f.services.clone().map(|s| s.into_iter().collect());
    let result = v.validate();
    let _ = result.to_string();
    let _ = result.has_errors();
    let _ = registry.mermaid();
    let _ = registry.check_runnable();
    let same =
        diff_contracts(registry.contracts(), registry.contracts()).map_err(|e| e.to_string())?;
    assert_eq!(
        same.to_text(),
        "No changes detected.",
        "a file differs from itself"
    );
    let _ = hearth_graph::python::sanitize::sanitize(
        &serde_json::to_value(&f.nodes).unwrap_or_default(),
        16,
    );
    Ok(())
}

// Generated contracts use printable text without line or paragraph separators: YAML, which
// reads the JSON spelling, refuses control characters that JSON writes raw (DEL, C1 controls)
// and breaks lines at U+2028 and U+2029.

/// Few names, so that nodes, supervisors and subgraphs refer to each other, clash and cycle.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "main", "a", "b", "c", "fashion", "request", "response", "_internal", "workflow", "",
        ])
        .prop_map(String::from),
        1 => "[^\\pC\\p{Zl}\\p{Zp}]{0,6}",
    ]
}

fn names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(name(), 0..4)
}

fn when_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        name().prop_map(Value::String),
    ]
}

fn trigger() -> impl Strategy<Value = TriggerCondition> {
    (
        any::<i64>(),
        prop::collection::btree_map("[^\\pC\\p{Zl}\\p{Zp}]{0,10}", when_value(), 0..3),
        prop::collection::btree_map("[^\\pC\\p{Zl}\\p{Zp}]{0,10}", when_value(), 0..2),
        prop::option::of("[^\\pC\\p{Zl}\\p{Zp}]{0,10}"),
    )
        .prop_map(|(priority, when, when_not, llm_hint)| TriggerCondition {
            priority,
            when: when.into_iter().collect(),
            when_not: when_not.into_iter().collect(),
            llm_hint,
        })
}

fn node() -> impl Strategy<Value = NodeContract> {
    (
        (name(), names(), names(), any::<bool>(), names(), name()),
        (
            prop::collection::vec(trigger(), 0..3),
            any::<bool>(),
            prop::option::of("[^\\pC\\p{Zl}\\p{Zp}]{0,2}"),
        ),
    )
        .prop_map(
            |(
                (name, reads, writes, requires_llm, services, supervisor),
                (triggers, terminal, icon),
            )| {
                let mut n = NodeContract::new(&name, &supervisor);
                n.reads = reads;
                n.writes = writes;
                n.requires_llm = requires_llm;
                n.services = services;
                n.trigger_conditions = triggers;
                n.is_terminal = terminal;
                n.icon = icon;
                n
            },
        )
}

fn subgraph() -> impl Strategy<Value = SubgraphContract> {
    (name(), names(), names(), name(), names(), names()).prop_map(
        |(subgraph_id, reads, writes, entrypoint, supervisors, nodes)| SubgraphContract {
            subgraph_id,
            description: String::new(),
            reads,
            writes,
            entrypoint,
            supervisors,
            nodes,
        },
    )
}

/// A contract file as written to disk.
#[derive(Debug, Clone, Serialize)]
struct FileOut {
    slices: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    services: Option<Vec<String>>,
    nodes: Vec<NodeContract>,
    subgraphs: Vec<SubgraphContract>,
}

fn contract_file() -> impl Strategy<Value = FileOut> {
    (
        names(),
        prop::option::of(names()),
        prop::collection::vec(node(), 0..6),
        prop::collection::vec(subgraph(), 0..3),
    )
        .prop_map(|(slices, services, nodes, subgraphs)| FileOut {
            slices,
            services,
            nodes,
            subgraphs,
        })
}

#[test]
fn structured_contracts_validate_in_toml_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let strategy = (contract_file(), any::<bool>(), name());
    check("contracts", strategy, |(file, strict, entry)| {
        // JSON is read through the YAML loader (YAML is a superset of it).
        let json = serde_json::to_string_pretty(&file).unwrap();
        let from_json = validate(dir.path(), "yaml", &json, strict, &entry);
        if let Ok(toml) = toml::to_string(&file) {
            let from_toml = validate(dir.path(), "toml", &toml, strict, &entry);
            // Both spellings of one file are the same contracts.
            prop_assert_eq!(from_json.is_ok(), from_toml.is_ok(), "{:?}", from_toml);
        }
        if let Err(e) = from_json {
            prop_assert!(!e.is_empty());
        }
        Ok(())
    });
}

#[test]
fn arbitrary_contract_text_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let shop = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop.toml"),
    )
    .unwrap();
    let text = prop_oneof![
        ".{0,200}",
        // The example with a slice cut out or replaced.
        (any::<usize>(), 0usize..60, ".{0,10}").prop_map(move |(at, n, with)| {
            let starts: Vec<usize> = shop.char_indices().map(|(i, _)| i).collect();
            let at = starts[at % starts.len()];
            let end = starts
                .iter()
                .copied()
                .filter(|&i| i >= at)
                .nth(n)
                .unwrap_or(shop.len());
            format!("{}{with}{}", &shop[..at], &shop[end..])
        }),
    ];
    let strategy = (
        text,
        prop::sample::select(vec!["toml", "yaml", "yml", "json"]),
    );
    check("contract text", strategy, |(text, ext)| {
        if let Err(e) = validate(dir.path(), ext, &text, true, "main") {
            prop_assert!(!e.is_empty());
        }
        Ok(())
    });
}
