//! `hearth graph validate | visualize | diff | decide` on contract files.

use std::path::Path;
use std::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// (exit code, stdout, stderr)
fn hearth(args: &[&str]) -> Result<(Option<i32>, String, String), std::io::Error> {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/shop.toml");

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn validate_visualize_and_diff() -> TestResult {
    let (code, out, err) = hearth(&["graph", "validate", "--strict", SHOP])?;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("0 error(s), 0 warning(s)"), "{out}");
    assert!(
        out.contains("INFO:\n  - Shared writers for 'response': answer, questioner, search, trend"),
        "{out}"
    );
    let (code, out, _) = hearth(&["graph", "visualize", SHOP])?;
    assert!(
        code == Some(0)
            && out.starts_with("flowchart TD")
            && out.contains("sup_main --> node_search"),
        "{out}"
    );
    assert!(out.contains("node_trend --> END"), "{out}");
    let (code, out, _) = hearth(&["graph", "visualize", "--doc", SHOP])?;
    assert!(
        code == Some(0) && out.starts_with("# 🏗️ Agent Architecture"),
        "{out}"
    );
    assert!(
        out.contains("| 80 | `to_fashion` | request.action=trends |  |"),
        "{out}"
    );

    let tmp = tempfile::tempdir()?;
    let shop = std::fs::read_to_string(SHOP)?;
    let b = tmp.path().join("b.toml");
    std::fs::write(&b, shop.replace("priority = 60", "priority = 65"))?;
    let (code, out, _) = hearth(&["graph", "diff", SHOP, path(&b)])?;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.trim(),
        "Behavioral changes:\n- search\n  - trigger_conditions changed (1 -> 1)"
    );
    // Reordered reads and a repeated writes entry are no change; `1` and `1.0` are equal.
    std::fs::write(
        &b,
        shop.replace(
            "reads = [\"request\", \"workflow\"]",
            "reads = [\"workflow\", \"request\"]",
        )
        .replace(
            "writes = [\"_internal\"]",
            "writes = [\"_internal\", \"_internal\"]",
        ),
    )?;
    let (code, out, _) = hearth(&["graph", "diff", SHOP, path(&b)])?;
    assert_eq!((code, out.trim()), (Some(0), "No changes detected."));
    // A writer that no longer writes a slice breaks its readers: exit 2.
    std::fs::write(
        &b,
        shop.replace(
            "writes = [\"response\", \"workflow\", \"_internal\"]",
            "writes = [\"response\", \"_internal\"]",
        ),
    )?;
    let (code, out, _) = hearth(&["graph", "diff", "--json", SHOP, path(&b)])?;
    assert_eq!(code, Some(2), "{out}");
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["changes"][0]["severity"], "breaking");
    assert_eq!(report["changes"][0]["details"][0], "writes: -workflow");
    Ok(())
}

#[test]
fn bad_contracts_are_reported() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let yaml = tmp.path().join("bad.yaml");
    std::fs::write(
        &yaml,
        "nodes:\n  - name: a\n    reads: [orders]\n    writes: [response]\n    trigger_conditions: [{priority: 1, when: {cart.ready: true}}]\n  - name: b\n    writes: [request]\n    trigger_conditions: [{priority: 1}]\n",
    )?;
    let (code, out, err) = hearth(&["graph", "validate", path(&yaml)])?;
    assert_eq!(code, Some(1));
    assert!(
        out.starts_with("ERRORS:\n  - Unknown slice 'orders' in node 'a' reads\nWARNINGS:\n"),
        "{out}"
    );
    assert!(
        out.contains("  - Writing to 'request' slice is discouraged (node 'b')"),
        "{out}"
    );
    // Hearth's own check is a warning, and absent without extra checks.
    let extra = "Trigger path 'cart.ready' of node 'a' names unknown slice 'cart'";
    assert!(out.contains(extra), "{out}");
    assert!(err.contains("bad.yaml"), "{err}");
    let (_, out, _) = hearth(&["graph", "validate", "--no-extra-checks", path(&yaml)])?;
    assert!(!out.contains(extra), "{out}");
    let (_, out, _) = hearth(&["graph", "validate", "--json", path(&yaml)])?;
    let json: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(json["findings"][0]["kind"], "unknown_slice_read");
    assert_eq!(json["findings"][0]["severity"], "error");

    let dup = tmp.path().join("dup.toml");
    std::fs::write(&dup, "[[nodes]]\nname = \"x\"\n[[nodes]]\nname = \"x\"\n")?;
    let (code, _, err) = hearth(&["graph", "validate", path(&dup)])?;
    assert!(
        code == Some(1) && err.contains("two nodes are named `x`"),
        "{err}"
    );
    let (code, _, err) = hearth(&["graph", "diff", SHOP, path(&dup)])?;
    assert!(
        code == Some(1) && err.contains("dup.toml") && err.contains("two nodes are named `x`"),
        "{err}"
    );

    let reserved = tmp.path().join("reserved.toml");
    std::fs::write(&reserved, "[[nodes]]\nname = \"call_subgraph::x\"\n")?;
    let (code, _, err) = hearth(&["graph", "validate", path(&reserved)])?;
    assert!(code == Some(1) && err.contains("reserved prefix"), "{err}");

    let typo = tmp.path().join("typo.toml");
    std::fs::write(&typo, "[[nodes]]\nname = \"x\"\nreeds = [\"request\"]\n")?;
    let (code, _, err) = hearth(&["graph", "validate", path(&typo)])?;
    assert!(
        code == Some(1) && err.contains("typo.toml") && err.contains("reeds"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_missing_entry_supervisor_is_named_and_fails_when_strict() -> TestResult {
    let (code, out, _) = hearth(&["graph", "validate", "--entry", "nosuch", SHOP])?;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("Entry supervisor 'nosuch' has no nodes (supervisors: main"),
        "{out}"
    );
    assert!(!out.contains("unreachable"), "{out}");
    let (code, out, _) = hearth(&["graph", "validate", "--strict", "--entry", "nosuch", SHOP])?;
    assert_eq!(code, Some(1), "{out}");
    Ok(())
}

#[test]
fn mermaid_ids_are_escaped() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let f = tmp.path().join("odd.toml");
    std::fs::write(
        &f,
        "[[nodes]]\nname = \"two words\"\nsupervisor = \"my-sup\"\n[[nodes]]\nname = \"end\"\nsupervisor = \"my-sup\"\n",
    )?;
    let (code, out, _) = hearth(&["graph", "visualize", path(&f)])?;
    assert_eq!(code, Some(0));
    assert!(
        out.contains("sup_my_2d_sup --> node_two_20_words[\"two words\"]"),
        "{out}"
    );
    assert!(out.contains("node_end[\"end\"]"), "{out}");
    Ok(())
}

#[test]
fn decide_prints_the_decision_and_its_trace() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let state = tmp.path().join("state.json");
    std::fs::write(
        &state,
        r#"{"request": {"action": "search"}, "response": {}, "_internal": {}}"#,
    )?;
    let decide = |extra: &[&str]| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        let mut args = vec!["graph", "decide", SHOP, "--state", path(&state)];
        args.extend_from_slice(extra);
        let (code, out, err) = hearth(&args)?;
        assert_eq!(code, Some(0), "{err}");
        Ok(serde_json::from_str(&out)?)
    };
    let t = decide(&[])?;
    assert_eq!(
        (t["selected_node"].as_str(), t["decision_type"].as_str()),
        (Some("search"), Some("rule_match"))
    );
    assert_eq!(t["matched_rules"][0]["condition"], "request.action=search");
    assert_eq!(t["matched_rules"][1]["node"], "answer");
    // The LLM may name a node that is no candidate, or `done`; an unknown name takes the best
    // rule candidate; a failing LLM leaves the decision to the rules.
    let t = decide(&["--llm-answer", "questioner"])?;
    assert_eq!(
        (t["selected_node"].as_str(), t["decision_type"].as_str()),
        (Some("questioner"), Some("llm_decision"))
    );
    let t = decide(&["--llm-answer", "done"])?;
    assert_eq!(t["decision"]["kind"], "done");
    let t = decide(&["--llm-answer", "ghost"])?;
    assert_eq!(
        (t["selected_node"].as_str(), t["decision_type"].as_str()),
        (Some("search"), Some("llm_decision"))
    );
    let t = decide(&["--llm-fails"])?;
    assert_eq!(
        (t["selected_node"].as_str(), t["llm_used"].as_bool()),
        (Some("search"), Some(false))
    );

    std::fs::write(&state, "[1]")?;
    let (code, _, err) = hearth(&["graph", "decide", SHOP, "--state", path(&state)])?;
    assert!(
        code == Some(1) && err.contains("state.json") && err.contains("JSON object"),
        "{err}"
    );
    Ok(())
}
